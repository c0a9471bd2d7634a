// Internal to kernels/cpu: AVX2 helpers shared by the attention and
// elementwise kernels. Callers must themselves be compiled for avx2,fma.
#pragma once

#include <immintrin.h>

namespace kvserve::kernels::internal {

// exp(x) for 8 floats, within ~2 ulp of expf on [-87.3, 88]: Cody-Waite
// reduction x = n ln2 + r, a degree-6 polynomial for e^r, then 2^n through the
// exponent bits. Below -87.3 (including -inf) the result is 0; above 88 it is
// clamped to e^88; NaN gives NaN. Deterministic: a fixed sequence of IEEE
// operations.
__attribute__((target("avx2,fma"))) inline __m256 Exp256(__m256 x) {
  const __m256 kHi = _mm256_set1_ps(88.0f);
  const __m256 kLo = _mm256_set1_ps(-87.3f);
  const __m256 underflow = _mm256_cmp_ps(x, kLo, _CMP_LT_OQ);
  // NaN stays NaN: max and min return their second operand when either is
  // NaN, so x goes second (the clamp is otherwise the same either way).
  x = _mm256_min_ps(kHi, _mm256_max_ps(kLo, x));
  // n = round(x / ln2); r = x - n ln2 in two parts (ln2 = kLn2Hi + kLn2Lo).
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  // e^r ~ 1 + r + r^2 (1/2 + r (1/6 + r (1/24 + r (1/120 + r (1/720 + r/5040)))))
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n: n in [-126, 127] after the clamp, a normal exponent.
  __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(underflow, result);
}

// Sum of the 8 lanes in a fixed pairing order.
__attribute__((target("avx2,fma"))) inline float HorizontalSum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace kvserve::kernels::internal
