// kvserve-loadgen: a load generator for the kvserve gRPC API. Flags in this
// file; workload.h builds the requests, runner.h sends them, stats.h and
// report.h turn the records into the summary, JSON and CSV. docs/loadgen.md.
//
// Exit status: 0 every planned request completed; 1 some request failed or
// was never sent (the report is still written); 2 bad flags or dataset;
// 3 the server could not be reached (GetModelInfo failed; no report).

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cli_help.h"
#include "tools/loadgen/metrics_scrape.h"
#include "tools/loadgen/progress.h"
#include "tools/loadgen/report.h"
#include "tools/loadgen/runner.h"
#include "tools/loadgen/workload.h"

ABSL_FLAG(std::string, address, "localhost:50051", "Server address, host:port (plain TCP).");
ABSL_FLAG(int32_t, num_channels, 4,
          "gRPC channels (TCP connections); calls are spread round-robin.");
ABSL_FLAG(double, model_info_timeout_s, 30, "Seconds to wait for the server's GetModelInfo.");

ABSL_FLAG(int64_t, num_requests, 100, "Requests per phase (>= 1).");
ABSL_FLAG(std::string, request_rate, "inf",
          "Open loop: Poisson arrivals at this many requests/s; inf: all at once.");
ABSL_FLAG(int64_t, concurrency, 0,
          "At most this many requests in flight (closed loop with --request_rate=inf); 0: no cap.");
ABSL_FLAG(std::vector<std::string>, sweep_rates, {},
          "Comma-separated rates: one open-loop phase per rate (overrides --request_rate).");
ABSL_FLAG(double, max_duration_s, 0,
          "Per phase: stop sending and cancel the calls in flight after this long; 0: no limit.");
ABSL_FLAG(double, request_timeout_s, 600, "gRPC deadline of each request; 0: none.");

ABSL_FLAG(int64_t, prompt_len, 128,
          "Prompt tokens per request (after the shared prefix, if any): fixed value or the mean.");
ABSL_FLAG(std::string, prompt_len_dist, "fixed", "fixed, uniform, normal or lognormal.");
ABSL_FLAG(double, prompt_len_stddev, 0, "normal / lognormal: standard deviation of the length.");
ABSL_FLAG(double, prompt_len_range, 0, "uniform: lengths in [prompt_len - R, prompt_len + R].");
ABSL_FLAG(int64_t, output_len, 128, "Output tokens per request (max_tokens): fixed or the mean.");
ABSL_FLAG(std::string, output_len_dist, "fixed", "fixed, uniform, normal or lognormal.");
ABSL_FLAG(double, output_len_stddev, 0, "normal / lognormal: standard deviation of the length.");
ABSL_FLAG(double, output_len_range, 0, "uniform: lengths in [output_len - R, output_len + R].");
ABSL_FLAG(int64_t, shared_prefix_len, 0,
          "Shared-prefix mode: requests of one group start with the same random tokens.");
ABSL_FLAG(int64_t, num_prefix_groups, 1, "Shared-prefix groups; request i is in group i % G.");
ABSL_FLAG(std::string, dataset, "",
          "JSONL file of {\"prompt\": \"...\"[, \"output_len\": N]} lines: text prompts.");
ABSL_FLAG(bool, ignore_eos, true, "Generate exactly max_tokens (ignore EOS).");
ABSL_FLAG(double, temperature, 0, "Sampling temperature (0: greedy).");
ABSL_FLAG(uint64_t, seed, 0,
          "Seed of prompts, lengths, arrivals and sampling (phase k: seed + k).");

ABSL_FLAG(double, slo_ttft_ms, 0, "Goodput SLO on TTFT (ms); 0: none.");
ABSL_FLAG(double, slo_tpot_ms, 0, "Goodput SLO on TPOT (ms); 0: none.");
ABSL_FLAG(double, slo_e2e_ms, 0, "Goodput SLO on end-to-end latency (ms); 0: none.");

ABSL_FLAG(std::string, metrics_url, "",
          "The server's /metrics (http://host:port/metrics): prefix-cache hit ratio and counter "
          "deltas per phase.");
ABSL_FLAG(std::string, output_json, "", "Write the JSON result here.");
ABSL_FLAG(bool, json_requests, true, "Include per-request records in the JSON result.");
ABSL_FLAG(std::string, output_csv, "", "Write one CSV row per request here.");
ABSL_FLAG(bool, progress, true, "Progress bar on stderr (only when stderr is a TTY).");

