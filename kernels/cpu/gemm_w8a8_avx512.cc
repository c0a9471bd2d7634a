// AVX-512 VNNI int8 x int8 body (gemm_w8a8.h): vpdpbusd multiplies the codes
// shifted to unsigned (code + 128) by the signed weight codes, four k per
// column per instruction, and Finish takes 128 * code_sums back out. Tile
// shapes as the fp32 body's (gemm_internal.h: Avx512Tiling).
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/gemm_w8a8.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vnni")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kvserve::kernels::internal {
namespace {

struct Ops : Avx512Tiling {
  using VI = __m512i;
  using VF = __m512;
  using X = __m512i;
  static constexpr int kLanes = 16;
  static VI Zero() { return _mm512_setzero_si512(); }
  static VI LoadW(const int8_t* p) { return _mm512_load_si512(p); }
  static X BroadcastX(const int8_t* p) {
    int32_t four;
    std::memcpy(&four, p, sizeof(four));
    return _mm512_set1_epi32(four);
  }
  static VI Dot(VI acc, X x, VI w) { return _mm512_dpbusd_epi32(acc, x, w); }
  static VF Finish(VI acc, const int32_t* sums, float x_scale, const float* w_scales) {
    const VI dot = _mm512_sub_epi32(acc, _mm512_slli_epi32(_mm512_loadu_si512(sums), 7));
    const VF scale = _mm512_mul_ps(_mm512_set1_ps(x_scale), _mm512_loadu_ps(w_scales));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale);
  }
  static VF AddBias(VF v, const float* p) { return _mm512_add_ps(v, _mm512_loadu_ps(p)); }
  static void StoreF(float* p, VF v) { _mm512_storeu_ps(p, v); }
};

#include "kernels/cpu/gemm_w8a8_inl.h"

}  // namespace

void GemmW8A8PanelsAvx512Vnni(const GemmParams& p, const QuantizedRows& x, int64_t panel_begin,
                              int64_t panel_end) {
  W8A8Panels<Ops>(p, x, panel_begin, panel_end);
}

// QuantizeRowsW8A8 with 16 lanes: the integer max of |x|'s bit patterns
// (gemm_w8a8.cc) and vcvtps2dq's round-to-nearest-even, so equal to it byte
// for byte.
void QuantizeRowsW8A8Avx512(const float* x, int64_t ldx, int64_t m, int64_t k, bool shifted,
                            int8_t* codes, float* scales) {
  const int64_t depth = W8A8Depth(k);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const __m512i offset = _mm512_set1_epi32(shifted ? 128 : 0);
  for (int64_t row = 0; row < m; ++row) {
    const float* xr = x + row * ldx;
    __m512i amax = _mm512_setzero_si512();
    int64_t kk = 0;
    for (; kk + 16 <= k; kk += 16) {
      amax = _mm512_max_epi32(amax, _mm512_and_si512(_mm512_loadu_si512(xr + kk), abs_mask));
    }
    if (kk < k) {
      const __mmask16 tail = static_cast<__mmask16>((1u << (k - kk)) - 1);
      amax = _mm512_max_epi32(
          amax, _mm512_and_si512(_mm512_maskz_loadu_epi32(tail, xr + kk), abs_mask));
    }
    const int32_t amax_bits = _mm512_reduce_max_epi32(amax);
    if (amax_bits >= 0x7f800000 || amax_bits == 0) {
      // As the scalar quantizer: zero scale, or NaN for Inf / NaN rows.
      QuantizeRowsW8A8(xr, ldx, 1, k, shifted, codes + row * depth, scales + row);
      continue;
    }
    float amax_f;
    std::memcpy(&amax_f, &amax_bits, sizeof(amax_f));
    scales[row] = amax_f / 127.0f;
    const __m512 inv = _mm512_set1_ps(127.0f / amax_f);
    int8_t* out = codes + row * depth;
    auto quantize = [&](__m512 v) {
      __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v, inv));
      q = _mm512_min_epi32(_mm512_max_epi32(q, lo), hi);
      return _mm512_cvtepi32_epi8(_mm512_add_epi32(q, offset));
    };
    for (kk = 0; kk + 16 <= k; kk += 16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + kk), quantize(_mm512_loadu_ps(xr + kk)));
    }
    for (int64_t pad = kk; pad < depth; ++pad) out[pad] = static_cast<int8_t>(shifted ? 128 : 0);
    if (kk < k) {
      const __mmask16 tail = static_cast<__mmask16>((1u << (k - kk)) - 1);
      alignas(16) int8_t last[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(last), quantize(_mm512_maskz_loadu_ps(tail, xr + kk)));
      std::memcpy(out + kk, last, static_cast<size_t>(k - kk));
    }
  }
}

}  // namespace kvserve::kernels::internal

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif
