// AVX2 bf16 dot-product body (gemm_dot.h, kBF16Dot) for CPUs without
// AVX512-BF16: it does vdpbf16ps's arithmetic with fp32 FMAs: widen each
// bf16 by a shift or a mask, then acc = fma(x_odd, w_odd, acc) and
// fma(x_even, w_even, acc). The product of two bf16 values is exact in fp32
// (two 8-bit significands), so each FMA rounds once what gemm_dot.h's
// `acc + x * w` rounds once: the same bits, in half the instructions of a
// multiply and an add. (A product below fp32's normal range, |x w| <
// 2^-126, can be inexact, and there the two could differ: gemm_dot.h's
// contract takes every product as exact, and vdpbf16ps flushes such values.)
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/gemm_dot.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx2,fma")

namespace kvserve::kernels::internal {
namespace {

struct Ops : Avx2Tiling {
  // 16 ymm: 6 rows x 2 accumulators, 2 weights, 2 broadcasts (the widened
  // weights are made just before use).
  // A lone row (decode) reads 8 panels, not Avx2Tiling's 4: more weight
  // streams in flight. Kernels bench (d) on a Zen 2 core, one thread: 19.0-
  // 19.8 -> 22.2 GB/s (int8 weight-only and fp32 lost up to 12%: only here).
  static constexpr int RemPanels(int rows) { return rows == 1 ? 8 : Avx2Tiling::RemPanels(rows); }
  using VI = __m256;
  using VW = __m256i;
  using VF = __m256;
  struct X {
    __m256 even, odd;  // the row's two values of the step, widened
  };
  static constexpr int kLanes = 8;
  static VI Zero() { return _mm256_setzero_ps(); }
  static __m256i LoadW(const int8_t* p) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
  }
  static X BroadcastX(const int8_t* p) {
    uint32_t pair;
    std::memcpy(&pair, p, sizeof(pair));
    const uint32_t even = pair << 16, odd = pair & 0xffff0000u;
    float e, o;
    std::memcpy(&e, &even, sizeof(e));
    std::memcpy(&o, &odd, sizeof(o));
    return {_mm256_set1_ps(e), _mm256_set1_ps(o)};
  }
  static VI Dot(VI acc, X x, __m256i w) {
    const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(-65536)));
    acc = _mm256_fmadd_ps(x.odd, odd, acc);
    return _mm256_fmadd_ps(x.even, even, acc);
  }
  static VF Finish(VI acc, const int32_t*, float, const float*) { return acc; }
  static VF AddBias(VF v, const float* p) { return _mm256_add_ps(v, _mm256_loadu_ps(p)); }
  static void StoreF(float* p, VF v) { _mm256_storeu_ps(p, v); }
};

#include "kernels/cpu/gemm_dot_inl.h"

}  // namespace

void GemmBf16DotPanelsAvx2(const GemmParams& p, const DotRows& x, int64_t panel_begin,
                           int64_t panel_end) {
  DotPanels<Ops>(p, x, panel_begin, panel_end);
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