namespace {

using namespace kvserve::loadgen;  // NOLINT: one file, one namespace in use

constexpr int kExitFailedRequests = 1;
constexpr int kExitUsage = 2;
constexpr int kExitUnreachable = 3;

int Usage(const std::string& message) {
  std::cerr << "kvserve-loadgen: " << message << std::endl;
  return kExitUsage;
}

bool ParseRate(const std::string& text, double* rate) {
  if (text == "inf") {
    *rate = INFINITY;
    return true;
  }
  return absl::SimpleAtod(text, rate) && *rate > 0 && !std::isnan(*rate);
}

std::optional<double> SloFlag(double ms) {
  return ms > 0 ? std::optional<double>(ms) : std::nullopt;
}

void Scrape(const std::string& url, std::optional<std::map<std::string, double>>* into,
            std::string* error) {
  if (url.empty()) return;
  auto sums = ScrapeMetrics(url);
  if (!sums.ok()) {
    *error = std::string(sums.status().message());
    std::cerr << "kvserve-loadgen: metrics scrape failed: " << *error << std::endl;
    return;
  }
  into->emplace();
  for (const char* name : kScrapedCounters) (**into)[name] = (*sums)[name];
}

Json ModelJson(const kvserve::v1::GetModelInfoResponse& m) {
  return Json{
      {"model_name", m.model_name()},
      {"architecture", m.architecture()},
      {"max_model_len", m.max_model_len()},
      {"vocab_size", m.vocab_size()},
      {"block_size", m.block_size()},
      {"num_kv_blocks", m.num_kv_blocks()},
      {"backend", m.backend()},
      {"version", m.version()},
      {"max_num_seqs", m.max_num_seqs()},
      {"max_num_batched_tokens", m.max_num_batched_tokens()},
      {"eos_token_ids", std::vector<int32_t>(m.eos_token_ids().begin(), m.eos_token_ids().end())}};
}

}  // namespace

