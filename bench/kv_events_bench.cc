// KV-cache events benchmark. Prints a report; asserts nothing.
//
// Engine step time with events off and on: C concurrent requests (default
// 32) with prompts of their own (so nearly every step stores blocks, and
// the small pool evicts as many), each replaced when it finishes, for S
// steps (default 400) of a real model (default builtin:tiny). With events
// on, every step's batch goes to a real KvEventsPublisher on a loopback
// port (no subscriber: it still encodes and sends every batch). Off and on
// (and recorded but not published, the engine thread's own share)
// alternate for R rounds (default 3); the best round of each is reported,
// with their ratio, and the events and batches per second the publisher
// sustained.
//
//   kvserve_kv_events_bench [--model builtin:tiny] [--concurrent 32]
//                           [--steps 400] [--rounds 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "engine/model.h"
#include "scheduler/engine_core.h"
#include "server/kv_events/kv_events_publisher.h"

namespace {

using namespace kvserve::scheduler;
using BenchClock = std::chrono::steady_clock;

struct Round {
  double seconds = 0;  // the engine thread's time over the steps: steps + event hand-off
  int64_t blocks_stored = 0;
  int64_t blocks_removed = 0;
  int64_t batches = 0;
};

// events: record them; publisher: hand them to it (else they are dropped on
// the engine thread, which isolates the recording's cost).
Round Run(const kvserve::engine::Model& model, int concurrent, int steps, bool events,
          kvserve::server::KvEventsPublisher* publisher, uint32_t seed) {
  EngineConfig config;
  config.block_size = 16;
  // Room for the running requests and little more: finished prompts are
  // evicted soon after.
  config.num_blocks = concurrent * (96 + 32) / config.block_size * 5 / 4 + 1;
  config.batch.max_num_seqs = concurrent;
  config.batch.max_num_batched_tokens = 512;
  config.enable_kv_events = events;
  config.hash_key = HashKey{seed, 1};
  auto core = EngineCore::ForModel(model, config);
  std::mt19937 rng(seed);
  RequestId next_id = 1;
  int in_flight = 0;
  auto submit = [&] {
    RequestParams p;
    p.prompt_tokens.resize(64 + rng() % 33);
    for (auto& t : p.prompt_tokens) t = static_cast<int32_t>(rng() % 250);
    p.sampling.temperature = 0.0f;
    p.stop.max_tokens = 16 + static_cast<int32_t>(rng() % 17);
    p.stop.ignore_eos = true;
    ++in_flight;
    const absl::Status s = core->AddRequest(next_id++, std::move(p), [&](RequestOutput&& out) {
      if (out.finished) --in_flight;
    });
    if (!s.ok()) std::abort();
  };
  Round r;
  const auto start = BenchClock::now();
  for (int step = 0; step < steps; ++step) {
    while (in_flight < concurrent) submit();
    core->Step();
    if (events) {
      KvEventBatch batch = core->TakeKvEvents(0.0);
      if (batch.events.empty()) continue;
      for (const KvEvent& e : batch.events) {
        if (const auto* s = std::get_if<BlockStoredEvent>(&e))
          r.blocks_stored += s->block_ids.size();
        if (const auto* d = std::get_if<BlockRemovedEvent>(&e))
          r.blocks_removed += d->block_ids.size();
      }
      ++r.batches;
      if (publisher != nullptr) publisher->Enqueue(std::move(batch));
    }
  }
  r.seconds = std::chrono::duration<double>(BenchClock::now() - start).count();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_name = "builtin:tiny";
  int concurrent = 32, steps = 400, rounds = 3;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? argv[++i] : (std::exit(2), ""); };
    if (std::strcmp(argv[i], "--model") == 0) {
      model_name = next();
    } else if (std::strcmp(argv[i], "--concurrent") == 0) {
      concurrent = std::atoi(next());
    } else if (std::strcmp(argv[i], "--steps") == 0) {
      steps = std::atoi(next());
    } else if (std::strcmp(argv[i], "--rounds") == 0) {
      rounds = std::atoi(next());
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
  auto publisher = kvserve::server::KvEventsPublisher::Start({.endpoint = "tcp://127.0.0.1:0"});
  if (!publisher.ok()) {
    std::fprintf(stderr, "%s\n", std::string(publisher.status().message()).c_str());
    return 1;
  }
  (*publisher)->SetTopic("kv@bench@" + model_name);
  Round best_off, best_recorded, best_on;
  best_off.seconds = best_recorded.seconds = best_on.seconds = 1e30;
  for (int round = 0; round < rounds; ++round) {
    const Round off = Run(**model, concurrent, steps, false, nullptr, 7 + round);
    const Round recorded = Run(**model, concurrent, steps, true, nullptr, 7 + round);
    const Round on = Run(**model, concurrent, steps, true, publisher->get(), 7 + round);
    if (off.seconds < best_off.seconds) best_off = off;
    if (recorded.seconds < best_recorded.seconds) best_recorded = recorded;
    if (on.seconds < best_on.seconds) best_on = on;
  }
  (*publisher)->Stop();
  const kvserve::server::KvEventsCounters counters = (*publisher)->counters();
  std::printf("kvserve kv events bench: %s, %d concurrent requests, %d steps, best of %d\n",
              model_name.c_str(), concurrent, steps, rounds);
  std::printf("  step time, events off  %.3f ms\n", 1e3 * best_off.seconds / steps);
  std::printf("  step time, recorded    %.3f ms  (recorded / off = %.4f; not published)\n",
              1e3 * best_recorded.seconds / steps, best_recorded.seconds / best_off.seconds);
  std::printf("  step time, events on   %.3f ms  (on / off = %.4f)\n",
              1e3 * best_on.seconds / steps, best_on.seconds / best_off.seconds);
  std::printf(
      "  events on: %lld blocks stored, %lld removed in %lld batches; %.0f blocks/s, "
      "%.0f batches/s sustained\n",
      static_cast<long long>(best_on.blocks_stored), static_cast<long long>(best_on.blocks_removed),
      static_cast<long long>(best_on.batches),
      (best_on.blocks_stored + best_on.blocks_removed) / best_on.seconds,
      best_on.batches / best_on.seconds);
  std::printf("  publisher: %lld batches published, %lld dropped (all rounds)\n",
              static_cast<long long>(counters.published), static_cast<long long>(counters.dropped));
  return 0;
}
