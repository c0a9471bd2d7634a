// The machine's peak fp32 FMA rate, measured in the same run as the
// benchmark that divides by it (kernels_bench, kv_cache_bench).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "bench/roofline.h"
#include "kernels/cpu/cpu_features.h"

namespace kvserve::bench {

// Independent accumulator chains in fixed registers (inline asm, so the
// compiler can neither spill nor drop them): 12 ymm chains cover FMA latency x
// throughput on AVX2 cores (4 cycles x 2 pipes = 8 needed); 24 zmm chains
// for AVX-512. Each iteration is one FMA per chain.
#define KVSERVE_FMA12(r)                                                                \
  "vfmadd231ps %%" r "14, %%" r "15, %%" r                                              \
  "0\n"                                                                                 \
  "vfmadd231ps %%" r "14, %%" r "15, %%" r "1\n vfmadd231ps %%" r "14, %%" r "15, %%" r \
  "2\n"                                                                                 \
  "vfmadd231ps %%" r "14, %%" r "15, %%" r "3\n vfmadd231ps %%" r "14, %%" r "15, %%" r \
  "4\n"                                                                                 \
  "vfmadd231ps %%" r "14, %%" r "15, %%" r "5\n vfmadd231ps %%" r "14, %%" r "15, %%" r \
  "6\n"                                                                                 \
  "vfmadd231ps %%" r "14, %%" r "15, %%" r "7\n vfmadd231ps %%" r "14, %%" r "15, %%" r \
  "8\n"                                                                                 \
  "vfmadd231ps %%" r "14, %%" r "15, %%" r "9\n vfmadd231ps %%" r "14, %%" r "15, %%" r \
  "10\n"                                                                                \
  "vfmadd231ps %%" r "14, %%" r "15, %%" r "11\n"

inline __attribute__((target("avx2,fma"))) void FmaLoopAvx2(int64_t iters) {
  const float small = 1e-3f;
  __asm__ volatile(
      "vbroadcastss %1, %%ymm14\n vbroadcastss %1, %%ymm15\n"
      "vxorps %%ymm0, %%ymm0, %%ymm0\n vxorps %%ymm1, %%ymm1, %%ymm1\n"
      "vxorps %%ymm2, %%ymm2, %%ymm2\n vxorps %%ymm3, %%ymm3, %%ymm3\n"
      "vxorps %%ymm4, %%ymm4, %%ymm4\n vxorps %%ymm5, %%ymm5, %%ymm5\n"
      "vxorps %%ymm6, %%ymm6, %%ymm6\n vxorps %%ymm7, %%ymm7, %%ymm7\n"
      "vxorps %%ymm8, %%ymm8, %%ymm8\n vxorps %%ymm9, %%ymm9, %%ymm9\n"
      "vxorps %%ymm10, %%ymm10, %%ymm10\n vxorps %%ymm11, %%ymm11, %%ymm11\n"
      "1:\n" KVSERVE_FMA12("ymm") "dec %0\n jnz 1b\n vzeroupper\n"
      : "+r"(iters)
      : "m"(small)
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm14", "xmm15", "cc");
}
constexpr double kFlopsPerIterAvx2 = 12 * 8 * 2;

inline __attribute__((target("avx512f"))) void FmaLoopAvx512(int64_t iters) {
  const float small = 1e-3f;
  __asm__ volatile(
      "vbroadcastss %1, %%zmm14\n vbroadcastss %1, %%zmm15\n"
      "vpxord %%zmm0, %%zmm0, %%zmm0\n vmovaps %%zmm0, %%zmm1\n vmovaps %%zmm0, %%zmm2\n"
      "vmovaps %%zmm0, %%zmm3\n vmovaps %%zmm0, %%zmm4\n vmovaps %%zmm0, %%zmm5\n"
      "vmovaps %%zmm0, %%zmm6\n vmovaps %%zmm0, %%zmm7\n vmovaps %%zmm0, %%zmm8\n"
      "vmovaps %%zmm0, %%zmm9\n vmovaps %%zmm0, %%zmm10\n vmovaps %%zmm0, %%zmm11\n"
      "vmovaps %%zmm0, %%zmm16\n vmovaps %%zmm0, %%zmm17\n vmovaps %%zmm0, %%zmm18\n"
      "vmovaps %%zmm0, %%zmm19\n vmovaps %%zmm0, %%zmm20\n vmovaps %%zmm0, %%zmm21\n"
      "vmovaps %%zmm0, %%zmm22\n vmovaps %%zmm0, %%zmm23\n vmovaps %%zmm0, %%zmm24\n"
      "vmovaps %%zmm0, %%zmm25\n vmovaps %%zmm0, %%zmm26\n vmovaps %%zmm0, %%zmm27\n"
      "1:\n" KVSERVE_FMA12("zmm")
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm16\n vfmadd231ps %%zmm14, %%zmm15, %%zmm17\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm18\n vfmadd231ps %%zmm14, %%zmm15, %%zmm19\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm20\n vfmadd231ps %%zmm14, %%zmm15, %%zmm21\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm22\n vfmadd231ps %%zmm14, %%zmm15, %%zmm23\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm24\n vfmadd231ps %%zmm14, %%zmm15, %%zmm25\n"
      "vfmadd231ps %%zmm14, %%zmm15, %%zmm26\n vfmadd231ps %%zmm14, %%zmm15, %%zmm27\n"
      "dec %0\n jnz 1b\n vzeroupper\n"
      : "+r"(iters)
      : "m"(small)
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
        "xmm11", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22",
        "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "cc");
}
#undef KVSERVE_FMA12
constexpr double kFlopsPerIterAvx512 = 24 * 16 * 2;

inline float FmaLoopScalar(int64_t iters) {
  float a[8];
  for (int i = 0; i < 8; ++i) a[i] = 0.001f * static_cast<float>(i);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 8; ++i) a[i] = std::fma(a[i], 0.999999f, 1e-7f);
  }
  return a[0] + a[7];
}
constexpr double kFlopsPerIterScalar = 8 * 2;

// The dot-product instructions' peak (AVX-512 only): 24 independent zmm
// chains of vdpbf16ps (32 bf16 products, 64 FLOP each) or vpdpbusd (64 int8
// products, 128 integer ops each); the roofline of the kBF16Dot and kW8A8
// GEMMs, which on some cores issue at a different rate than FMAs.
#define KVSERVE_DOT_OP(ins, r) ins " %%zmm30, %%zmm31, %%zmm" #r "\n"
// clang-format off
#define KVSERVE_DOT24(ins)                                                                  \
  KVSERVE_DOT_OP(ins, 0)  KVSERVE_DOT_OP(ins, 1)  KVSERVE_DOT_OP(ins, 2)  KVSERVE_DOT_OP(ins, 3)  \
  KVSERVE_DOT_OP(ins, 4)  KVSERVE_DOT_OP(ins, 5)  KVSERVE_DOT_OP(ins, 6)  KVSERVE_DOT_OP(ins, 7)  \
  KVSERVE_DOT_OP(ins, 8)  KVSERVE_DOT_OP(ins, 9)  KVSERVE_DOT_OP(ins, 10) KVSERVE_DOT_OP(ins, 11) \
  KVSERVE_DOT_OP(ins, 12) KVSERVE_DOT_OP(ins, 13) KVSERVE_DOT_OP(ins, 14) KVSERVE_DOT_OP(ins, 15) \
  KVSERVE_DOT_OP(ins, 16) KVSERVE_DOT_OP(ins, 17) KVSERVE_DOT_OP(ins, 18) KVSERVE_DOT_OP(ins, 19) \
  KVSERVE_DOT_OP(ins, 20) KVSERVE_DOT_OP(ins, 21) KVSERVE_DOT_OP(ins, 22) KVSERVE_DOT_OP(ins, 23)
// clang-format on
#define KVSERVE_DOT_LOOP(name, isa, ins)                                                           \
  inline __attribute__((target(isa))) void name(int64_t iters) {                                   \
    __asm__ volatile(                                                                              \
        "vpxord %%zmm30, %%zmm30, %%zmm30\n vpxord %%zmm31, %%zmm31, %%zmm31\n"                    \
        "1:\n" KVSERVE_DOT24(ins) "dec %0\n jnz 1b\n vzeroupper\n"                                 \
        : "+r"(iters)                                                                              \
        :                                                                                          \
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
          "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19",         \
          "xmm20", "xmm21", "xmm22", "xmm23", "xmm30", "xmm31", "cc");                             \
  }
KVSERVE_DOT_LOOP(DotLoopBf16, "avx512f,avx512bf16", "vdpbf16ps")
KVSERVE_DOT_LOOP(DotLoopVnni, "avx512f,avx512vnni", "vpdpbusd")
#undef KVSERVE_DOT_LOOP
#undef KVSERVE_DOT24
#undef KVSERVE_DOT_OP

struct Peak {
  double wall;  // all threads at once, by wall time
  double cpu;   // the sum of each thread's rate by its own CPU time
};

// All threads run the FMA loop together, 15 times. By wall time, a run counts
// only when no thread was descheduled; by CPU time, each thread's own best
// run counts, which a busy machine disturbs far less.
inline Peak PeakGflops(kernels::CpuIsa isa, int threads) {
  const int64_t iters = isa == kernels::CpuIsa::kScalar ? 2'000'000 : 10'000'000;
  const double flops =
      static_cast<double>(iters) * (isa == kernels::CpuIsa::kAvx512 ? kFlopsPerIterAvx512
                                    : isa == kernels::CpuIsa::kAvx2 ? kFlopsPerIterAvx2
                                                                    : kFlopsPerIterScalar);
  std::vector<float> sink(threads);
  std::vector<double> best_cpu(threads, 1e30);
  auto body = [&](int i) {
    const double t0 = Now(Timer::kThreadCpu);
    if (isa == kernels::CpuIsa::kAvx512) {
      FmaLoopAvx512(iters);
    } else if (isa == kernels::CpuIsa::kAvx2) {
      FmaLoopAvx2(iters);
    } else {
      sink[i] = FmaLoopScalar(iters);
    }
    best_cpu[i] = std::min(best_cpu[i], Now(Timer::kThreadCpu) - t0);
  };
  const double wall = BestTime(15, [&] { OnAllThreads(threads, body); });
  Peak peak{flops * threads / wall / 1e9, 0.0};
  for (double t : best_cpu) peak.cpu += flops / t / 1e9;
  return peak;
}

enum class DotKind { kBf16, kVnni };

// Peak G(FL)OP/s of a dot-product instruction on `threads` threads at once
// (best of 15 by wall time). 0 when the CPU lacks it.
inline double PeakDotGops(DotKind kind, int threads) {
  const bool has = kind == DotKind::kBf16 ? kernels::HasAvx512Bf16() : kernels::HasAvx512Vnni();
  if (!has) return 0.0;
  constexpr int64_t kIters = 5'000'000;
  const double ops = 24.0 * (kind == DotKind::kBf16 ? 64 : 128) * kIters;
  const double wall = BestTime(15, [&] {
    OnAllThreads(threads, [&](int) {
      if (kind == DotKind::kBf16) {
        DotLoopBf16(kIters);
      } else {
        DotLoopVnni(kIters);
      }
    });
  });
  return ops * threads / wall / 1e9;
}

}  // namespace kvserve::bench