int main(int argc, char** argv) {
  kvserve::common::ConfigureHelp(
      {.usage = "kvserve-loadgen --address=HOST:PORT [--request_rate=R | --concurrency=N | "
                "--sweep_rates=R1,R2,...] [workload flags] [--output_json=F --output_csv=F]\n"
                "Load generator for the kvserve gRPC API; see docs/loadgen.md.",
       .flag_files = {"tools/loadgen/loadgen_main.cc"}});
  const std::vector<char*> rest = kvserve::common::ParseCommandLine(argc, argv);
  if (rest.size() > 1) return Usage(absl::StrCat("unexpected argument: ", rest[1]));

  // ---- flags -> options ----
  std::vector<double> rates;
  for (const std::string& r : absl::GetFlag(FLAGS_sweep_rates)) {
    double rate;
    if (!ParseRate(r, &rate)) return Usage(absl::StrCat("--sweep_rates: bad rate \"", r, "\""));
    rates.push_back(rate);
  }
  if (rates.empty()) {
    double rate;
    if (!ParseRate(absl::GetFlag(FLAGS_request_rate), &rate)) {
      return Usage("--request_rate: must be a positive number or inf");
    }
    rates.push_back(rate);
  }
  const int64_t num_requests = absl::GetFlag(FLAGS_num_requests);
  if (num_requests < 1) return Usage("--num_requests: must be >= 1");
  if (absl::GetFlag(FLAGS_concurrency) < 0) return Usage("--concurrency: must be >= 0");
  if (absl::GetFlag(FLAGS_prompt_len) < 1 || absl::GetFlag(FLAGS_output_len) < 1) {
    return Usage("--prompt_len and --output_len: must be >= 1");
  }
  WorkloadOptions workload;
  workload.num_requests = num_requests;
  auto prompt_dist = ParseLengthDist(absl::GetFlag(FLAGS_prompt_len_dist));
  auto output_dist = ParseLengthDist(absl::GetFlag(FLAGS_output_len_dist));
  if (!prompt_dist.ok())
    return Usage(absl::StrCat("--prompt_len_dist: ", prompt_dist.status().message()));
  if (!output_dist.ok())
    return Usage(absl::StrCat("--output_len_dist: ", output_dist.status().message()));
  workload.prompt_len = {*prompt_dist, static_cast<double>(absl::GetFlag(FLAGS_prompt_len)),
                         absl::GetFlag(FLAGS_prompt_len_stddev),
                         absl::GetFlag(FLAGS_prompt_len_range)};
  workload.output_len = {*output_dist, static_cast<double>(absl::GetFlag(FLAGS_output_len)),
                         absl::GetFlag(FLAGS_output_len_stddev),
                         absl::GetFlag(FLAGS_output_len_range)};
  workload.shared_prefix_len = absl::GetFlag(FLAGS_shared_prefix_len);
  workload.num_prefix_groups = absl::GetFlag(FLAGS_num_prefix_groups);
  if (!absl::GetFlag(FLAGS_dataset).empty()) {
    if (auto s = ReadDataset(absl::GetFlag(FLAGS_dataset), &workload.dataset_prompts,
                             &workload.dataset_output_lens);
        !s.ok()) {
      return Usage(std::string(s.message()));
    }
  }
  Slo slo{SloFlag(absl::GetFlag(FLAGS_slo_ttft_ms)), SloFlag(absl::GetFlag(FLAGS_slo_tpot_ms)),
          SloFlag(absl::GetFlag(FLAGS_slo_e2e_ms))};

  // ---- the server ----
  Runner runner(absl::GetFlag(FLAGS_address), absl::GetFlag(FLAGS_num_channels));
  kvserve::v1::GetModelInfoResponse info;
  if (grpc::Status s = runner.GetModelInfo(absl::GetFlag(FLAGS_model_info_timeout_s), &info);
      !s.ok()) {
    std::cerr << "kvserve-loadgen: GetModelInfo on " << absl::GetFlag(FLAGS_address)
              << " failed: " << StatusCodeName(s.error_code()) << ": " << s.error_message()
              << std::endl;
    return kExitUnreachable;
  }
  workload.vocab_size = info.vocab_size();
  workload.max_model_len = info.max_model_len();
  workload.excluded_token_ids.assign(info.eos_token_ids().begin(), info.eos_token_ids().end());

  // ---- phases ----
  const std::string metrics_url = absl::GetFlag(FLAGS_metrics_url);
  const bool progress = absl::GetFlag(FLAGS_progress) && StderrIsTty();
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const auto start_unix = std::time(nullptr);
  std::vector<PhaseReport> phases;
  for (size_t k = 0; k < rates.size(); ++k) {
    // A fresh seed per phase: a later phase must not hit the prefix cache
    // with the prompts of an earlier one.
    workload.seed = seed + k;
    auto specs = GenerateWorkload(workload);
    if (!specs.ok()) return Usage(std::string(specs.status().message()));
    const std::vector<double> arrivals = PoissonArrivals(num_requests, rates[k], workload.seed);

    PhaseReport phase;
    phase.index = static_cast<int>(k);
    phase.request_rate = rates[k];
    phase.concurrency = absl::GetFlag(FLAGS_concurrency);
    phase.slo = slo;
    PhaseOptions options;
    options.label = absl::StrCat("rate=", RateString(rates[k]));
    options.concurrency = phase.concurrency;
    options.max_duration_s = absl::GetFlag(FLAGS_max_duration_s);
    options.request_timeout_s = absl::GetFlag(FLAGS_request_timeout_s);
    options.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
    options.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
    options.request_id_prefix = absl::StrCat("loadgen-", start_unix, "-", k, "-");
    options.progress = progress;

    Scrape(metrics_url, &phase.metrics_before, &phase.metrics_error);
    phase.records = runner.RunPhase(*specs, arrivals, options);
    if (phase.metrics_before) {
      // The server may count a request's end just after its client saw the
      // status: rescrape (up to 2 s) until every sent request is counted as
      // finished or rejected.
      int64_t sent = 0;
      for (const RequestRecord& r : phase.records) sent += r.sent ? 1 : 0;
      const auto settle_end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
      for (;;) {
        phase.metrics_after.reset();
        Scrape(metrics_url, &phase.metrics_after, &phase.metrics_error);
        const auto finished = phase.MetricDelta("kvserve_requests_finished_total");
        const auto rejected = phase.MetricDelta("kvserve_requests_rejected_total");
        if (!phase.metrics_after || !finished || !rejected ||
            *finished + *rejected >= static_cast<double>(sent) ||
            std::chrono::steady_clock::now() >= settle_end) {
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    phase.stats = ComputeStats(phase.records, slo);
    std::cout << FormatPhase(phase) << std::flush;
    phases.push_back(std::move(phase));
  }
  if (phases.size() > 1) std::cout << "\n" << FormatSweepTable(phases) << std::flush;

  // ---- outputs ----
  int exit_code = 0;
  for (const PhaseReport& p : phases) {
    if (p.stats.num_completed != p.stats.num_requests) exit_code = kExitFailedRequests;
  }
  if (const std::string path = absl::GetFlag(FLAGS_output_json); !path.empty()) {
    Json config = Json::object();
    for (const char* name : {"address",           "num_channels",
                             "num_requests",      "request_rate",
                             "concurrency",       "sweep_rates",
                             "max_duration_s",    "request_timeout_s",
                             "prompt_len",        "prompt_len_dist",
                             "prompt_len_stddev", "prompt_len_range",
                             "output_len",        "output_len_dist",
                             "output_len_stddev", "output_len_range",
                             "shared_prefix_len", "num_prefix_groups",
                             "dataset",           "ignore_eos",
                             "temperature",       "seed",
                             "slo_ttft_ms",       "slo_tpot_ms",
                             "slo_e2e_ms",        "metrics_url"}) {
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      config[name] = flag != nullptr ? flag->CurrentValue() : "";
    }
    Json out{{"tool", "kvserve-loadgen"}, {"start_time_unix", static_cast<int64_t>(start_unix)},
             {"exit_code", exit_code},    {"config", config},
             {"model", ModelJson(info)},  {"num_phases", phases.size()},
             {"phases", Json::array()}};
    for (const PhaseReport& p : phases)
      out["phases"].push_back(PhaseToJson(p, absl::GetFlag(FLAGS_json_requests)));
    std::ofstream f(path);
    f << out.dump(2) << "\n";
    if (!f) {
      std::cerr << "kvserve-loadgen: cannot write " << path << std::endl;
      return kExitUsage;
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_output_csv); !path.empty()) {
    std::ofstream f(path);
    WriteCsv(phases, f);
    if (!f) {
      std::cerr << "kvserve-loadgen: cannot write " << path << std::endl;
      return kExitUsage;
    }
  }
  return exit_code;
}
