// KV cache formats, CPU decode attention: batch 8 x 8,192-token contexts,
// GQA 9 / 3 heads (--heads), head dim 64, block 16, one query per sequence.
// Per format: time against the fp32 cache in the same run, bytes of K/V
// read per second (data and scales) against the copy bandwidth measured
// just before that format's row (target >= 60%), and the attention's multiply-adds (2 x
// head_dim per query head and key: q.k and p.v) against the peak FMA rate
// measured in the same run: the rooflines a format can hit. "of pattern
// read" divides by the rate of reading the same bytes in the same order and
// doing nothing else (ReadLikeAttention).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/roofline.h"
#include "engine/kv_cache.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::bench {
namespace {

constexpr int kDim = 64;
int kHeads = 9, kKvHeads = 3;  // --heads=Q/KV
int kBlock = 16;               // --block
int kSeqs = 8, kCtx = 8192;    // --seqs, --ctx
int kQueries = 1;              // --queries: query tokens per sequence (a prefill chunk's)

struct Result {
  double seconds;       // the best call, what the previous call left in cache
  double cold_seconds;  // the best call after the caches were evicted (0: not timed)
  double bytes;         // K and V read: data + scales
  double read_pattern_bytes_per_second;  // the same bytes, read alone (ReadLikeAttention)
};

// Reads exactly the bytes decode attention reads, in its order (per
// sequence and kv head: each block's run of K rows, V rows and their
// scales), split over the pool as attention is, doing nothing with them but
// a sum. Its rate is the roofline for this access pattern: each block holds
// only block_size rows of one kv head, so the reads come in short runs
// (4 KiB at fp32 down to 576 bytes at 4 bits) that sequential bandwidth
// overstates.
// Sums the 8-byte words of two equal runs together (K and V: two streams).
uint64_t SumBytes(const uint8_t* a, const uint8_t* b, int64_t n) {
  uint64_t sum = 0;
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    uint64_t x, y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    sum += x ^ y;
  }
  return sum;
}

double ReadLikeAttention(engine::KvCache& cache, const std::vector<int32_t>& ids,
                         kernels::ThreadPool* pool, int reps) {
  const auto& shape = cache.shape();
  const int64_t run_bytes = kBlock * kernels::KvRowBytes(shape.dtype, kDim);
  const int blocks_per_seq = kCtx / kBlock;
  std::vector<uint64_t> sink(int64_t{kSeqs} * kKvHeads);
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t seq = item / kKvHeads, kv_head = item % kKvHeads;
      uint64_t sum = 0;
      auto row_of = [&](int b) {
        return (ids[seq * blocks_per_seq + b] * int64_t{kKvHeads} + kv_head) * kBlock;
      };
      const auto* k = reinterpret_cast<const uint8_t*>(cache.k(0));
      const auto* v = reinterpret_cast<const uint8_t*>(cache.v(0));
      for (int b = 0; b < blocks_per_seq; ++b) {
        const int64_t row = row_of(b);
        const int64_t offset = row * kernels::KvRowBytes(shape.dtype, kDim);
        // As attention does: the blocks two ahead into L2 while this one is read.
        if (b + 2 < blocks_per_seq) {
          const int64_t ahead = row_of(b + 2) * kernels::KvRowBytes(shape.dtype, kDim);
          for (int64_t i = 0; i < run_bytes; i += 64) {
            __builtin_prefetch(k + ahead + i, 0, 1);
            __builtin_prefetch(v + ahead + i, 0, 1);
          }
        }
        sum += SumBytes(k + offset, v + offset, run_bytes);
        if (cache.k_scales(0) != nullptr) {
          sum += SumBytes(reinterpret_cast<const uint8_t*>(cache.k_scales(0) + row),
                          reinterpret_cast<const uint8_t*>(cache.v_scales(0) + row), 4 * kBlock);
        }
      }
      sink[item] = sum;
    }
  };
  const double t = BestTime(reps, [&] { pool->ParallelFor(int64_t{kSeqs} * kKvHeads, 1, body); });
  return 2.0 * kSeqs * kCtx * kKvHeads * shape.bytes_per_row() / t;
}

