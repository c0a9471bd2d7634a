// What kvserve-loadgen measured per request, and the statistics computed
// from it. Pure functions of the records: the unit tests feed synthetic ones.
//
// Metric definitions (all times in seconds on the client's steady clock,
// measured from the start of the phase):
//   TTFT  first token's arrival - send time
//   E2E   end (status received) - send time
//   TPOT  (E2E - TTFT) / (tokens - 1), for a request with >= 2 tokens
//   ITL   gaps between consecutive messages that carried tokens, pooled over
//         all successful requests. The server merges tokens into one message
//         when the client reads slower than the engine produces, so a gap
//         may cover several tokens (this is vLLM's benchmark's definition
//         too: one sample per streamed chunk).
// Only successful requests (status OK and a final message) enter the latency
// and throughput statistics; the others are counted by status code.
#ifndef KVSERVE_TOOLS_LOADGEN_STATS_H_
#define KVSERVE_TOOLS_LOADGEN_STATS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvserve::loadgen {

struct RequestRecord {
  int64_t index = 0;
  int64_t group = -1;
  int64_t prompt_len = -1;  // tokens sent (token-id prompt); -1 for a text prompt
  int64_t max_tokens = 0;
  bool sent = false;  // false: never started (duration limit reached first)
  double send_s = 0;  // when the call was started
  double end_s = 0;   // when its status arrived
  // One entry per message that carried tokens: arrival time and token count.
  std::vector<double> chunk_s;
  std::vector<int32_t> chunk_tokens;
  int64_t num_tokens = 0;  // sum of chunk_tokens
  // gRPC status (0 = OK) and message; `finished` is set when the final message arrived.
  int status_code = 0;
  std::string status_message;
  bool finished = false;
  std::string finish_reason;
  // Usage from the final message (zeros when it never arrived).
  int64_t usage_prompt_tokens = 0;
  int64_t usage_cached_prompt_tokens = 0;
  int64_t usage_completion_tokens = 0;
  bool cancelled_by_limit = false;  // cancelled by loadgen at --max_duration_s

  bool ok() const { return sent && status_code == 0 && finished; }
  // Derived per-request metrics (seconds); nullopt where undefined.
  std::optional<double> Ttft() const;
  std::optional<double> E2e() const;
  std::optional<double> Tpot() const;
  std::vector<double> Itls() const;
};

// The q-th percentile (q in [0, 100]) of `sorted` (ascending, non-empty) by
// linear interpolation between closest ranks, numpy.percentile's default
// ("linear"): h = (n - 1) * q / 100, result = x[floor h] + (h - floor h) *
// (x[floor h + 1] - x[floor h]). p0 is the minimum, p100 the maximum.
double Percentile(const std::vector<double>& sorted, double q);

struct Summary {
  int64_t count = 0;
  // All 0 when count == 0 (JSON writes them as null then).
  double mean = 0, stddev = 0, min = 0, max = 0, p50 = 0, p90 = 0, p99 = 0;
};
// Mean, population standard deviation, min, max and percentiles of `values`
// (any order).
Summary Summarize(std::vector<double> values);

// Service-level objectives in milliseconds; nullopt: not given.
struct Slo {
  std::optional<double> ttft_ms, tpot_ms, e2e_ms;
  bool any() const { return ttft_ms || tpot_ms || e2e_ms; }
};
// A successful request meets every given SLO (an undefined TPOT, for a
// single-token output, meets the TPOT objective).
bool MeetsSlo(const RequestRecord& r, const Slo& slo);

struct PhaseStats {
  int64_t num_requests = 0;  // records given
  int64_t num_sent = 0;
  int64_t num_completed = 0;  // ok()
  int64_t num_failed = 0;     // sent, not ok()
  int64_t num_not_sent = 0;
  int64_t num_cancelled_by_limit = 0;
  // Successful requests' tokens; prompt and cached from the server's usage.
  int64_t total_prompt_tokens = 0;
  int64_t total_cached_prompt_tokens = 0;
  int64_t total_output_tokens = 0;
  // Phase start (0) to the last status received (0 when nothing was sent).
  double duration_s = 0;
  double request_throughput = 0;       // completed / duration
  double output_token_throughput = 0;  // output tokens / duration
  double total_token_throughput = 0;   // (prompt + output tokens) / duration
  Summary ttft_s, tpot_s, itl_s, e2e_s;
  int64_t num_good = 0;        // completed and meeting every SLO (all completed without SLOs)
  double request_goodput = 0;  // num_good / duration
  std::map<std::string, int64_t> errors;  // status code name -> count (failed requests)
};

// "OK", "CANCELLED", ..., "UNAUTHENTICATED" (grpc::StatusCode numbering);
// "CODE_<n>" for anything else.
std::string StatusCodeName(int code);

PhaseStats ComputeStats(const std::vector<RequestRecord>& records, const Slo& slo);

}  // namespace kvserve::loadgen

#endif  // KVSERVE_TOOLS_LOADGEN_STATS_H_
