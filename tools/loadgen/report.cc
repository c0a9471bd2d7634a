#include "tools/loadgen/report.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace kvserve::loadgen {
namespace {

// Milliseconds, or null when there were no samples.
Json SummaryMs(const Summary& s) {
  auto ms = [&](double v) { return s.count > 0 ? Json(v * 1e3) : Json(nullptr); };
  return Json{{"count", s.count}, {"mean", ms(s.mean)}, {"stddev", ms(s.stddev)},
              {"min", ms(s.min)}, {"p50", ms(s.p50)},   {"p90", ms(s.p90)},
              {"p99", ms(s.p99)}, {"max", ms(s.max)}};
}

Json Optional(const std::optional<double>& v) { return v ? Json(*v) : Json(nullptr); }

std::string Ms(const std::optional<double>& seconds) {
  return seconds ? absl::StrFormat("%.3f", *seconds * 1e3) : "";
}

}  // namespace

std::string RateString(double rate) {
  if (std::isinf(rate)) return "inf";
  return absl::StrFormat("%g", rate);
}

std::optional<double> PhaseReport::MetricDelta(const std::string& name) const {
  if (!metrics_before || !metrics_after) return std::nullopt;
  auto b = metrics_before->find(name);
  auto a = metrics_after->find(name);
  if (b == metrics_before->end() || a == metrics_after->end()) return std::nullopt;
  return a->second - b->second;
}

std::optional<double> PhaseReport::PrefixCacheHitRatio() const {
  const auto hits = MetricDelta("kvserve_prefix_cache_hits_total");
  const auto queries = MetricDelta("kvserve_prefix_cache_queries_total");
  if (!hits || !queries || *queries <= 0) return std::nullopt;
  return *hits / *queries;
}

Json RecordToJson(const RequestRecord& r) {
  std::vector<double> token_times_ms;  // per token, after the send time
  for (size_t c = 0; c < r.chunk_s.size(); ++c) {
    for (int t = 0; t < r.chunk_tokens[c]; ++t)
      token_times_ms.push_back((r.chunk_s[c] - r.send_s) * 1e3);
  }
  return Json{
      {"index", r.index},
      {"group", r.group},
      {"prompt_len", r.prompt_len},
      {"max_tokens", r.max_tokens},
      {"sent", r.sent},
      {"status", StatusCodeName(r.status_code)},
      {"status_message", r.status_message},
      {"cancelled_by_limit", r.cancelled_by_limit},
      {"finish_reason", r.finish_reason},
      {"send_s", r.send_s},
      {"end_s", r.end_s},
      {"ttft_ms", Optional(r.Ttft() ? std::optional<double>(*r.Ttft() * 1e3) : std::nullopt)},
      {"tpot_ms", Optional(r.Tpot() ? std::optional<double>(*r.Tpot() * 1e3) : std::nullopt)},
      {"e2e_ms", Optional(r.E2e() ? std::optional<double>(*r.E2e() * 1e3) : std::nullopt)},
      {"num_tokens", r.num_tokens},
      {"num_chunks", static_cast<int64_t>(r.chunk_s.size())},
      {"usage",
       {{"prompt_tokens", r.usage_prompt_tokens},
        {"cached_prompt_tokens", r.usage_cached_prompt_tokens},
        {"completion_tokens", r.usage_completion_tokens}}},
      {"token_times_ms", token_times_ms}};
}

