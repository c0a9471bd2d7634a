// The row converters of the dot-product formats (gemm_dot.h) with AVX-512F
// alone (any AVX-512 CPU runs them, with or without VNNI / BF16), equal to
// the scalar ones in gemm_w8a8.cc and gemm_bf16dot.cc bit for bit.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_dot.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx512f")

namespace kvserve::kernels::internal {
namespace {

// The first `count` (< 16) lanes.
inline __mmask16 FirstLanes(int64_t count) { return static_cast<__mmask16>((1u << count) - 1); }

// RoundToBf16FlushSubnormal on 16 lanes.
inline __m256i RoundBf16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i magnitude = _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff));
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), odd), 16);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(magnitude, _mm512_set1_epi32(0x7f800000));
  const __mmask16 subnormal = _mm512_cmplt_epi32_mask(magnitude, _mm512_set1_epi32(0x00800000));
  rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
  rounded =
      _mm512_mask_mov_epi32(rounded, subnormal, _mm512_and_si512(high, _mm512_set1_epi32(0x8000)));
  return _mm512_cvtepi32_epi16(rounded);
}

}  // namespace

void RoundRowsBf16Avx512(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* out) {
  const int64_t depth = Bf16DotDepth(k);
  for (int64_t row = 0; row < m; ++row) {
    const float* xr = x + row * ldx;
    uint16_t* o = out + row * depth;
    int64_t kk = 0;
    for (; kk + 16 <= k; kk += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + kk), RoundBf16(_mm512_loadu_ps(xr + kk)));
    }
    if (kk < k) {
      alignas(32) uint16_t last[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(last),
                         RoundBf16(_mm512_maskz_loadu_ps(FirstLanes(k - kk), xr + kk)));
      std::memcpy(o + kk, last, static_cast<size_t>(k - kk) * sizeof(uint16_t));
    }
    for (kk = k; kk < depth; ++kk) o[kk] = 0;
  }
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
      const __mmask16 tail = FirstLanes(k - kk);
      amax = _mm512_max_epi32(amax,
                              _mm512_and_si512(_mm512_maskz_loadu_epi32(tail, xr + kk), abs_mask));
    }
    int8_t* out = codes + row * depth;
    const float row_inv =
        StartW8A8Row(_mm512_reduce_max_epi32(amax), xr, k, shifted, out, scales + row);
    if (row_inv == 0.0f) continue;  // quantized whole by the scalar quantizer
    const __m512 inv = _mm512_set1_ps(row_inv);
    auto quantize = [&](__m512 v) {
      __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v, inv));
      q = _mm512_min_epi32(_mm512_max_epi32(q, lo), hi);
      return _mm512_cvtepi32_epi8(_mm512_add_epi32(q, offset));
    };
    for (kk = 0; kk + 16 <= k; kk += 16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + kk), quantize(_mm512_loadu_ps(xr + kk)));
    }
    if (kk < k) {
      const __mmask16 tail = FirstLanes(k - kk);
      alignas(16) int8_t last[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(last),
                      quantize(_mm512_maskz_loadu_ps(tail, xr + kk)));
      std::memcpy(out + kk, last, static_cast<size_t>(k - kk));
    }
  }
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
