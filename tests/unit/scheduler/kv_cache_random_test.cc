// Randomized long runs of the KvCacheManager under a scheduler-like driver:
// requests arrive with prompts sharing random prefixes (and salts), are
// admitted with prefix-cache lookups, computed in random chunks, decode one
// token at a time, finish, are aborted at any stage, and are preempted (freed,
// then recomputed) when the pool, kept small, runs out of blocks.
//
// Besides CheckInvariants after every event, the driver simulates the K/V
// storage: every slot holds a fingerprint of (salt, tokens 0..p) written when
// position p is computed. Each step checks that
// - a written block is held by the writer alone and not cached;
// - every position a computed token attends to (0..p) still holds the
//   request's own fingerprint, so no block was reused or overwritten under it;
// - every prefix-cache hit serves exactly the request's own K/V.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/kv_cache_manager.h"

namespace kvserve::scheduler {
namespace {

using Tokens = std::vector<int32_t>;

uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct SimConfig {
  int32_t num_blocks;
  int32_t block_size;
  int num_events;
  uint64_t seed;
};

struct SimRequest {
  RequestId id = 0;
  int salt = 0;
  Tokens tokens;             // prompt + output so far
  std::vector<uint64_t> fp;  // fp[p]: fingerprint of (salt, tokens[0..p])
  size_t max_len = 0;        // finishes when tokens.size() reaches it
  int32_t num_computed = 0;
  bool running = false;

  void Append(int32_t token) {
    const uint64_t prev = fp.empty() ? Mix(0x5a17 + static_cast<uint64_t>(salt)) : fp.back();
    tokens.push_back(token);
    fp.push_back(Mix(prev ^ (static_cast<uint64_t>(token) * 0x9e3779b97f4a7c15ULL)));
  }
};

struct SimCounters {
  int64_t steps = 0, admitted = 0, admit_failures = 0, grow_failures = 0, preemptions = 0;
  int64_t finished = 0, aborted = 0, hit_tokens = 0, resumed_hits = 0;
};

class Simulation {
 public:
  explicit Simulation(const SimConfig& c)
      : c_(c),
        kv_({.num_blocks = c.num_blocks,
             .block_size = c.block_size,
             .hash_key = HashKey{c.seed, 7}}),
        rng_(c.seed),
        slots_(static_cast<size_t>(c.num_blocks) * c.block_size, 0) {
    for (int i = 0; i < 4; ++i) {
      Tokens p;
      for (int j = 0; j < kPrefixLen; ++j) p.push_back(Uniform(0, 999));
      prefixes_.push_back(p);
    }
  }

  void Run() {
    for (int e = 0; e < c_.num_events; ++e) {
      SCOPED_TRACE(testing::Message() << "event " << e);
      const int kind = Uniform(0, 99);
      if (kind < 20) {
        Add();
      } else if (kind < 90) {
        Step();
      } else {
        Abort();
      }
      if (testing::Test::HasFatalFailure()) return;
      const absl::Status s = kv_.CheckInvariants();
      ASSERT_TRUE(s.ok()) << s;
      for (const auto& [id, r] : requests_) {
        ASSERT_EQ(kv_.Contains(id), r.running);
        if (r.running) {
          ASSERT_GE(static_cast<int64_t>(kv_.BlockTable(id).size()) * c_.block_size,
                    r.num_computed);
        }
      }
    }
    // Abort whatever is left: nothing may stay in use.
    while (!requests_.empty()) Drop(requests_.begin()->first);
    const KvCacheStats s = kv_.Stats();
    EXPECT_EQ(s.pool.num_in_use, 0);
    EXPECT_EQ(s.pool.num_free_cached + s.pool.num_free_uncached, c_.num_blocks - 1);
    EXPECT_EQ(kv_.num_tracked_requests(), 0);
    const absl::Status st = kv_.CheckInvariants();
    EXPECT_TRUE(st.ok()) << st;
  }

  const SimCounters& counters() const { return n_; }
  KvCacheStats stats() const { return kv_.Stats(); }

 private:
  static constexpr int kPrefixLen = 40;
  static constexpr int kMaxSuffix = 10;
  static constexpr int kMaxOutput = 16;
  static constexpr size_t kMaxLive = 12;

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  void Add() {
    if (requests_.size() >= kMaxLive) return;
    SimRequest r;
    r.id = next_id_++;
    r.salt = Uniform(0, 2);
    const Tokens& prefix = prefixes_[Uniform(0, 3)];
    const int shared = Uniform(0, kPrefixLen);
    for (int i = 0; i < shared; ++i) r.Append(prefix[i]);
    const int suffix = Uniform(1, kMaxSuffix);
    for (int i = 0; i < suffix; ++i) r.Append(Uniform(0, 999));
    r.max_len = r.tokens.size() + Uniform(1, kMaxOutput);
    requests_.emplace(r.id, std::move(r));
  }

  std::string_view Salt(const SimRequest& r) const {
    static const char* kSalts[] = {"", "a", "b"};
    return kSalts[r.salt];
  }

  int64_t Slot(BlockId b, int32_t pos) const {
    return int64_t{b} * c_.block_size + pos % c_.block_size;
  }

  // Releases a request's blocks (finish, abort or preemption).
  void Drop(RequestId id) {
    kv_.Free(id);
    requests_.erase(id);
  }

  void Preempt(SimRequest& r) {
    // RUNNING -> WAITING: blocks freed, recomputed (partly from the cache) later.
    kv_.Free(r.id);
    r.running = false;
    r.num_computed = 0;
    ++n_.preemptions;
  }

  void Abort() {
    if (requests_.empty()) return;
    auto it = std::next(requests_.begin(), Uniform(0, static_cast<int>(requests_.size()) - 1));
    ++n_.aborted;
    Drop(it->first);
  }

  // One engine step: grow running requests (preempting on shortage), admit
  // some waiting ones, "run the model", commit, sample or finish.
  void Step() {
    ++n_.steps;
    std::vector<RequestId> running, waiting;
    for (const auto& [id, r] : requests_) (r.running ? running : waiting).push_back(id);
    std::shuffle(running.begin(), running.end(), rng_);

    std::vector<std::pair<RequestId, int32_t>> scheduled;  // id, new tokens
    auto is_scheduled = [&](RequestId id) {
      return std::any_of(scheduled.begin(), scheduled.end(),
                         [id](const auto& s) { return s.first == id; });
    };
    for (RequestId id : running) {
      SimRequest& r = requests_.at(id);
      if (!r.running || Uniform(0, 9) < 3) continue;  // preempted meanwhile, or skipped
      const int32_t remaining = static_cast<int32_t>(r.tokens.size()) - r.num_computed;
      ASSERT_GE(remaining, 1);
      const int32_t n = Uniform(1, remaining);
      while (!kv_.Allocate(id, r.num_computed, n)) {
        ++n_.grow_failures;
        // Preempt a running request not scheduled yet, else this one.
        std::vector<RequestId> victims;
        for (RequestId v : running) {
          if (v != id && requests_.at(v).running && !is_scheduled(v)) victims.push_back(v);
        }
        if (victims.empty()) {
          Preempt(r);
          break;
        }
        Preempt(requests_.at(victims[Uniform(0, static_cast<int>(victims.size()) - 1)]));
      }
      if (r.running) scheduled.emplace_back(id, n);
    }

    std::shuffle(waiting.begin(), waiting.end(), rng_);
    for (size_t i = 0; i < waiting.size() && i < 2; ++i) {
      SimRequest& r = requests_.at(waiting[i]);
      const CachedPrefix prefix = kv_.GetComputedBlocks(r.tokens, {.cache_salt = Salt(r)});
      ASSERT_LT(prefix.num_tokens, static_cast<int32_t>(r.tokens.size()));
      // A hit must serve exactly this request's K/V.
      for (int32_t p = 0; p < prefix.num_tokens; ++p) {
        if (slots_[Slot(prefix.blocks[p / c_.block_size], p)] != r.fp[p]) {
          FAIL() << "request " << r.id << " hit wrong content at position " << p;
        }
      }
      const int32_t n = Uniform(1, static_cast<int32_t>(r.tokens.size()) - prefix.num_tokens);
      if (!kv_.AllocateNew(r.id, prefix, n)) {
        ++n_.admit_failures;
        continue;
      }
      // WAITING -> RUNNING
      ++n_.admitted;
      n_.hit_tokens += prefix.num_tokens;
      if (r.fp.size() > r.max_len - kMaxOutput && prefix.num_tokens > 0) ++n_.resumed_hits;
      r.running = true;
      r.num_computed = prefix.num_tokens;
      scheduled.emplace_back(r.id, n);
    }

    // The forward pass: write K/V of the new tokens, then read what they
    // attend to.
    for (const auto& [id, n] : scheduled) {
      const SimRequest& r = requests_.at(id);
      const std::span<const BlockId> table = kv_.BlockTable(id);
      for (int32_t p = r.num_computed; p < r.num_computed + n; ++p) {
        const BlockId b = table[p / c_.block_size];
        ASSERT_EQ(kv_.pool().ref_count(b), 1) << "write into shared block " << b;
        ASSERT_FALSE(kv_.pool().hash(b).has_value()) << "write into cached block " << b;
        slots_[Slot(b, p)] = r.fp[p];
      }
    }
    for (const auto& [id, n] : scheduled) {
      const SimRequest& r = requests_.at(id);
      const std::span<const BlockId> table = kv_.BlockTable(id);
      for (int32_t p = 0; p < r.num_computed + n; ++p) {
        if (slots_[Slot(table[p / c_.block_size], p)] != r.fp[p]) {
          FAIL() << "request " << id << " lost K/V at position " << p;
        }
      }
    }

    // Commit, then sample where caught up, or finish.
    for (const auto& [id, n] : scheduled) {
      SimRequest& r = requests_.at(id);
      r.num_computed += n;
      kv_.CommitComputed(id, r.tokens, r.num_computed);
      if (r.num_computed < static_cast<int32_t>(r.tokens.size())) continue;
      if (r.tokens.size() >= r.max_len) {
        ++n_.finished;  // RUNNING -> FINISHED(length)
        Drop(id);
      } else {
        r.Append(Uniform(0, 999));
      }
    }
  }