Json PhaseToJson(const PhaseReport& p, bool with_requests) {
  const PhaseStats& s = p.stats;
  Json errors = Json::object();
  for (const auto& [name, count] : s.errors) errors[name] = count;
  Json deltas = nullptr;
  if (p.metrics_before && p.metrics_after) {
    deltas = Json::object();
    for (const auto& [name, after] : *p.metrics_after) {
      if (auto d = p.MetricDelta(name)) deltas[name] = *d;
    }
  }
  const double client_ratio = s.total_prompt_tokens > 0
                                  ? static_cast<double>(s.total_cached_prompt_tokens) /
                                        static_cast<double>(s.total_prompt_tokens)
                                  : 0.0;
  Json j{
      {"phase", p.index},
      {"request_rate", std::isinf(p.request_rate) ? Json("inf") : Json(p.request_rate)},
      {"concurrency", p.concurrency},
      {"num_requests", s.num_requests},
      {"num_sent", s.num_sent},
      {"num_completed", s.num_completed},
      {"num_failed", s.num_failed},
      {"num_not_sent", s.num_not_sent},
      {"num_cancelled_by_limit", s.num_cancelled_by_limit},
      {"duration_s", s.duration_s},
      {"total_prompt_tokens", s.total_prompt_tokens},
      {"total_cached_prompt_tokens", s.total_cached_prompt_tokens},
      {"total_output_tokens", s.total_output_tokens},
      {"request_throughput", s.request_throughput},
      {"output_token_throughput", s.output_token_throughput},
      {"total_token_throughput", s.total_token_throughput},
      {"ttft_ms", SummaryMs(s.ttft_s)},
      {"tpot_ms", SummaryMs(s.tpot_s)},
      {"itl_ms", SummaryMs(s.itl_s)},
      {"e2e_ms", SummaryMs(s.e2e_s)},
      {"goodput",
       {{"slo_ttft_ms", Optional(p.slo.ttft_ms)},
        {"slo_tpot_ms", Optional(p.slo.tpot_ms)},
        {"slo_e2e_ms", Optional(p.slo.e2e_ms)},
        {"num_good", s.num_good},
        {"request_goodput", s.request_goodput}}},
      {"errors", errors},
      {"prefix_cache",
       {{"hits_delta", Optional(p.MetricDelta("kvserve_prefix_cache_hits_total"))},
        {"queries_delta", Optional(p.MetricDelta("kvserve_prefix_cache_queries_total"))},
        {"hit_ratio", Optional(p.PrefixCacheHitRatio())},
        {"client_cached_token_ratio", client_ratio}}},
      {"server_metrics_delta", deltas},
      {"metrics_error", p.metrics_error},
  };
  if (with_requests) {
    Json requests = Json::array();
    for (const RequestRecord& r : p.records) requests.push_back(RecordToJson(r));
    j["requests"] = std::move(requests);
  }
  return j;
}

void WriteCsv(const std::vector<PhaseReport>& phases, std::ostream& out) {
  out << absl::StrJoin(kCsvColumns, ",") << "\n";
  for (const PhaseReport& p : phases) {
    for (const RequestRecord& r : p.records) {
      std::vector<std::string> times;
      for (size_t c = 0; c < r.chunk_s.size(); ++c) {
        for (int t = 0; t < r.chunk_tokens[c]; ++t) {
          times.push_back(absl::StrFormat("%.3f", (r.chunk_s[c] - r.send_s) * 1e3));
        }
      }
      // No field holds a comma or a quote: status names, reasons and numbers.
      out << absl::StrJoin(std::vector<std::string>{absl::StrCat(p.index),
                                                    RateString(p.request_rate),
                                                    absl::StrCat(r.index),
                                                    absl::StrCat(r.group),
                                                    absl::StrCat(r.prompt_len),
                                                    absl::StrCat(r.max_tokens),
                                                    r.sent ? "1" : "0",
                                                    StatusCodeName(r.status_code),
                                                    r.finish_reason,
                                                    absl::StrFormat("%.6f", r.send_s),
                                                    absl::StrFormat("%.6f", r.end_s),
                                                    Ms(r.Ttft()),
                                                    Ms(r.Tpot()),
                                                    Ms(r.E2e()),
                                                    absl::StrCat(r.num_tokens),
                                                    absl::StrCat(r.chunk_s.size()),
                                                    absl::StrCat(r.usage_prompt_tokens),
                                                    absl::StrCat(r.usage_cached_prompt_tokens),
                                                    absl::StrCat(r.usage_completion_tokens),
                                                    absl::StrJoin(times, ";")},
                           ",")
          << "\n";
    }
  }
}

