// AVX-512F GEMM body (tile shapes in gemm_internal.h: Avx512Tiling); one zmm
// holds one k-step of a panel. 16-bit and int8 weights widen in registers as
// in gemm_avx2.cc (vpmovzxwd + vpslld, vcvtph2ps, vpmovsxbd + vcvtdq2ps).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx512f")

namespace kvserve::kernels::internal {
namespace {

struct Ops : Avx512Tiling {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V LoadW(F32W, const float* p) { return _mm512_load_ps(p); }
  static V LoadW(Bf16W, const uint16_t* p) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static V LoadW(F16W, const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static V LoadW(Int8W, const int8_t* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static V LoadU(const float* p) { return _mm512_loadu_ps(p); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  // acc + *p * w with *p broadcast by the FMA's own load ({1to16}). From
  // intrinsics (_mm512_set1_ps(*p) in each FMA) GCC 12 emits one
  // vbroadcastss per row of a tile into a register and, in the 12 x 2 tile,
  // keeps the rows' pointers on the stack; that loop ran the int8 and
  // 16-bit tiles at 82-85% of the FMA peak on Zen 4, this one at 90-95%
  // (docs/benchmarks.md, 2026-11-29). The same FMAs either way.
  static V FmaBroadcast(const float* p, V w, V acc) {
    asm("vfmadd231ps %1%{1to16%}, %2, %0" : "+v"(acc) : "m"(*p), "v"(w));
    return acc;
  }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static void StoreU(float* p, V v) { _mm512_storeu_ps(p, v); }
};

#include "kernels/cpu/gemm_microkernel_inl.h"

}  // namespace

void GemmPanelsAvx512(const GemmParams& p, int64_t panel_begin, int64_t panel_end) {
  GemmPanels<Ops>(p, panel_begin, panel_end);
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
