// Scheduler benchmark. Prints a report; asserts nothing.
//
// (a) Overhead per decode step with N running requests (default 256): the
//     time the scheduler spends around one model step (Schedule +
//     BuildStepInput before it; Update after it: sampling, stop checks,
//     detokenization, output callbacks) against the model step itself, on
//     builtin:small at that batch. Target: under 2% of the step. Also the
//     same host work over a null model at 256 and 1024 requests (or
//     --null-requests), sampling on the engine thread and on the thread pool.
// (b) Shared-prefix workload: R requests (default 64) sharing a P-token
//     system prompt (default 512) plus 32 tokens of their own, all arriving
//     at once, generating 8 tokens each: prompt tokens computed and time to
//     first token with the prefix cache off and on.
//
//   kvserve_scheduler_bench [--quick] [--model builtin:small]
//                           [--requests 256] [--prefix-requests 64] [--prefix-len 512]
//                           [--null-requests 256,1024]
//   --quick: builtin:tiny, fewer steps (a smoke test of the program).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/model.h"
#include "kernels/cpu/thread_pool.h"
#include "scheduler/engine_core.h"

namespace {

using namespace kvserve::scheduler;
using BenchClock = std::chrono::steady_clock;

double Since(BenchClock::time_point t) {
  return std::chrono::duration<double>(BenchClock::now() - t).count();
}

// Returns all-zero logits: the host-side cost of a step without a model.
class NullRunner final : public StepRunner {
 public:
  explicit NullRunner(int64_t vocab) : vocab_(vocab) {}
  absl::StatusOr<kvserve::engine::StepOutput> Step(const kvserve::engine::StepInput& in) override {
    kvserve::engine::StepOutput out;
    out.vocab_size = vocab_;
    out.logits.assign(in.logits_indices.size() * vocab_, 0.0f);
    return out;
  }

 private:
  int64_t vocab_;
};

std::vector<int32_t> Random(std::mt19937& rng, int n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 256);
  return t;
}

struct StepTimes {
  double schedule = 0, model = 0, update = 0;
  int steps = 0;
};

// Drives the scheduler by hand so that each phase is timed separately.
bool TimedStep(EngineCore& core, StepTimes* t) {
  Scheduler& s = core.scheduler();
  auto t0 = BenchClock::now();
  const SchedulerOutput out = s.Schedule(Clock::now());
  if (out.empty()) return false;
  const kvserve::engine::StepInput in = s.BuildStepInput(out);
  auto t1 = BenchClock::now();
  auto result = core.runner().Step(in);
  auto t2 = BenchClock::now();
  if (!result.ok()) {
    std::fprintf(stderr, "step failed: %s\n", std::string(result.status().message()).c_str());
    std::exit(1);
  }
  s.Update(out, *result, Clock::now());
  auto t3 = BenchClock::now();
  t->schedule += std::chrono::duration<double>(t1 - t0).count();
  t->model += std::chrono::duration<double>(t2 - t1).count();
  t->update += std::chrono::duration<double>(t3 - t2).count();
  ++t->steps;
  return true;
}

// N running requests (prompt 32, seeded sampling T=0.8 top-p 0.9 or greedy,
// text detokenized, a stop string checked); prefill, then `steps` decode
// steps.
StepTimes DecodeOverhead(std::unique_ptr<EngineCore> core, int n, int steps, bool seeded = true) {
  std::mt19937 rng(1);
  int64_t sink = 0;
  for (int i = 0; i < n; ++i) {
    RequestParams p;
    p.prompt_tokens = Random(rng, 32);
    p.sampling.temperature = seeded ? 0.8f : 0.0f;
    p.sampling.top_p = seeded ? 0.9f : 1.0f;
    p.sampling.seed = static_cast<uint64_t>(i);
    p.stop.max_tokens = steps + 4;
    p.stop.ignore_eos = true;
    p.stop.stop_strings = {"\x01\x02\x03\x04"};
    auto status = core->AddRequest(i + 1, std::move(p),
                                   [&sink](RequestOutput&& o) { sink += o.token_ids.size(); });
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
      std::exit(1);
    }
  }
  StepTimes warm;
  while (core->Stats().total_output_tokens < n) TimedStep(*core, &warm);  // prefill
  StepTimes t;
  for (int i = 0; i < steps; ++i) {
    if (!TimedStep(*core, &t)) break;
  }
  if (core->Stats().last_step_seqs != n) std::fprintf(stderr, "warning: batch was not %d\n", n);
  return t;
}

