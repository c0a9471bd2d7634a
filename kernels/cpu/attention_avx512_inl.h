// AVX-512F helpers shared by the tile steps of PagedAttention
// (attention_avx512.cc, attention_codes_avx512.cc). Include it inside a
// KVSERVE_TARGET_BEGIN region that has at least avx512f. The functions have
// internal linkage: each file's copy is compiled for that file's target, so
// a linker can never pick a copy built for a larger instruction set. Include
// <algorithm>, <cmath> and attention_internal.h before the region too, so
// that the includes below find them done.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_internal.h"

namespace kvserve::kernels::internal {
namespace {

constexpr int kTile = kAttentionKeyTile;
static_assert(kTile == 32, "two 16-key score vectors per tile");

// exp(x) for 16 floats: the same reduction and polynomial as avx2_math.h's
// Exp256 (so within ~2 ulp of expf); below -87.3, -inf included, gives 0;
// NaN gives NaN.
inline __m512 Exp512(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  // NaN stays NaN: max and min return their second operand when either is
  // NaN, so x goes second.
  x = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(lo, x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 poly = _mm512_set1_ps(1.9875691500e-4f);
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.3981999507e-3f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(8.3334519073e-3f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(4.1665795894e-2f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(1.6666665459e-1f));
  poly = _mm512_fmadd_ps(poly, r, _mm512_set1_ps(5.0000001201e-1f));
  poly = _mm512_fmadd_ps(poly, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow),
                             _mm512_mul_ps(poly, _mm512_castsi512_ps(e)));
}

// Lane i of the result = the sum of a[i]'s 16 lanes. Every vector's lanes
// meet in the same tree: within each 128-bit quarter (x0 + x2) + (x1 + x3),
// then quarters (Q0 + Q2) + (Q1 + Q3).
inline __m512 Sum16Each(const __m512* a) {
  __m512 u[8];
  for (int i = 0; i < 8; ++i) {
    u[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  }
  __m512 w[4];
  for (int i = 0; i < 4; ++i) {
    w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  const __m512 y01 = _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 y23 = _mm512_add_ps(_mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Sum of 16 lanes in a fixed order (halves, then quarters, ...).
inline float SumLanes(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The online-softmax step of head g over a tile's n keys' scores s0 (keys
// 0..15) and s1 (16..31), lanes past n -inf (and left so): softcap, running max m,
// correction exp(m_old - m) into *corr, weights exp(s - m) into w[0, 32),
// running sum l.
inline void SoftmaxStep(const PagedAttentionParams& p, HeadPass& pass, int g, int n, __m512 s0,
                        __m512 s1, float* w, float* corr) {
  if (p.softcap > 0.0f) {
    // As the other paths: per key, softcap * tanh(s / softcap).
    _mm512_store_ps(w, s0);
    _mm512_store_ps(w + 16, s1);
    for (int j = 0; j < n; ++j) w[j] = std::tanh(w[j] / p.softcap) * p.softcap;
    s0 = _mm512_load_ps(w);
    s1 = _mm512_load_ps(w + 16);
  }
  // The max is exact in any order; -inf lanes never win over a real key.
  const float new_m = std::max(pass.m[g], _mm512_reduce_max_ps(_mm512_max_ps(s0, s1)));
  *corr = _mm512_cvtss_f32(Exp512(_mm512_set1_ps(pass.m[g] - new_m)));
  pass.m[g] = new_m;
  const __m512 vm = _mm512_set1_ps(new_m);
  const __m512 e0 = Exp512(_mm512_sub_ps(s0, vm));
  const __m512 e1 = Exp512(_mm512_sub_ps(s1, vm));
  _mm512_store_ps(w, e0);
  _mm512_store_ps(w + 16, e1);
  pass.l[g] = pass.l[g] * *corr + SumLanes(_mm512_add_ps(e0, e1));
}

// out[h][d, d + 16 kVecs) = out * corr[h] + sum_j w[h][j] * v_j, for kHeads
// heads, v_j's 16-value pieces given by Load(vals[j], d'); every (head,
// column vector) is one chain of n FMAs.
template <class Row, __m512 (*Load)(const Row*, int), int kHeads, int kVecs>
inline void AccumulateBlock(float* const* out, const float* corr, const float (*w)[kTile],
                            const Row* const* vals, int n, int d) {
  __m512 o[kHeads][kVecs];
  for (int h = 0; h < kHeads; ++h) {
    const __m512 ch = _mm512_set1_ps(corr[h]);
    for (int c = 0; c < kVecs; ++c)
      o[h][c] = _mm512_mul_ps(_mm512_loadu_ps(out[h] + d + 16 * c), ch);
  }
  for (int j = 0; j < n; ++j) {
    __m512 v[kVecs];
    for (int c = 0; c < kVecs; ++c) v[c] = Load(vals[j], d + 16 * c);
    for (int h = 0; h < kHeads; ++h) {
      const __m512 wj = _mm512_set1_ps(w[h][j]);
      for (int c = 0; c < kVecs; ++c) o[h][c] = _mm512_fmadd_ps(wj, v[c], o[h][c]);
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(out[h] + d + 16 * c, o[h][c]);
  }
}

template <class Row, __m512 (*Load)(const Row*, int), int kHeads>
void AccumulateHeads(float* const* out, const float* corr, const float (*w)[kTile],
                     const Row* const* vals, int n, int vecs) {
  int c = 0;
  for (; c + 4 <= vecs; c += 4)
    AccumulateBlock<Row, Load, kHeads, 4>(out, corr, w, vals, n, 16 * c);
  switch (vecs - c) {
    case 3:
      AccumulateBlock<Row, Load, kHeads, 3>(out, corr, w, vals, n, 16 * c);
      break;
    case 2:
      AccumulateBlock<Row, Load, kHeads, 2>(out, corr, w, vals, n, 16 * c);
      break;
    case 1:
      AccumulateBlock<Row, Load, kHeads, 1>(out, corr, w, vals, n, 16 * c);
      break;
    default:
      break;
  }
}

// out = out * corr + sum_j w[j] v_j, j < n, for heads [g0, g1) of the pass,
// four heads at a time (4 x 4 accumulators, 4 value and 1 weight zmm live).
template <class Row, __m512 (*Load)(const Row*, int)>
void AccumulateHeadRange(HeadPass& pass, int g0, int g1, const float* corr, const float (*w)[kTile],
                         const Row* const* vals, int n, int vecs) {
  for (int g = g0; g < g1; g += 4) {
    float* const* out = pass.out + g;
    switch (std::min(4, g1 - g)) {
      case 4:
        AccumulateHeads<Row, Load, 4>(out, corr + g, w + g, vals, n, vecs);
        break;
      case 3:
        AccumulateHeads<Row, Load, 3>(out, corr + g, w + g, vals, n, vecs);
        break;
      case 2:
        AccumulateHeads<Row, Load, 2>(out, corr + g, w + g, vals, n, vecs);
        break;
      default:
        AccumulateHeads<Row, Load, 1>(out, corr + g, w + g, vals, n, vecs);
        break;
    }
  }
}

// The accumulation of every head of the pass that attends some of the
// tile, each run of heads with the same key count together.
template <class Row, __m512 (*Load)(const Row*, int)>
void AccumulatePass(HeadPass& pass, const float* corr, const float (*w)[kTile],
                    const Row* const* vals, int vecs) {
  for (int g = 0; g < pass.count;) {
    const int e = HeadRunEnd(pass, g);
    if (pass.n[g] > 0) AccumulateHeadRange<Row, Load>(pass, g, e, corr, w, vals, pass.n[g], vecs);
    g = e;
  }
}

}  // namespace
}  // namespace kvserve::kernels::internal
