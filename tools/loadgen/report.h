// kvserve-loadgen's outputs: the JSON result (--output_json), the per-request
// CSV (--output_csv) and the human-readable summary on stdout. docs/loadgen.md
// lists every field; keep it in step with PhaseToJson and kCsvColumns.
#ifndef KVSERVE_TOOLS_LOADGEN_REPORT_H_
#define KVSERVE_TOOLS_LOADGEN_REPORT_H_

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tools/loadgen/stats.h"

namespace kvserve::loadgen {

using Json = nlohmann::ordered_json;

// One phase (one open-loop rate, or the single run) with everything measured.
struct PhaseReport {
  int index = 0;
  double request_rate = 0;  // requests/s; +inf: all at once
  int64_t concurrency = 0;  // cap on calls in flight; 0: none
  Slo slo;
  PhaseStats stats;
  std::vector<RequestRecord> records;
  // Sums of the scraped counters (metrics_scrape.h) before and after the
  // phase; unset without --metrics_url or when a scrape failed.
  std::optional<std::map<std::string, double>> metrics_before, metrics_after;
  std::string metrics_error;  // why a scrape failed

  // after - before of a scraped counter; nullopt when unknown.
  std::optional<double> MetricDelta(const std::string& name) const;
  // Δhits / Δqueries of the prefix cache; nullopt when unknown or no query.
  std::optional<double> PrefixCacheHitRatio() const;
};

// The phase as JSON (fields in docs/loadgen.md); per-request records under
// "requests" when `with_requests`.
Json PhaseToJson(const PhaseReport& phase, bool with_requests);
Json RecordToJson(const RequestRecord& record);

// CSV: a header line of kCsvColumns, then one row per request of every phase.
// token_times_ms: each token's arrival after the send time, ';'-separated
// (tokens of one message share a time).
inline constexpr const char* kCsvColumns[] = {"phase",
                                              "request_rate",
                                              "index",
                                              "group",
                                              "prompt_len",
                                              "max_tokens",
                                              "sent",
                                              "status",
                                              "finish_reason",
                                              "send_s",
                                              "end_s",
                                              "ttft_ms",
                                              "tpot_ms",
                                              "e2e_ms",
                                              "num_tokens",
                                              "num_chunks",
                                              "prompt_tokens",
                                              "cached_prompt_tokens",
                                              "completion_tokens",
                                              "token_times_ms"};
void WriteCsv(const std::vector<PhaseReport>& phases, std::ostream& out);

// The summary of one phase, vLLM benchmark style, for stdout.
std::string FormatPhase(const PhaseReport& phase);
// One row per phase: rate, completed, throughputs, TTFT/TPOT/ITL/E2E p50/p99.
std::string FormatSweepTable(const std::vector<PhaseReport>& phases);

// "inf" or the shortest round-trip decimal.
std::string RateString(double rate);

}  // namespace kvserve::loadgen

#endif  // KVSERVE_TOOLS_LOADGEN_REPORT_H_