EngineConfig DecodeConfig(int n, int steps) {
  EngineConfig c;
  c.block_size = 16;
  c.num_blocks = n * ((32 + steps + 4 + 15) / 16) + 1;
  c.batch = {.max_num_batched_tokens = std::max(8192, 32 * n), .max_num_seqs = n};
  return c;
}

void PartA(const kvserve::engine::Model& model, int n, int steps,
           const std::vector<int>& null_requests) {
  std::printf("(a) scheduler overhead per decode step, %d running requests\n", n);
  for (const bool seeded : {false, true}) {
    const StepTimes t =
        DecodeOverhead(EngineCore::ForModel(model, DecodeConfig(n, steps)), n, steps, seeded);
    const double sched = t.schedule / t.steps * 1e6, upd = t.update / t.steps * 1e6;
    const double model_us = t.model / t.steps * 1e6;
    std::printf("  %s, %s sampling, %d steps: model step %.2f ms\n", model.name.c_str(),
                seeded ? "seeded top-p" : "greedy", t.steps, model_us / 1e3);
    std::printf(
        "    schedule+build %.1f us (%.3f%%), update (sample+stop+emit) %.1f us (%.3f%%):"
        " %.3f%% of the model step\n",
        sched, 100.0 * sched / model_us, upd, 100.0 * upd / model_us,
        100.0 * (sched + upd) / model_us);
  }
  std::printf(
      "  the same host work over a null model (all-zero logits: top-p keeps 90%% of the"
      " vocabulary, the sampler's worst case):\n");
  auto& pool = kvserve::kernels::ThreadPool::Default();
  for (const bool seeded : {false, true}) {
    for (int m : null_requests) {
      for (const bool on_pool : {false, true}) {
        const EngineConfig c = DecodeConfig(m, 64);
        auto core = std::make_unique<EngineCore>(
            c, ModelInfoOf(model), std::make_unique<NullRunner>(model.config.vocab_size));
        // The null runner names no pool; a model's runner lends its own.
        core->scheduler().set_sampling_pool(on_pool ? &pool : nullptr);
        const StepTimes u = DecodeOverhead(std::move(core), m, 64, seeded);
        std::printf(
            "    %-12s %4d requests, sampling on %-13s: schedule+build %7.1f us, update %8.1f us"
            " per step (%.2f us per request)\n",
            seeded ? "seeded top-p" : "greedy", m, on_pool ? "the pool" : "one thread",
            u.schedule / u.steps * 1e6, u.update / u.steps * 1e6,
            (u.schedule + u.update) / u.steps * 1e6 / m);
      }
    }
  }
}

struct PrefixResult {
  int64_t prompt_tokens_computed = 0;
  int64_t hit_tokens = 0;
  std::vector<double> ttft;
  double wall = 0;
  int64_t steps = 0;
};

