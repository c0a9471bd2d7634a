// The row converters of the dot-product formats (gemm_dot.h) on 8-lane
// AVX2 vectors, equal to the scalar ones in gemm_w8a8.cc and
// gemm_bf16dot.cc bit for bit (and so to the AVX-512 ones). Every product
// converts its input rows first: in a profile of a w8a8 weights-bench run on
// an AVX2 EPYC the scalar quantizer had 0.7% of the samples, against 27% for
// the decode GEMV and 12% for the prefill GEMM; this one took prefill 3%
// faster.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/gemm_dot.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx2")

namespace kvserve::kernels::internal {
namespace {

// The first `count` (< 8) lanes all ones, for vmaskmovps: a row's last
// values are loaded without reading past it.
inline __m256i FirstLanes(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Values [kk, kk + 8) of a row, or its last k - kk (< 8) and zeros.
inline __m256 LoadUpTo8(const float* row, int64_t kk, int64_t k) {
  return k - kk >= 8 ? _mm256_loadu_ps(row + kk) : _mm256_maskload_ps(row + kk, FirstLanes(k - kk));
}

// Calls convert(LoadUpTo8(row, kk, k)) for kk = 0, 8, ... < k and stores
// the first min(8, k - kk) elements of the vector it returns (8 elements of
// T in its low bytes) at out + kk.
template <class T, class Convert>
inline void ConvertRow8(const float* row, int64_t k, T* out, Convert convert) {
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    const __m128i v = convert(_mm256_loadu_ps(row + kk));
    std::memcpy(out + kk, &v, 8 * sizeof(T));
  }
  if (kk < k) {
    const __m128i v = convert(LoadUpTo8(row, kk, k));
    std::memcpy(out + kk, &v, static_cast<size_t>(k - kk) * sizeof(T));
  }
}

// RoundToBf16FlushSubnormal on 8 lanes, as 8 uint16 in order.
inline __m128i RoundBf16(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i high = _mm256_srli_epi32(bits, 16);
  const __m256i odd = _mm256_and_si256(high, _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), odd), 16);
  const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i subnormal = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x00800000), magnitude);
  rounded = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, _mm256_set1_epi32(0x40)), nan);
  rounded =
      _mm256_blendv_epi8(rounded, _mm256_and_si256(high, _mm256_set1_epi32(0x8000)), subnormal);
  // Every lane is in [0, 0xffff]: the unsigned saturating pack keeps it.
  return _mm_packus_epi32(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1));
}

}  // namespace

void RoundRowsBf16Avx2(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* out) {
  const int64_t depth = Bf16DotDepth(k);
  for (int64_t row = 0; row < m; ++row) {
    uint16_t* o = out + row * depth;
    ConvertRow8(x + row * ldx, k, o, RoundBf16);
    for (int64_t kk = k; kk < depth; ++kk) o[kk] = 0;
  }
}

// The integer max of |x|'s bit patterns (gemm_w8a8.cc says why) and
// vcvtps2dq's round-to-nearest-even, as the scalar quantizer's magic add.
void QuantizeRowsW8A8Avx2(const float* x, int64_t ldx, int64_t m, int64_t k, bool shifted,
                          int8_t* codes, float* scales) {
  const int64_t depth = W8A8Depth(k);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  // Shifted codes are code + 128 as a byte: a wrapping byte add.
  const __m128i offset = _mm_set1_epi8(static_cast<char>(shifted ? 128 : 0));
  for (int64_t row = 0; row < m; ++row) {
    const float* xr = x + row * ldx;
    __m256i amax = _mm256_setzero_si256();
    for (int64_t kk = 0; kk < k; kk += 8) {
      amax = _mm256_max_epi32(
          amax, _mm256_and_si256(_mm256_castps_si256(LoadUpTo8(xr, kk, k)), abs_mask));
    }
    __m128i m4 = _mm_max_epi32(_mm256_castsi256_si128(amax), _mm256_extracti128_si256(amax, 1));
    m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, _MM_SHUFFLE(1, 0, 3, 2)));
    m4 = _mm_max_epi32(m4, _mm_shuffle_epi32(m4, _MM_SHUFFLE(2, 3, 0, 1)));
    int8_t* out = codes + row * depth;
    const float row_inv = StartW8A8Row(_mm_cvtsi128_si32(m4), xr, k, shifted, out, scales + row);
    if (row_inv == 0.0f) continue;  // quantized whole by the scalar quantizer
    const __m256 inv = _mm256_set1_ps(row_inv);
    // 8 codes in order in the low 8 bytes.
    auto quantize = [&](__m256 v) {
      __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(v, inv));
      q = _mm256_min_epi32(_mm256_max_epi32(q, lo), hi);
      const __m128i q16 =
          _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
      return _mm_add_epi8(_mm_packs_epi16(q16, q16), offset);
    };
    ConvertRow8(xr, k, out, quantize);
  }
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