Result Run(engine::KvCacheDtype dtype, kernels::ThreadPool* pool, int reps, CacheEvictor* evictor) {
  const int blocks_per_seq = kCtx / kBlock;
  engine::KvCache cache({.num_layers = 1,
                         .num_blocks = int64_t{kSeqs} * blocks_per_seq,
                         .num_kv_heads = kKvHeads,
                         .block_size = kBlock,
                         .head_dim = kDim,
                         .dtype = dtype});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<int32_t> starts, ids, tok_seq, tok_pos;
  std::vector<int64_t> slots;
  for (int s = 0; s < kSeqs; ++s) {
    starts.push_back(static_cast<int32_t>(ids.size()));
    for (int b = 0; b < blocks_per_seq; ++b) ids.push_back(s * blocks_per_seq + b);
    for (int i = 0; i < kQueries; ++i) {  // the last kQueries positions, as a prefill chunk
      tok_seq.push_back(s);
      tok_pos.push_back(kCtx - kQueries + i);
    }
  }
  starts.push_back(static_cast<int32_t>(ids.size()));
  // Write every slot through the kernel, up to 1024 tokens at a time.
  const int64_t slots_total = int64_t{kSeqs} * kCtx;
  std::vector<float> kv(1024 * kKvHeads * kDim);
  for (int64_t first = 0; first < slots_total; first += 1024) {
    const int64_t count = std::min<int64_t>(1024, slots_total - first);
    for (float& f : kv) f = dist(rng);
    slots.clear();
    for (int64_t i = first; i < first + count; ++i) slots.push_back(i);
    kernels::WriteKvCache({.k = kv.data(),
                           .v = kv.data(),
                           .src_stride = kKvHeads * kDim,
                           .k_cache = cache.k(0),
                           .v_cache = cache.v(0),
                           .kv_dtype = dtype,
                           .k_scales = cache.k_scales(0),
                           .v_scales = cache.v_scales(0),
                           .slot_mapping = slots.data(),
                           .num_tokens = static_cast<int>(count),
                           .num_kv_heads = kKvHeads,
                           .head_dim = kDim,
                           .block_size = kBlock});
  }
  std::vector<float> q(int64_t{kSeqs} * kQueries * kHeads * kDim), out(q.size());
  for (float& f : q) f = dist(rng);
  const kernels::PagedAttentionParams p{.q = q.data(),
                                        .q_stride = kHeads * kDim,
                                        .out = out.data(),
                                        .k_cache = cache.k(0),
                                        .v_cache = cache.v(0),
                                        .kv_dtype = dtype,
                                        .k_scales = cache.k_scales(0),
                                        .v_scales = cache.v_scales(0),
                                        .num_tokens = kSeqs * kQueries,
                                        .num_heads = kHeads,
                                        .num_kv_heads = kKvHeads,
                                        .head_dim = kDim,
                                        .block_size = kBlock,
                                        .token_seq = tok_seq.data(),
                                        .token_pos = tok_pos.data(),
                                        .block_table_start = starts.data(),
                                        .block_ids = ids.data(),
                                        .scale = 0.125f};
  const auto attend = [&] { kernels::PagedAttention(p, pool); };
  const double t = BestTime(reps, attend);
  const double cold = evictor != nullptr ? BestColdTime(reps, *evictor, attend) : 0.0;
  const double bytes = 2.0 * kSeqs * kCtx * kKvHeads * cache.shape().bytes_per_row();
  return {t, cold, bytes, ReadLikeAttention(cache, ids, pool, reps)};
}