PrefixResult SharedPrefix(const kvserve::engine::Model& model, bool cache, int r, int prefix_len) {
  EngineConfig c;
  c.block_size = 16;
  c.num_blocks = r * ((prefix_len + 32 + 8 + 15) / 16) + 1;
  c.batch = {.max_num_batched_tokens = 2048, .max_num_seqs = r};
  c.enable_prefix_caching = cache;
  auto core = EngineCore::ForModel(model, c);
  std::mt19937 rng(2);
  const std::vector<int32_t> system = Random(rng, prefix_len);
  PrefixResult out;
  const auto start = BenchClock::now();
  for (int i = 0; i < r; ++i) {
    RequestParams p;
    p.prompt_tokens = system;
    const auto own = Random(rng, 32);
    p.prompt_tokens.insert(p.prompt_tokens.end(), own.begin(), own.end());
    p.sampling.temperature = 0.0f;
    p.stop.max_tokens = 8;
    p.stop.ignore_eos = true;
    auto s = core->AddRequest(i + 1, std::move(p), [&out](RequestOutput&& o) {
      if (o.finished) out.ttft.push_back(o.timings.time_to_first_token_s);
    });
    if (!s.ok()) std::exit(1);
  }
  out.steps = core->RunUntilIdle();
  out.wall = Since(start);
  const SchedulerStats st = core->Stats();
  out.prompt_tokens_computed = st.total_prompt_tokens_computed;
  out.hit_tokens = st.kv.prefix_hit_tokens;
  std::sort(out.ttft.begin(), out.ttft.end());
  return out;
}

void PartB(const kvserve::engine::Model& model, int r, int prefix_len) {
  std::printf("\n(b) shared prefix: %d requests x (%d shared + 32 own) prompt tokens, 8 out, %s\n",
              r, prefix_len, model.name.c_str());
  std::printf("  %-6s %14s %10s %10s %10s %10s %8s %8s\n", "cache", "prompt tok", "hit tok",
              "ttft mean", "ttft p50", "ttft max", "wall s", "steps");
  PrefixResult res[2];
  for (int on = 0; on < 2; ++on) {
    res[on] = SharedPrefix(model, on == 1, r, prefix_len);
    const PrefixResult& p = res[on];
    double mean = 0;
    for (double x : p.ttft) mean += x;
    mean /= std::max<size_t>(1, p.ttft.size());
    std::printf("  %-6s %14lld %10lld %9.3fs %9.3fs %9.3fs %8.2f %8lld\n", on ? "on" : "off",
                static_cast<long long>(p.prompt_tokens_computed),
                static_cast<long long>(p.hit_tokens), mean, p.ttft[p.ttft.size() / 2],
                p.ttft.back(), p.wall, static_cast<long long>(p.steps));
  }
  std::printf("  prompt tokens computed: %.1fx fewer with the cache; median TTFT %.1fx lower\n",
              double(res[0].prompt_tokens_computed) / double(res[1].prompt_tokens_computed),
              res[0].ttft[res[0].ttft.size() / 2] / res[1].ttft[res[1].ttft.size() / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string model_name = "builtin:small";
  int requests = 256, prefix_requests = 64, prefix_len = 512;
  std::vector<int> null_requests = {256, 1024};
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? argv[++i] : (std::exit(2), ""); };
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
      model_name = "builtin:tiny";
    } else if (std::strcmp(argv[i], "--model") == 0) {
      model_name = next();
    } else if (std::strcmp(argv[i], "--requests") == 0) {
      requests = std::atoi(next());
    } else if (std::strcmp(argv[i], "--prefix-requests") == 0) {
      prefix_requests = std::atoi(next());
    } else if (std::strcmp(argv[i], "--prefix-len") == 0) {
      prefix_len = std::atoi(next());
    } else if (std::strcmp(argv[i], "--null-requests") == 0) {
      null_requests.clear();
      for (const char* s = next(); *s != '\0';) {
        char* end = nullptr;
        const long v = std::strtol(s, &end, 10);
        if (end == s || v <= 0) {
          std::fprintf(stderr, "--null-requests: a comma-separated list of positive counts\n");
          return 2;
        }
        null_requests.push_back(static_cast<int>(v));
        s = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  auto model = kvserve::engine::LoadModel(model_name);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  std::printf("kvserve scheduler bench: %s, %d threads\n\n", model_name.c_str(),
              kvserve::kernels::ThreadPool::Default().num_threads());
  PartA(**model, requests, quick ? 4 : 16, null_requests);
  PartB(**model, prefix_requests, prefix_len);
  return 0;
}
