// Reading the daemon's Prometheus /metrics from kvserve-loadgen: a minimal
// HTTP/1.0 GET over a TCP socket (plain http only; the endpoint is a loopback
// or cluster-internal port) and a parser for the text exposition format that
// sums each metric's samples over its label sets.
#ifndef KVSERVE_TOOLS_LOADGEN_METRICS_SCRAPE_H_
#define KVSERVE_TOOLS_LOADGEN_METRICS_SCRAPE_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace kvserve::loadgen {

// GET `url` ("http://host:port/path"); the body when the status is 200.
// Bounded: connect, send and every read time out after `timeout_s`.
absl::StatusOr<std::string> HttpGet(const std::string& url, double timeout_s = 5.0);

// name -> sum of the values of all its samples (label sets). Comment lines
// and histogram series are kept as written (name_bucket, name_sum, ...).
std::map<std::string, double> ParsePrometheusSums(const std::string& text);

// The counters loadgen reports as before/after deltas.
inline constexpr const char* kScrapedCounters[] = {
    "kvserve_prefix_cache_hits_total", "kvserve_prefix_cache_queries_total",
    "kvserve_requests_finished_total", "kvserve_generation_tokens_total",
    "kvserve_prompt_tokens_total",     "kvserve_num_preemptions_total",
    "kvserve_requests_rejected_total",
};

// HttpGet + ParsePrometheusSums.
absl::StatusOr<std::map<std::string, double>> ScrapeMetrics(const std::string& url);

}  // namespace kvserve::loadgen

#endif  // KVSERVE_TOOLS_LOADGEN_METRICS_SCRAPE_H_
