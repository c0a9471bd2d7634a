// AVX-512F decoders of the KV row formats (kv_quant.h), 16 values at a time,
// over a run of rows that lie back to back in the cache. Each value is the
// scalar decoder's, bit for bit: an exact conversion, then one fp32 product
// with the row's scale (NaN stays NaN; its payload may differ).
#include <immintrin.h>

#include <cassert>
#include <cstdint>
#include <limits>

#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx512f")

#include "kernels/cpu/kv_fp8_avx512_inl.h"

namespace kvserve::kernels {
namespace {

// The 16 nibbles of 8 bytes, element 2i = low nibble of byte i, 2i + 1 = high.
inline __m512i Nibbles16(const uint8_t* src) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
  const __m512i x = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));  // b0 b0 b1 b1 ...
  const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
  return _mm512_and_si512(_mm512_srlv_epi32(x, shifts), _mm512_set1_epi32(15));
}

// 16 e4m3fn codes times s, as Fp8E4m3ToFloat(c) * s, for codes known not
// to be NaN: each code's value times 2^-8 in fp16 (kv_fp8_avx512_inl.h),
// widened, times s * 2^8. Powers of two commute with the one rounding, so
// (value * 2^-8) * (s * 2^8) rounds as value * s does; s * 2^8 is exact
// (s <= FLT_MAX / 448).
inline __m512 Fp8NoNanTimesScale16(const uint8_t* src, __m512 s) {
  return _mm512_mul_ps(_mm512_cvtph_ps(internal::Fp8ToHalfTimes2PowMinus8(src)),
                       _mm512_mul_ps(s, _mm512_set1_ps(256.0f)));
}

// As above for any codes: 0x7f / 0xff are NaN.
inline __m512 Fp8TimesScale16(const uint8_t* src, __m512 s) {
  const __m512 v = Fp8NoNanTimesScale16(src, s);
  const __m512i c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(c, _mm512_set1_epi32(0x7f)),
                                                _mm512_set1_epi32(0x7f));
  return _mm512_mask_mov_ps(v, nan, _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
}

// One decoder per format: 16 values of a row from element d, times s for
// the scaled formats. (Plain functions, not lambdas: a lambda's conversion
// thunk would fall outside the target region.)
inline __m512 F32x16(const uint8_t* row, int d, __m512) {
  return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + d);
}
inline __m512 Bf16x16(const uint8_t* row, int d, __m512) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * d));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 F16x16(const uint8_t* row, int d, __m512) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * d)));
}
inline __m512 Int8x16(const uint8_t* row, int d, __m512 s) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), s);
}
inline __m512 Int4x16(const uint8_t* row, int d, __m512 s) {
  const __m512i eight = _mm512_set1_epi32(8);  // sign-extend: (q ^ 8) - 8
  const __m512i q = _mm512_sub_epi32(_mm512_xor_si512(Nibbles16(row + d / 2), eight), eight);
  return _mm512_mul_ps(_mm512_cvtepi32_ps(q), s);
}
inline __m512 Fp4x16(const uint8_t* row, int d, __m512 s) {
  const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f,
                                      -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
  return _mm512_mul_ps(_mm512_permutexvar_ps(Nibbles16(row + d / 2), table), s);
}

// Runs Decode16 for every row and 16-value step.
template <__m512 (*Decode16)(const uint8_t*, int, __m512)>
inline void DecodeRows(const uint8_t* src, int64_t row_bytes, const float* scales, int rows,
                       int dim, float* dst) {
  for (int r = 0; r < rows; ++r) {
    const __m512 s = _mm512_set1_ps(scales != nullptr ? scales[r] : 1.0f);
    const uint8_t* row = src + r * row_bytes;
    float* out = dst + static_cast<int64_t>(r) * dim;
    for (int d = 0; d < dim; d += 16) _mm512_storeu_ps(out + d, Decode16(row, d, s));
  }
}

// fp8 rows: the NaN test once per row, so rows without NaN codes (all but
// poisoned or overflowed ones) skip the per-16 NaN mask.
inline void DecodeFp8Rows(const uint8_t* src, const float* scales, int rows, int dim, float* dst) {
  for (int r = 0; r < rows; ++r) {
    const __m512 s = _mm512_set1_ps(scales != nullptr ? scales[r] : 1.0f);
    const uint8_t* row = src + static_cast<int64_t>(r) * dim;
    float* out = dst + static_cast<int64_t>(r) * dim;
    if (internal::Fp8RowHasNan(row, dim)) {
      for (int d = 0; d < dim; d += 16) _mm512_storeu_ps(out + d, Fp8TimesScale16(row + d, s));
    } else {
      for (int d = 0; d < dim; d += 16) _mm512_storeu_ps(out + d, Fp8NoNanTimesScale16(row + d, s));
    }
  }
}

}  // namespace

void DequantizeKvRowsAvx512(KvDtype dtype, const uint8_t* src, const float* scales, int rows,
                            int dim, float* dst) {
  assert(dim % 16 == 0);
  const int64_t rb = KvRowBytes(dtype, dim);
  switch (dtype) {
    case KvDtype::kFloat32:
      return DecodeRows<F32x16>(src, rb, nullptr, rows, dim, dst);
    case KvDtype::kBfloat16:
      return DecodeRows<Bf16x16>(src, rb, nullptr, rows, dim, dst);
    case KvDtype::kFloat16:
      return DecodeRows<F16x16>(src, rb, nullptr, rows, dim, dst);
    case KvDtype::kFp8E4m3:
      return DecodeFp8Rows(src, scales, rows, dim, dst);
    case KvDtype::kInt8:
      return DecodeRows<Int8x16>(src, rb, scales, rows, dim, dst);
    case KvDtype::kInt4:
      return DecodeRows<Int4x16>(src, rb, scales, rows, dim, dst);
    case KvDtype::kFp4E2m1:
      return DecodeRows<Fp4x16>(src, rb, scales, rows, dim, dst);
  }
}

}  // namespace kvserve::kernels

KVSERVE_TARGET_END