  SimConfig c_;
  KvCacheManager kv_;
  std::mt19937_64 rng_;
  std::vector<Tokens> prefixes_;
  std::map<RequestId, SimRequest> requests_;  // ordered: runs are reproducible
  std::vector<uint64_t> slots_;               // simulated K/V, per slot
  RequestId next_id_ = 1;
  SimCounters n_;
};

class KvCacheRandomTest : public testing::TestWithParam<SimConfig> {};

TEST_P(KvCacheRandomTest, InvariantsHoldAfterEveryEventAndNothingLeaks) {
  Simulation sim(GetParam());
  sim.Run();
  const SimCounters& n = sim.counters();
  const KvCacheStats s = sim.stats();
  // The run exercised what it is meant to.
  EXPECT_GT(n.finished, 50);
  EXPECT_GT(n.aborted, 50);
  EXPECT_GT(n.admit_failures, 20);
  EXPECT_GT(n.preemptions, 20);
  EXPECT_GT(n.hit_tokens, 1000);
  EXPECT_GT(n.resumed_hits, 5);
  EXPECT_GT(s.pool.num_evicted, 100);
  EXPECT_EQ(s.prefix_hit_tokens, n.hit_tokens);
  std::printf(
      "  steps %lld admitted %lld (failed %lld) grow failures %lld preemptions %lld finished %lld "
      "aborted %lld hit tokens %lld / %lld queried, evicted %lld\n",
      static_cast<long long>(n.steps), static_cast<long long>(n.admitted),
      static_cast<long long>(n.admit_failures), static_cast<long long>(n.grow_failures),
      static_cast<long long>(n.preemptions), static_cast<long long>(n.finished),
      static_cast<long long>(n.aborted), static_cast<long long>(n.hit_tokens),
      static_cast<long long>(s.prefix_queried_tokens), static_cast<long long>(s.pool.num_evicted));
}

// Pools fit the longest request (40 + 10 + 16 tokens) alone, and not much more.
INSTANTIATE_TEST_SUITE_P(Pools, KvCacheRandomTest,
                         testing::Values(SimConfig{24, 4, 5000, 1}, SimConfig{24, 4, 5000, 2},
                                         SimConfig{30, 3, 5000, 3}, SimConfig{80, 1, 5000, 4},
                                         SimConfig{40, 2, 5000, 5}),
                         [](const testing::TestParamInfo<SimConfig>& info) {
                           return "blocks" + std::to_string(info.param.num_blocks) + "_bs" +
                                  std::to_string(info.param.block_size) + "_seed" +
                                  std::to_string(info.param.seed);
                         });

}  // namespace
}  // namespace kvserve::scheduler
