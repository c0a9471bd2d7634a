// kvserve_kernels_bench: CPU kernel speed as ratios to what this machine can
// do, all measured in the same run:
//   (a) peak FMA GFLOP/s: register-resident FMA chains on every thread;
//   (b) copy bandwidth: memcpy of a buffer far larger than L3 on every thread
//       (and, printed beside it, the read bandwidth: the same size only read);
//   (c) GEMM GFLOP/s at prefill shapes, and the ratio to (a);
//   (d) GEMV (m = 1, decode) bytes of W read per second with W far larger than
//       L3, and the ratio to (b);
//   (e) bfloat16 and int8 (widened to fp32) and the dot-product formats'
//       GEMMs at batched shapes against the measured peak of the instruction
//       that does their products (FMA, vdpbf16ps, vpdpbusd);
//   plus ThreadPool dispatch latency and decode attention.
// No assertions; threads from $KVSERVE_NUM_THREADS, else all hardware threads.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/roofline.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::kernels {
namespace {

using bench::BestTime;
using bench::CopyBytesPerSecond;
using bench::Now;
using bench::OnAllThreads;
using bench::Timer;

// ---- (a) peak FMA: bench/fma_peak.h ----

using bench::Peak;
using bench::PeakGflops;

// ---- (b) copy bandwidth ---------------------------------------------------
// ---- (c) GEMM, (d) GEMV ------------------------------------------------------

std::vector<float> Random(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& f : v) f = dist(rng);
  return v;
}

double GemmGflops(int64_t m, int64_t n, int64_t k, ThreadPool* pool, Timer timer = Timer::kWall) {
  std::vector<float> w = Random(n * k, 1), x = Random(m * k, 2), bias = Random(n, 3);
  PackedMatrix packed = PackWeights(w.data(), n, k);
  std::vector<float> y(static_cast<size_t>(m * n));
  GemmParams p{x.data(), k, &packed, bias.data(), y.data(), n, m};
  double flops = 2.0 * m * n * k;
  // Many short runs: on a shared machine some of them run undisturbed.
  int reps = std::max(20, static_cast<int>(2e10 / flops));
  double t = BestTime(
      reps, [&] { Gemm(p, pool); }, timer);
  return flops / t / 1e9;
}

// m = 1 over `count` distinct n x k matrices in turn (their total far beyond
// L3, as the layers of a model are); returns bytes of W read per second.
double GemvBytesPerSecond(int64_t n, int64_t k, int count, ThreadPool* pool,
                          Timer timer = Timer::kWall, WeightFormat format = WeightFormat::kF32) {
  std::vector<float> w = Random(n * k, 4), x = Random(k, 5);
  std::vector<PackedMatrix> mats(count);
  for (PackedMatrix& mat : mats) mat = PackWeights(w.data(), n, k, format);
  std::vector<float> y(static_cast<size_t>(n));
  double t = BestTime(
      5,
      [&] {
        for (const PackedMatrix& mat : mats) {
          GemmParams p{x.data(), k, &mat, nullptr, y.data(), n, 1};
          Gemm(p, pool);
        }
      },
      timer);
  double bytes = static_cast<double>(mats[0].StorageBytes()) * count;
  return bytes / t;
}

// Batched decode and prefill through one transformer layer's four products
// (fused qkv, o, fused gate_up, down) of `layers` distinct layers in turn, as
// a step of the model runs them; the Qwen2.5-0.5B shape (hidden 896, 14 / 2
// heads of 128, intermediate 4864), whose layers together are far beyond L3.
// Returns G(FL)OP/s: 2 m n k per product.
double LayerGemmGops(int64_t m, WeightFormat format, int layers, ThreadPool* pool) {
  constexpr int64_t kHidden = 896, kInter = 4864, kQkv = 896 + 2 * 256;
  const int64_t shapes[4][2] = {
      {kQkv, kHidden}, {kHidden, kHidden}, {2 * kInter, kHidden}, {kHidden, kInter}};  // {n, k}
  std::vector<PackedMatrix> mats;
  double flops = 0;
  for (const auto& nk : shapes) {
    const std::vector<float> w = Random(nk[0] * nk[1], 6);
    for (int l = 0; l < layers; ++l) mats.push_back(PackWeights(w.data(), nk[0], nk[1], format));
    flops += 2.0 * m * nk[0] * nk[1] * layers;
  }
  const std::vector<float> x = Random(m * kInter, 7);
  std::vector<float> y(static_cast<size_t>(m * 2 * kInter));
  const double t = BestTime(5, [&] {
    for (int l = 0; l < layers; ++l) {
      for (int i = 0; i < 4; ++i) {
        const PackedMatrix& mat = mats[i * layers + l];
        GemmParams p{x.data(), mat.k, &mat, nullptr, y.data(), mat.n, m};
        Gemm(p, pool);
      }
    }
  });
  return flops / t / 1e9;
}