// Flags: --reps=N (best of N calls, default 5), --formats=a,b (default all),
// --seqs=N, --ctx=N (rounded down to a multiple of the block), --block=N
// (tokens per KV block, default 16), --threads=N (default: all cores),
// --queries=N (default 1: decode; N > 1: each sequence's last N positions
// attend at once, as a prefill chunk's tokens do; "GB/s read" still counts
// the K/V bytes once, and "of FMA peak" the arithmetic of all N),
// --heads=Q/KV (query and KV heads, default 9/3; Q a multiple of KV: 32/8
// gives Llama-3's four query heads per KV head), --evict_mb=N (default
// 256; 0: no cold columns).
//
// Two times per format. "ms" is the best call with whatever the call before
// it left in the caches: a cache smaller than the last-level cache (this
// bench's 4- and 8-bit formats at 9 / 3 heads fit a 32 MiB L3) is then read
// from it, not from memory. "cold ms" evicts the caches first (reads an
// --evict_mb buffer before each call, untimed), as a server's KV blocks are
// gone from cache by the next decode step when many sequences share it;
// "cold of copy" is that call's bytes per second against the copy rate.
// "60% ms" is the time a call would take reading its bytes at 60% of that
// row's copy rate (the target): where even "ms" with the cache in L3 is
// above it, the format's arithmetic alone misses the target, however well
// its reads overlap.
int Main(int argc, char** argv) {
  int reps = 5, threads = 0, evict_mb = 256;
  std::string formats;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) {
      return arg.rfind(flag, 0) == 0 ? std::atoi(arg.c_str() + std::strlen(flag)) : -1;
    };
    if (value("--reps=") > 0) reps = value("--reps=");
    if (value("--seqs=") > 0) kSeqs = value("--seqs=");
    if (value("--block=") > 0) kBlock = std::min(value("--block="), 256);
    if (value("--ctx=") > 0) kCtx = value("--ctx=");
    if (value("--threads=") > 0) threads = value("--threads=");
    if (value("--queries=") > 0) kQueries = std::min(value("--queries="), kCtx);
    if (value("--evict_mb=") >= 0) evict_mb = value("--evict_mb=");
    if (arg.rfind("--heads=", 0) == 0 &&
        std::sscanf(arg.c_str(), "--heads=%d/%d", &kHeads, &kKvHeads) != 2) {
      std::fprintf(stderr, "--heads wants Q/KV, e.g. --heads=32/8\n");
      return 2;
    }
    if (arg.rfind("--formats=", 0) == 0) formats = std::string(",").append(arg, 10).append(",");
  }
  if (kHeads < 1 || kKvHeads < 1 || kHeads % kKvHeads != 0) {
    std::fprintf(stderr, "--heads=%d/%d: need Q a positive multiple of KV\n", kHeads, kKvHeads);
    return 2;
  }
  kCtx = std::max(kCtx / kBlock * kBlock, kBlock);
  kQueries = std::min(kQueries, kCtx);
  kernels::ThreadPool own(threads > 0 ? threads : 1);
  kernels::ThreadPool& pool = threads > 0 ? own : kernels::ThreadPool::Default();
  threads = pool.num_threads();
  const double start_copy = CopyBytesPerSecond(threads, size_t{512} << 20);
  const kernels::CpuIsa isa = kernels::ActiveIsa();
  const double fma_flops = PeakGflops(isa, threads).wall * 1e9;
  std::printf(
      "kvserve kv cache bench: isa=%s, threads=%d, copy bandwidth at start %.2f GB/s, peak fp32 "
      "FMA %.1f GFLOP/s\n",
      kernels::IsaName(isa), threads, start_copy / 1e9, fma_flops / 1e9);
  std::printf(
      "%s PagedAttention, %d seqs x %d tokens (%d queries each), %d / %d heads, d=%d, block %d\n",
      kQueries > 1 ? "prefill-chunk" : "decode", kSeqs, kCtx, kQueries, kHeads, kKvHeads, kDim,
      kBlock);
  std::printf("%-10s %10s %10s %12s %10s %16s %12s %9s %13s %9s %8s\n", "format", "ms", "vs fp32",
              "GB/s read", "of copy", "of pattern read", "of FMA peak", "cold ms", "cold of copy",
              "copy GB/s", "60% ms");
  std::optional<CacheEvictor> evictor;
  if (evict_mb > 0) evictor.emplace(size_t(evict_mb) << 20);
  const double flops =
      2.0 * 2.0 * kSeqs * kQueries * kHeads * static_cast<double>(kCtx) * kDim;  // 2 per FMA
  double fp32_time = 0;
  for (engine::KvCacheDtype d : kernels::kAllKvDtypes) {
    const std::string name = engine::KvCacheDtypeName(d);
    if (!formats.empty() &&
        formats.find(std::string(",").append(name).append(",")) == std::string::npos) {
      continue;
    }
    // Each row against a copy measured just before it: this VM's memory
    // bandwidth moves by up to 2x within seconds, so one figure at the start
    // can be far from the rows that follow.
    const double copy = CopyBytesPerSecond(threads, size_t{512} << 20);
    const Result r = Run(d, &pool, reps, evictor ? &*evictor : nullptr);
    if (d == engine::KvCacheDtype::kFloat32) fp32_time = r.seconds;
    // "vs fp32" is 0 when --formats left fp32 (auto) out.
    std::printf("%-10s %10.3f %9.2fx %12.2f %9.1f%% %15.1f%% %11.1f%%", name.c_str(),
                1e3 * r.seconds, fp32_time / r.seconds, r.bytes / r.seconds / 1e9,
                100 * r.bytes / r.seconds / copy,
                100 * r.bytes / r.seconds / r.read_pattern_bytes_per_second,
                100 * flops / r.seconds / fma_flops);
    if (r.cold_seconds > 0) {
      std::printf(" %9.3f %12.1f%%", 1e3 * r.cold_seconds, 100 * r.bytes / r.cold_seconds / copy);
    } else {
      std::printf(" %9s %13s", "-", "-");
    }
    std::printf(" %9.2f %8.3f\n", copy / 1e9, 1e3 * r.bytes / (0.6 * copy));
  }
  return 0;
}

}  // namespace
}  // namespace kvserve::bench

int main(int argc, char** argv) { return kvserve::bench::Main(argc, argv); }
