#include "tools/loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace kvserve::loadgen {

std::optional<double> RequestRecord::Ttft() const {
  if (!ok() || chunk_s.empty()) return std::nullopt;
  return chunk_s.front() - send_s;
}

std::optional<double> RequestRecord::E2e() const {
  if (!ok()) return std::nullopt;
  return end_s - send_s;
}

std::optional<double> RequestRecord::Tpot() const {
  const auto ttft = Ttft();
  const auto e2e = E2e();
  if (!ttft || !e2e || num_tokens < 2) return std::nullopt;
  return (*e2e - *ttft) / static_cast<double>(num_tokens - 1);
}

std::vector<double> RequestRecord::Itls() const {
  std::vector<double> gaps;
  if (!ok()) return gaps;
  for (size_t i = 1; i < chunk_s.size(); ++i) gaps.push_back(chunk_s[i] - chunk_s[i - 1]);
  return gaps;
}

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double h = (static_cast<double>(sorted.size()) - 1) * std::clamp(q, 0.0, 100.0) / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

Summary Summarize(std::vector<double> values) {
  Summary s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const double n = static_cast<double>(values.size());
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / n;
  double sq = 0;
  for (double v : values) sq += (v - s.mean) * (v - s.mean);
  s.stddev = std::sqrt(sq / n);
  s.min = values.front();
  s.max = values.back();
  s.p50 = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p99 = Percentile(values, 99);
  return s;
}

bool MeetsSlo(const RequestRecord& r, const Slo& slo) {
  if (!r.ok()) return false;
  if (slo.ttft_ms) {
    const auto ttft = r.Ttft();
    // A request without any token has no TTFT: the objective is not met.
    if (!ttft || *ttft * 1e3 > *slo.ttft_ms) return false;
  }
  if (slo.tpot_ms) {
    const auto tpot = r.Tpot();
    if (tpot && *tpot * 1e3 > *slo.tpot_ms) return false;
  }
  if (slo.e2e_ms && *r.E2e() * 1e3 > *slo.e2e_ms) return false;
  return true;
}

std::string StatusCodeName(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  if (code >= 0 && code < static_cast<int>(std::size(kNames))) return kNames[code];
  return absl::StrCat("CODE_", code);
}

PhaseStats ComputeStats(const std::vector<RequestRecord>& records, const Slo& slo) {
  PhaseStats st;
  std::vector<double> ttft, tpot, itl, e2e;
  st.num_requests = static_cast<int64_t>(records.size());
  for (const RequestRecord& r : records) {
    if (!r.sent) {
      ++st.num_not_sent;
      continue;
    }
    ++st.num_sent;
    st.duration_s = std::max(st.duration_s, r.end_s);
    if (r.cancelled_by_limit) ++st.num_cancelled_by_limit;
    if (!r.ok()) {
      ++st.num_failed;
      // Status OK without a final message would be a server bug; name it.
      ++st.errors[r.status_code == 0 ? std::string("NO_FINAL_MESSAGE")
                                     : StatusCodeName(r.status_code)];
      continue;
    }
    ++st.num_completed;
    st.total_prompt_tokens += r.usage_prompt_tokens;
    st.total_cached_prompt_tokens += r.usage_cached_prompt_tokens;
    st.total_output_tokens += r.num_tokens;
    if (auto v = r.Ttft()) ttft.push_back(*v);
    if (auto v = r.Tpot()) tpot.push_back(*v);
    if (auto v = r.E2e()) e2e.push_back(*v);
    for (double gap : r.Itls()) itl.push_back(gap);
    if (MeetsSlo(r, slo)) ++st.num_good;
  }
  st.ttft_s = Summarize(std::move(ttft));
  st.tpot_s = Summarize(std::move(tpot));
  st.itl_s = Summarize(std::move(itl));
  st.e2e_s = Summarize(std::move(e2e));
  if (st.duration_s > 0) {
    st.request_throughput = static_cast<double>(st.num_completed) / st.duration_s;
    st.output_token_throughput = static_cast<double>(st.total_output_tokens) / st.duration_s;
    st.total_token_throughput =
        static_cast<double>(st.total_prompt_tokens + st.total_output_tokens) / st.duration_s;
    st.request_goodput = static_cast<double>(st.num_good) / st.duration_s;
  }
  return st;
}

}  // namespace kvserve::loadgen