// ParallelFor cost when every thread takes part: each thread's chunk busy-waits
// 5 us, so a call takes 5 us plus the dispatch and join overhead (best of
// many calls; a call whose workers were asleep or descheduled takes longer).
double DispatchOverheadMicros(ThreadPool* pool) {
  constexpr double kWork = 5e-6;
  auto spin = [](int64_t, int64_t) {
    const double t0 = Now(Timer::kWall);
    while (Now(Timer::kWall) - t0 < kWork) {
    }
  };
  double best = 1e30;
  for (int i = 0; i < 20000; ++i) {
    const double t0 = Now(Timer::kWall);
    pool->ParallelFor(pool->num_threads(), 1, spin);
    best = std::min(best, Now(Timer::kWall) - t0);
  }
  return (best - kWork) * 1e6;
}

// Decode attention: `seqs` sequences of `ctx` cached tokens, one query each.
// Returns bytes of K and V read per second.
double DecodeAttentionBytesPerSecond(int seqs, int ctx, ThreadPool* pool) {
  const int heads = 9, kv_heads = 3, dim = 64, bs = 16;
  const int blocks_per_seq = (ctx + bs - 1) / bs;
  const int64_t num_blocks = static_cast<int64_t>(seqs) * blocks_per_seq;
  AlignedBuffer k(num_blocks * kv_heads * bs * dim), v(num_blocks * kv_heads * bs * dim);
  std::vector<float> fill = Random(1 << 16, 6);
  for (size_t i = 0; i < k.size(); ++i) k[i] = v[i] = fill[i & 0xffff];
  std::vector<int32_t> starts, ids, tok_seq, tok_pos;
  for (int s = 0; s < seqs; ++s) {
    starts.push_back(static_cast<int32_t>(ids.size()));
    for (int b = 0; b < blocks_per_seq; ++b) ids.push_back(s * blocks_per_seq + b);
    tok_seq.push_back(s);
    tok_pos.push_back(ctx - 1);
  }
  starts.push_back(static_cast<int32_t>(ids.size()));
  std::vector<float> q = Random(static_cast<int64_t>(seqs) * heads * dim, 7);
  std::vector<float> out(q.size());
  PagedAttentionParams p;
  p.q = q.data();
  p.q_stride = static_cast<int64_t>(heads) * dim;
  p.out = out.data();
  p.k_cache = k.data();
  p.v_cache = v.data();
  p.num_tokens = seqs;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = dim;
  p.block_size = bs;
  p.token_seq = tok_seq.data();
  p.token_pos = tok_pos.data();
  p.block_table_start = starts.data();
  p.block_ids = ids.data();
  p.scale = 0.125f;
  double t = BestTime(5, [&] { PagedAttention(p, pool); });
  return 2.0 * seqs * ctx * kv_heads * dim * sizeof(float) / t;
}