std::string FormatPhase(const PhaseReport& p) {
  const PhaseStats& s = p.stats;
  std::string out;
  auto line = [&](const std::string& name, const std::string& value) {
    absl::StrAppendFormat(&out, "%-40s %s\n", name, value);
  };
  auto summary = [&](const char* name, const Summary& x) {
    if (x.count == 0) {
      line(absl::StrCat(name, " (ms) mean/p50/p90/p99:"), "n/a");
      return;
    }
    line(absl::StrCat(name, " (ms) mean/p50/p90/p99:"),
         absl::StrFormat("%.2f / %.2f / %.2f / %.2f", x.mean * 1e3, x.p50 * 1e3, x.p90 * 1e3,
                         x.p99 * 1e3));
  };
  absl::StrAppendFormat(&out, "==== kvserve-loadgen phase %d: rate=%s concurrency=%s ====\n",
                        p.index, RateString(p.request_rate),
                        p.concurrency > 0 ? absl::StrCat(p.concurrency) : "unlimited");
  line("Requests completed / sent / planned:",
       absl::StrFormat("%d / %d / %d", s.num_completed, s.num_sent, s.num_requests));
  line("Requests failed:", absl::StrCat(s.num_failed));
  if (!s.errors.empty()) {
    std::vector<std::string> parts;
    for (const auto& [name, count] : s.errors) parts.push_back(absl::StrCat(name, "=", count));
    line("Errors by status:", absl::StrJoin(parts, " "));
  }
  line("Duration (s):", absl::StrFormat("%.3f", s.duration_s));
  line("Prompt / cached / output tokens:",
       absl::StrFormat("%d / %d / %d", s.total_prompt_tokens, s.total_cached_prompt_tokens,
                       s.total_output_tokens));
  line("Request throughput (req/s):", absl::StrFormat("%.3f", s.request_throughput));
  line("Output token throughput (tok/s):", absl::StrFormat("%.2f", s.output_token_throughput));
  line("Total token throughput (tok/s):", absl::StrFormat("%.2f", s.total_token_throughput));
  summary("TTFT", s.ttft_s);
  summary("TPOT", s.tpot_s);
  summary("ITL", s.itl_s);
  summary("E2E", s.e2e_s);
  if (p.slo.any()) {
    line("Goodput (req/s meeting SLOs):",
         absl::StrFormat("%.3f (%d of %d)", s.request_goodput, s.num_good, s.num_completed));
  }
  if (auto ratio = p.PrefixCacheHitRatio()) {
    line("Prefix cache hit ratio (server):", absl::StrFormat("%.4f", *ratio));
  }
  if (auto pre = p.MetricDelta("kvserve_num_preemptions_total")) {
    line("Preemptions (server):", absl::StrFormat("%.0f", *pre));
  }
  if (!p.metrics_error.empty()) line("Metrics scrape:", p.metrics_error);
  return out;
}

std::string FormatSweepTable(const std::vector<PhaseReport>& phases) {
  std::string out = absl::StrFormat("%8s %6s %6s %9s %10s %9s %9s %9s %9s %9s %9s\n", "rate",
                                    "done", "failed", "req/s", "out_tok/s", "ttft_p50", "ttft_p99",
                                    "tpot_p50", "itl_p99", "e2e_p50", "e2e_p99");
  for (const PhaseReport& p : phases) {
    const PhaseStats& s = p.stats;
    absl::StrAppendFormat(&out, "%8s %6d %6d %9.3f %10.2f %9.1f %9.1f %9.2f %9.2f %9.1f %9.1f\n",
                          RateString(p.request_rate), s.num_completed, s.num_failed,
                          s.request_throughput, s.output_token_throughput, s.ttft_s.p50 * 1e3,
                          s.ttft_s.p99 * 1e3, s.tpot_s.p50 * 1e3, s.itl_s.p99 * 1e3,
                          s.e2e_s.p50 * 1e3, s.e2e_s.p99 * 1e3);
  }
  out += "(latencies in ms)\n";
  return out;
}

}  // namespace kvserve::loadgen
