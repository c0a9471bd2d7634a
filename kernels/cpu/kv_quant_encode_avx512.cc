// AVX-512F encoder of the scaled KV row formats (kv_quant.h), 16 values at a
// time. Each row's bytes and scale are QuantizeKvRow's, bit for bit: the
// same max|row| (a maximum is exact in any order), the same x / s (one IEEE
// division), and the same rounding, done on the bits as the scalar codecs
// do it. Rows the scalar encoder treats specially (a NaN, or a scale of 0 or
// infinity) go to it.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx512f")

namespace kvserve::kernels {
namespace {

constexpr int kRoundNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

inline __m512i SignBits(__m512 q) { return _mm512_srli_epi32(_mm512_castps_si512(q), 31); }

// Round-to-nearest-even integers of q clamped to [lo, hi] (IntCodes).
inline __m512i IntCodes16(__m512 q, float lo, float hi) {
  const __m512 r = _mm512_roundscale_ps(q, kRoundNearest);
  return _mm512_cvtps_epi32(
      _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(lo)), _mm512_set1_ps(hi)));
}

// Fp8Magnitude / Fp4Magnitude (kv_quant.cc) on 16 lanes: below the smallest
// normal, round a * 2^sub_shift to an integer; else round the mantissa to
// `mantissa_bits` to nearest even and rebias; at or above `max_value`, the
// largest code. Then the sign bit at `sign_bit`.
inline __m512i MinifloatCodes16(__m512 q, float min_normal, float sub_scale, int mantissa_bits,
                                int rebias, float max_value, int max_code, int sign_bit) {
  const __m512 a = _mm512_abs_ps(q);
  const __m512i sub = _mm512_cvtps_epi32(
      _mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(sub_scale)), kRoundNearest));
  const int drop = 23 - mantissa_bits;
  const __m512i b = _mm512_castps_si512(a);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, drop), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32((1 << (drop - 1)) - 1)), odd);
  const __m512i normal =
      _mm512_sub_epi32(_mm512_srli_epi32(rounded, drop), _mm512_set1_epi32(rebias));
  __m512i code = _mm512_mask_blend_epi32(
      _mm512_cmp_ps_mask(a, _mm512_set1_ps(min_normal), _CMP_LT_OQ), normal, sub);
  code = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(a, _mm512_set1_ps(max_value), _CMP_GE_OQ), code,
                                 _mm512_set1_epi32(max_code));
  return _mm512_or_si512(code, _mm512_slli_epi32(SignBits(q), sign_bit));
}

// 16 codes in [0, 15] (the low 4 bits of each lane) into 8 bytes, element
// 2i in the low nibble of byte i.
inline void StoreNibbles16(__m512i codes, uint8_t* dst) {
  const __m128i bytes = _mm512_cvtepi32_epi8(_mm512_and_si512(codes, _mm512_set1_epi32(15)));
  // Each 16-bit lane holds lo | hi << 8; make it lo | hi << 4.
  const __m128i pairs =
      _mm_or_si128(_mm_and_si128(bytes, _mm_set1_epi16(0x000f)),
                   _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi16(0x00f0)));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packus_epi16(pairs, pairs));
}

}  // namespace

float QuantizeKvRowAvx512(KvDtype dtype, const float* src, int dim, uint8_t* dst) {
  if (!KvHasScale(dtype) || dim % 16 != 0) return QuantizeKvRow(dtype, src, dim, dst);
  __m512 max = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int d = 0; d < dim; d += 16) {
    const __m512 v = _mm512_loadu_ps(src + d);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    max = _mm512_max_ps(max, _mm512_abs_ps(v));
  }
  const float s = _mm512_reduce_max_ps(max) / KvCodeMax(dtype);
  // NaN rows, all-zero rows and infinite scales: the scalar encoder's cases.
  if (nan != 0 || !(s > 0.0f && std::isfinite(s))) {
    return QuantizeKvRow(dtype, src, dim, dst);
  }
  const __m512 vs = _mm512_set1_ps(s);
  for (int d = 0; d < dim; d += 16) {
    const __m512 q = _mm512_div_ps(_mm512_loadu_ps(src + d), vs);
    switch (dtype) {
      case KvDtype::kInt8:
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + d),
                         _mm512_cvtepi32_epi8(IntCodes16(q, -127.0f, 127.0f)));
        break;
      case KvDtype::kInt4:
        StoreNibbles16(IntCodes16(q, -8.0f, 7.0f), dst + d / 2);
        break;
      case KvDtype::kFp8E4m3:
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + d),
                         _mm512_cvtepi32_epi8(MinifloatCodes16(q, 0x1p-6f, 0x1p9f, 3,
                                                               (127 - 7) << 3, 448.0f, 0x7e, 7)));
        break;
      case KvDtype::kFp4E2m1:
        StoreNibbles16(MinifloatCodes16(q, 1.0f, 2.0f, 1, (127 - 1) << 1, 6.0f, 7, 3), dst + d / 2);
        break;
      default:
        break;
    }
  }
  return s;
}

}  // namespace kvserve::kernels

KVSERVE_TARGET_END