int Main() {
  ThreadPool& pool = ThreadPool::Default();
  const int threads = pool.num_threads();
  const CpuIsa isa = ActiveIsa();
  std::printf("kvserve kernels bench: isa=%s (detected %s), threads=%d\n", IsaName(isa),
              IsaName(DetectedIsa()), threads);
  std::printf("Every figure is the best of many runs; ratios are to rooflines measured here.\n");
  std::printf(
      "Columns '1 thread' time one thread by its own CPU time, which stays\n"
      "meaningful when other processes share the machine.\n");

  const Peak peak_all = PeakGflops(isa, threads);
  const Peak peak_one = PeakGflops(isa, 1);
  // Measured first, beside the FMA peak: measured after the GEMV and
  // attention sections they once read half their value (cause not found; an
  // idle pool was checked to use no CPU).
  const double peak_bf16 = bench::PeakDotGops(bench::DotKind::kBf16, threads);
  const double peak_vnni = bench::PeakDotGops(bench::DotKind::kVnni, threads);
  // The larger estimate of what the hardware does is the stricter denominator.
  const double peak = std::max(peak_all.wall, peak_all.cpu);
  const double peak1 = peak_one.cpu;
  const size_t copy_bytes = size_t{512} << 20;
  const double copy = CopyBytesPerSecond(threads, copy_bytes);
  const double copy1 = CopyBytesPerSecond(1, copy_bytes);
  std::printf(
      "\n(a) peak FMA       %7.1f GFLOP/s, %d threads (wall %.1f, per-thread CPU time %.1f)\n"
      "                   %7.1f GFLOP/s, 1 thread\n",
      peak, threads, peak_all.wall, peak_all.cpu, peak1);
  std::printf(
      "(b) copy bandwidth %7.2f GB/s, %d threads; %.2f GB/s, 1 thread\n"
      "                   (bytes read + written per second by memcpy of %zu MiB, as STREAM Copy)\n",
      copy / 1e9, threads, copy1 / 1e9, copy_bytes >> 20);
  std::printf(
      "    read bandwidth %7.2f GB/s, %d threads; %.2f GB/s, 1 thread (bytes only read per\n"
      "                   second by a plain loop, the rate to compare a GEMV's stream of W with)\n",
      bench::ReadBytesPerSecond(threads, copy_bytes) / 1e9, threads,
      bench::ReadBytesPerSecond(1, copy_bytes) / 1e9);
  std::printf("    ParallelFor overhead, all threads taking part: %.2f us/call\n",
              DispatchOverheadMicros(&pool));

  std::printf("\n(c) GEMM y = x W^T + b, prefill shapes\n");
  std::printf("    %5s %5s %5s | %-17s | %-17s\n", "", "", "", "all threads", "1 thread");
  std::printf("    %5s %5s %5s | %8s %8s | %8s %8s\n", "m", "k", "n", "GFLOP/s", "of (a)",
              "GFLOP/s", "of (a)");
  const int64_t shapes[][2] = {{576, 1536}, {576, 576}, {576, 192}, {1536, 576}};
  double worst_gemm = 1e30, worst_gemm1 = 1e30;
  for (int64_t m : {256, 512}) {
    for (const auto& kn : shapes) {
      const double g = GemmGflops(m, kn[1], kn[0], &pool);
      const double g1 = GemmGflops(m, kn[1], kn[0], nullptr, Timer::kThreadCpu);
      worst_gemm = std::min(worst_gemm, g / peak);
      worst_gemm1 = std::min(worst_gemm1, g1 / peak1);
      std::printf("    %5ld %5ld %5ld | %8.1f %7.1f%% | %8.1f %7.1f%%\n", static_cast<long>(m),
                  static_cast<long>(kn[0]), static_cast<long>(kn[1]), g, 100 * g / peak, g1,
                  100 * g1 / peak1);
    }
  }

  std::printf("\n(d) GEMV m=1 (decode): bytes of W read per second, W >> L3\n");
  std::printf("    %-28s | %-17s | %-17s\n", "", "all threads", "1 thread");
  std::printf("    %-28s | %8s %8s | %8s %8s\n", "W", "GB/s", "of (b)", "GB/s", "of (b)");
  struct GemvCase {
    const char* name;
    int64_t n, k;
    int count;
  } cases[] = {{"64 distinct 1536x576 (226MB)", 1536, 576, 64},
               {"64 distinct 576x1536 (226MB)", 576, 1536, 64},
               {"one 8192x4096 (134MB)", 8192, 4096, 1}};
  double worst_gemv = 1e30, worst_gemv1 = 1e30;
  for (const GemvCase& c : cases) {
    const double b = GemvBytesPerSecond(c.n, c.k, c.count, &pool);
    const double b1 = GemvBytesPerSecond(c.n, c.k, c.count, nullptr, Timer::kThreadCpu);
    worst_gemv = std::min(worst_gemv, b / copy);
    worst_gemv1 = std::min(worst_gemv1, b1 / copy1);
    std::printf("    %-28s | %8.2f %7.1f%% | %8.2f %7.1f%%\n", c.name, b / 1e9, 100 * b / copy,
                b1 / 1e9, 100 * b1 / copy1);
  }
  // The same GEMV with 16-bit and int8 weights (widened in registers), and
  // with the dot-product formats (x quantized or rounded per call, as decode
  // does): as many matrices of each, 4x / 2x as many for the narrower
  // formats, so W stays far beyond L3; the bytes are the narrow ones read.
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kInt8,
                         WeightFormat::kBF16Dot, WeightFormat::kW8A8}) {
    const int count = static_cast<int>(64 * 4 / WeightFormatBytes(f));
    const double b = GemvBytesPerSecond(1536, 576, count, &pool, Timer::kWall, f);
    const double b1 = GemvBytesPerSecond(1536, 576, count, nullptr, Timer::kThreadCpu, f);
    std::printf("    %-28s | %8.2f %7.1f%% | %8.2f %7.1f%%\n",
                (std::string(WeightFormatName(f)) + " 1536x576 x" + std::to_string(count)).c_str(),
                b / 1e9, 100 * b / copy, b1 / 1e9, 100 * b1 / copy1);
  }
  // w8a8 with 576 outputs (36 panels, the o and down projections of the
  // SmolLM shape): chunks of 9 panels, each 8 + a lone one, on two threads.
  {
    const double b = GemvBytesPerSecond(576, 1536, 256, &pool, Timer::kWall, WeightFormat::kW8A8);
    const double b1 =
        GemvBytesPerSecond(576, 1536, 256, nullptr, Timer::kThreadCpu, WeightFormat::kW8A8);
    std::printf("    %-28s | %8.2f %7.1f%% | %8.2f %7.1f%%\n", "w8a8 576x1536 x256", b / 1e9,
                100 * b / copy, b1 / 1e9, 100 * b1 / copy1);
  }

  std::printf(
      "\n(e) GEMMs through 8 distinct Qwen2.5-0.5B layers (qkv, o, gate_up, down; bfloat16\n"
      "    226 MB, int8 113 MB): G(FL)OP/s against the peak of the instruction that does the\n"
      "    products (FMA for bfloat16 and int8, widened to fp32; vdpbf16ps for bf16dot,\n"
      "    vpdpbusd for w8a8), all threads\n");
  std::printf(
      "    FMA peak %.1f GFLOP/s, vdpbf16ps peak %.1f GFLOP/s, vpdpbusd peak %.1f GOP/s (0: not "
      "on this CPU)\n",
      peak, peak_bf16, peak_vnni);
  std::printf("    %-12s %5s | %8s %8s\n", "format", "m", "G/s", "of peak");
  for (WeightFormat f :
       {WeightFormat::kBF16, WeightFormat::kInt8, WeightFormat::kBF16Dot, WeightFormat::kW8A8}) {
    const double peak_f = f == WeightFormat::kBF16Dot ? peak_bf16
                          : f == WeightFormat::kW8A8  ? peak_vnni
                                                      : peak;
    if (peak_f == 0) continue;
    for (int64_t m : {1, 8, 32, 128}) {
      const double g = LayerGemmGops(m, f, 8, &pool);
      std::printf("    %-12s %5ld | %8.1f %7.1f%%\n", WeightFormatName(f), static_cast<long>(m), g,
                  100 * g / peak_f);
    }
  }

  std::printf("\n    decode PagedAttention, 16 seqs, 9 heads / 3 kv heads, d=64, block 16\n");
  for (int ctx : {512, 4096}) {
    const double b = DecodeAttentionBytesPerSecond(16, ctx, &pool);
    std::printf("    context %4d: %6.2f GB/s of K+V read (%.1f%% of (b))\n", ctx, b / 1e9,
                100 * b / copy);
  }

  std::printf(
      "\nsummary (target GEMM >= 50%% of peak, GEMV >= 60%% of copy bandwidth):\n"
      "  all threads: GEMM worst %.1f%%, GEMV worst %.1f%%\n"
      "  1 thread:    GEMM worst %.1f%%, GEMV worst %.1f%%\n",
      100 * worst_gemm, 100 * worst_gemv, 100 * worst_gemm1, 100 * worst_gemv1);
  return 0;
}

}  // namespace
}  // namespace kvserve::kernels

int main() { return kvserve::kernels::Main(); }
