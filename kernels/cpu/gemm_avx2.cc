// AVX2+FMA GEMM body (tile shapes in gemm_internal.h: Avx2Tiling). 16-bit
// weights widen in registers: bf16 by vpmovzxwd + vpslld 16, fp16 by
// vcvtph2ps (F16C, required by DetectedIsa() for kAvx2); int8 codes by
// vpmovsxbd + vcvtdq2ps. All exact.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx2,fma,f16c")

namespace kvserve::kernels::internal {
namespace {

struct Ops : Avx2Tiling {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V Zero() { return _mm256_setzero_ps(); }
  static V LoadW(F32W, const float* p) { return _mm256_load_ps(p); }
  static V LoadW(Bf16W, const uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static V LoadW(F16W, const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V LoadW(Int8W, const int8_t* p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static V LoadU(const float* p) { return _mm256_loadu_ps(p); }
  static V FmaBroadcast(const float* p, V w, V acc) {
    return _mm256_fmadd_ps(_mm256_broadcast_ss(p), w, acc);
  }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static void StoreU(float* p, V v) { _mm256_storeu_ps(p, v); }
};

#include "kernels/cpu/gemm_microkernel_inl.h"

}  // namespace

void GemmPanelsAvx2(const GemmParams& p, int64_t panel_begin, int64_t panel_end) {
  GemmPanels<Ops>(p, panel_begin, panel_end);
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
