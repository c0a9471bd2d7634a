// e4m3fn KV codes in AVX-512F registers, shared by the row decoder
// (kv_quant_avx512.cc) and the attention step that reads fp8 rows in place
// (attention_avx512.cc). Include it inside a KVSERVE_TARGET_BEGIN region with
// at least avx512f, after <immintrin.h> and <cstdint>; the functions have
// internal linkage, so each file's copy is built for that file's target.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kvserve::kernels::internal {
namespace {

// The 16 codes at src as fp16 bits of their values times 2^-8, NaN codes
// aside. (c & 0x7f) << 7 puts a code's exponent and mantissa under fp16's,
// which is exactly its value times 2^-8, subnormals included (fp16's
// exponent bias is 8 more). Sign-extending c to 16 bits and shifting left
// by 7 puts that there and the sign in bits 15 and 14; bit 14 is cleared.
inline __m256i Fp8ToHalfTimes2PowMinus8(const uint8_t* src) {
  const __m256i t = _mm256_slli_epi16(
      _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))), 7);
  return _mm256_and_si256(t, _mm256_set1_epi16(static_cast<int16_t>(~0x4000)));
}

// True when one of the `dim` (a multiple of 16) e4m3 codes of rows a[0, n)
// or (b not null) b[0, n) is NaN: (c & 0x7f) + 1 reaches 0x80 only for c & 0x7f ==
// 0x7f, and never carries into the next byte, so 32-bit adds test four
// codes each. One loop and one branch for all the rows (a tile's keys and
// values): NaN codes are rare (the quantizer writes none).
inline bool Fp8RowPairsHaveNan(const uint8_t* const* a, const uint8_t* const* b, int n, int dim) {
  const __m512i low7 = _mm512_set1_epi32(0x7f7f7f7f), one = _mm512_set1_epi32(0x01010101);
  const __m128i low7_16 = _mm_set1_epi8(0x7f), one_16 = _mm_set1_epi8(1);
  __m512i acc = _mm512_setzero_si512();
  __m128i tail = _mm_setzero_si128();
  for (int j = 0; j < n; ++j) {
    int d = 0;
    for (; d + 64 <= dim; d += 64) {
      const __m512i x = _mm512_and_si512(_mm512_loadu_si512(a[j] + d), low7);
      acc = _mm512_or_si512(acc, _mm512_add_epi32(x, one));
      if (b != nullptr) {
        const __m512i y = _mm512_and_si512(_mm512_loadu_si512(b[j] + d), low7);
        acc = _mm512_or_si512(acc, _mm512_add_epi32(y, one));
      }
    }
    for (; d < dim; d += 16) {
      const __m128i x =
          _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a[j] + d)), low7_16);
      tail = _mm_or_si128(tail, _mm_add_epi8(x, one_16));
      if (b != nullptr) {
        const __m128i y =
            _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[j] + d)), low7_16);
        tail = _mm_or_si128(tail, _mm_add_epi8(y, one_16));
      }
    }
  }
  return _mm512_test_epi32_mask(acc, _mm512_set1_epi32(static_cast<int>(0x80808080u))) != 0 ||
         _mm_movemask_epi8(tail) != 0;
}

inline bool Fp8RowHasNan(const uint8_t* row, int dim) {
  return Fp8RowPairsHaveNan(&row, nullptr, 1, dim);
}

}  // namespace
}  // namespace kvserve::kernels::internal
