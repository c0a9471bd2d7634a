// KV cache formats, CPU decode attention: batch 8 x 8,192-token contexts,
// GQA 9 / 3 heads, head dim 64, block 16, one query per sequence. Per format:
// time against the fp32 cache in the same run, bytes of K/V read per second
// (data and scales) against the copy bandwidth measured in the same run
// (target >= 60%), and the attention's multiply-adds (2 x head_dim per query
// head and key: q.k and p.v) against the peak FMA rate measured in the same
// run: the two rooflines a format can hit.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <random>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/roofline.h"
#include "engine/kv_cache.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::bench {
namespace {

constexpr int kHeads = 9, kKvHeads = 3, kDim = 64, kBlock = 16;
int kSeqs = 8, kCtx = 8192;  // --seqs, --ctx

struct Result {
  double seconds;
  double bytes;  // K and V read: data + scales
};

Result Run(engine::KvCacheDtype dtype, kernels::ThreadPool* pool, int reps) {
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
    tok_seq.push_back(s);
    tok_pos.push_back(kCtx - 1);
  }
  starts.push_back(static_cast<int32_t>(ids.size()));
  // Write every slot through the kernel, 1024 tokens at a time.
  const int64_t slots_total = int64_t{kSeqs} * kCtx;
  std::vector<float> kv(1024 * kKvHeads * kDim);
  for (int64_t first = 0; first < slots_total; first += 1024) {
    for (float& f : kv) f = dist(rng);
    slots.clear();
    for (int64_t i = first; i < first + 1024; ++i) slots.push_back(i);
    kernels::WriteKvCache({.k = kv.data(),
                           .v = kv.data(),
                           .src_stride = kKvHeads * kDim,
                           .k_cache = cache.k(0),
                           .v_cache = cache.v(0),
                           .kv_dtype = dtype,
                           .k_scales = cache.k_scales(0),
                           .v_scales = cache.v_scales(0),
                           .slot_mapping = slots.data(),
                           .num_tokens = 1024,
                           .num_kv_heads = kKvHeads,
                           .head_dim = kDim,
                           .block_size = kBlock});
  }
  std::vector<float> q(kSeqs * kHeads * kDim), out(q.size());
  for (float& f : q) f = dist(rng);
  const kernels::PagedAttentionParams p{.q = q.data(),
                                        .q_stride = kHeads * kDim,
                                        .out = out.data(),
                                        .k_cache = cache.k(0),
                                        .v_cache = cache.v(0),
                                        .kv_dtype = dtype,
                                        .k_scales = cache.k_scales(0),
                                        .v_scales = cache.v_scales(0),
                                        .num_tokens = kSeqs,
                                        .num_heads = kHeads,
                                        .num_kv_heads = kKvHeads,
                                        .head_dim = kDim,
                                        .block_size = kBlock,
                                        .token_seq = tok_seq.data(),
                                        .token_pos = tok_pos.data(),
                                        .block_table_start = starts.data(),
                                        .block_ids = ids.data(),
                                        .scale = 0.125f};
  const double t = BestTime(reps, [&] { kernels::PagedAttention(p, pool); });
  const double bytes = 2.0 * kSeqs * kCtx * kKvHeads * cache.shape().bytes_per_row();
  return {t, bytes};
}

// Flags: --reps=N (best of N calls, default 5), --formats=a,b (default all),
// --seqs=N, --ctx=N (a multiple of 16), --threads=N (default: all cores).
int Main(int argc, char** argv) {
  int reps = 5, threads = 0;
  std::string formats;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) {
      return arg.rfind(flag, 0) == 0 ? std::atoi(arg.c_str() + std::strlen(flag)) : -1;
    };
    if (value("--reps=") > 0) reps = value("--reps=");
    if (value("--seqs=") > 0) kSeqs = value("--seqs=");
    if (value("--ctx=") > 0) kCtx = value("--ctx=") / kBlock * kBlock;
    if (value("--threads=") > 0) threads = value("--threads=");
    if (arg.rfind("--formats=", 0) == 0) formats = "," + arg.substr(10) + ",";
  }
  kernels::ThreadPool own(threads > 0 ? threads : 1);
  kernels::ThreadPool& pool = threads > 0 ? own : kernels::ThreadPool::Default();
  threads = pool.num_threads();
  const double copy = CopyBytesPerSecond(threads, size_t{512} << 20);
  const kernels::CpuIsa isa = kernels::ActiveIsa();
  const double fma_flops = PeakGflops(isa, threads).wall * 1e9;
  std::printf(
      "kvserve kv cache bench: isa=%s, threads=%d, copy bandwidth %.2f GB/s, peak fp32 FMA %.1f "
      "GFLOP/s\n",
      kernels::IsaName(isa), threads, copy / 1e9, fma_flops / 1e9);
  std::printf("decode PagedAttention, %d seqs x %d tokens, %d / %d heads, d=%d, block %d\n", kSeqs,
              kCtx, kHeads, kKvHeads, kDim, kBlock);
  std::printf("%-10s %10s %10s %12s %10s %12s\n", "format", "ms", "vs fp32", "GB/s read", "of copy",
              "of FMA peak");
  const double flops = 2.0 * 2.0 * kSeqs * kHeads * double{kCtx} * kDim;  // 2 flops per FMA
  double fp32_time = 0;
  for (engine::KvCacheDtype d : kernels::kAllKvDtypes) {
    const std::string name = engine::KvCacheDtypeName(d);
    if (!formats.empty() && formats.find("," + name + ",") == std::string::npos) continue;
    const Result r = Run(d, &pool, reps);
    if (d == engine::KvCacheDtype::kFloat32) fp32_time = r.seconds;
    // "vs fp32" is 0 when --formats left fp32 (auto) out.
    std::printf("%-10s %10.3f %9.2fx %12.2f %9.1f%% %11.1f%%\n", name.c_str(), 1e3 * r.seconds,
                fp32_time / r.seconds, r.bytes / r.seconds / 1e9, 100 * r.bytes / r.seconds / copy,
                100 * flops / r.seconds / fma_flops);
  }
  return 0;
}

}  // namespace
}  // namespace kvserve::bench

int main(int argc, char** argv) { return kvserve::bench::Main(argc, argv); }
