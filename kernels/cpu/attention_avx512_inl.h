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

// The first two steps of the lane trees below: lane k of 128-bit quarter q
// of w[i] = the sum of a[4i + k]'s lanes in its quarter q, as
// (x0 + x2) + (x1 + x3).
inline void SumQuartersEach(const __m512* a, __m512* w) {
  __m512 u[8];
  for (int i = 0; i < 8; ++i) {
    u[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  }
  for (int i = 0; i < 4; ++i) {
    w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
}

// Lane i of the result = the sum of a[i]'s 16 lanes. Every vector's lanes
// meet in the same tree: within each 128-bit quarter (x0 + x2) + (x1 + x3),
// then quarters (Q0 + Q2) + (Q1 + Q3).
inline __m512 Sum16Each(const __m512* a) {
  __m512 w[4];
  SumQuartersEach(a, w);
  const __m512 y01 = _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 y23 = _mm512_add_ps(_mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Lane i (i < 4) of the result = the reduction by Op of a[i]'s 16 lanes,
// four vectors side by side. Each vector's lanes meet in the same tree,
// whichever vectors share the call: halves (lane i with lane i + 8), then
// quarters (i with i + 4), then i with i + 2, then i with i + 1. For a sum
// that order is part of the result's bits (the paths before this one summed
// a head's weights in it too): keep it.
template <__m512 (*Op)(__m512, __m512)>
inline __m128 ReduceEach4(const __m512* a) {
  // Lanes 0..7: a[0]'s halves met, 8..15: a[1]'s (and a[2], a[3] in y).
  const __m512 x = Op(_mm512_shuffle_f32x4(a[0], a[1], _MM_SHUFFLE(1, 0, 1, 0)),
                      _mm512_shuffle_f32x4(a[0], a[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 y = Op(_mm512_shuffle_f32x4(a[2], a[3], _MM_SHUFFLE(1, 0, 1, 0)),
                      _mm512_shuffle_f32x4(a[2], a[3], _MM_SHUFFLE(3, 2, 3, 2)));
  // Quarter i: a[i]'s quarters met.
  __m512 z = Op(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
  z = Op(z, _mm512_shuffle_ps(z, z, _MM_SHUFFLE(3, 2, 3, 2)));
  z = Op(z, _mm512_movehdup_ps(z));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), z));
}

inline __m512 Add512(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
inline __m512 Max512(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }

// The online-softmax step of up to four heads of the pass, heads[0, count),
// over a tile: head i's scores s[i][0] (keys 0..15) and s[i][1] (16..31),
// lanes past its key count -inf (and left so). Per head: softcap, running
// max m, correction exp(m_old - m) into corr[heads[i]], weights exp(s - m)
// into w[i][0, 32), running sum l. The heads' scalar steps (maxima, sums,
// the correction's exp) run side by side in the lanes of one vector; every
// lane does what one head alone would, so a head's bits do not depend on
// the heads beside it (batch and chunk invariance).
inline void SoftmaxStep4(const PagedAttentionParams& p, HeadPass& pass, const int* heads, int count,
                         __m512 (*s)[2], float* const* w, float* corr) {
  // Callers pass 1..4 heads. (The check also shows GCC 12 that slot 0 is
  // set below, which silences a false -Wuninitialized in the intrinsics.)
  if (count < 1) return;
  if (p.softcap > 0.0f) {
    // As the other paths: per key, softcap * tanh(s / softcap).
    for (int i = 0; i < count; ++i) {
      float* wi = w[i];
      _mm512_store_ps(wi, s[i][0]);
      _mm512_store_ps(wi + 16, s[i][1]);
      for (int j = 0; j < pass.n[heads[i]]; ++j) wi[j] = std::tanh(wi[j] / p.softcap) * p.softcap;
      s[i][0] = _mm512_load_ps(wi);
      s[i][1] = _mm512_load_ps(wi + 16);
    }
  }
  // Slots past count repeat head 0; their lanes are computed and dropped.
  float m_old[4], l_old[4];
  __m512 tile_max[4];
  for (int i = 0; i < count; ++i) {
    m_old[i] = pass.m[heads[i]];
    l_old[i] = pass.l[heads[i]];
    tile_max[i] = _mm512_max_ps(s[i][0], s[i][1]);
  }
  for (int i = count; i < 4; ++i) {
    m_old[i] = m_old[0];
    l_old[i] = l_old[0];
    tile_max[i] = tile_max[0];
  }
  // The max is exact in any order; -inf lanes never win over a real key.
  // max_ps(t, m) keeps m unless t > m, as std::max(m, t) does. So where
  // every m_old is finite and no score exceeds it, m stays and the
  // correction is exp(0) = 1 exactly (Exp512(0) is 1): the reduction and
  // the exp are skipped, the bits the same. After a pass's first tiles
  // that is the common case.
  const __m128 vm_old = _mm_setr_ps(m_old[0], m_old[1], m_old[2], m_old[3]);
  bool max_kept = true;
  for (int i = 0; i < count; ++i) {
    max_kept = max_kept && std::isfinite(m_old[i]) &&
               _mm512_cmp_ps_mask(tile_max[i], _mm512_set1_ps(m_old[i]), _CMP_GT_OQ) == 0;
  }
  __m128 new_m = vm_old, vcorr = _mm_set1_ps(1.0f);
  if (!max_kept) {
    new_m = _mm_max_ps(ReduceEach4<Max512>(tile_max), vm_old);
    vcorr = _mm512_castps512_ps128(Exp512(_mm512_zextps128_ps512(_mm_sub_ps(vm_old, new_m))));
  }
  alignas(16) float m_new[4];
  _mm_store_ps(m_new, new_m);
  __m512 e[4];
  for (int i = 0; i < count; ++i) {
    const __m512 vm = _mm512_set1_ps(m_new[i]);
    const __m512 e0 = Exp512(_mm512_sub_ps(s[i][0], vm));
    const __m512 e1 = Exp512(_mm512_sub_ps(s[i][1], vm));
    _mm512_store_ps(w[i], e0);
    _mm512_store_ps(w[i] + 16, e1);
    e[i] = _mm512_add_ps(e0, e1);
  }
  for (int i = count; i < 4; ++i) e[i] = e[0];
  alignas(16) float l_new[4], c[4];
  const __m128 vl_old = _mm_setr_ps(l_old[0], l_old[1], l_old[2], l_old[3]);
  _mm_store_ps(l_new, _mm_add_ps(_mm_mul_ps(vl_old, vcorr), ReduceEach4<Add512>(e)));
  _mm_store_ps(c, vcorr);
  for (int i = 0; i < count; ++i) {
    pass.m[heads[i]] = m_new[i];
    pass.l[heads[i]] = l_new[i];
    corr[heads[i]] = c[i];
  }
}

// The softmax steps of a tile for the heads active[0, num_active) of the
// pass (those attending some of its keys), four at a time: score(a, s)
// fills active head a's two score vectors (a share of next_tile's lines,
// if any, is asked for before each head's), SoftmaxStep4 writes head g's
// weights at weights_of(i, g) (i: its place in the group), then
// weighed(heads, count, rows) sees each group's weight rows.
template <class Score, class WeightsOf, class Weighed>
inline void SoftmaxOfActiveHeads(const PagedAttentionParams& p, HeadPass& pass, const int* active,
                                 int num_active, LinePrefetcher* next_tile, float* corr,
                                 Score score, WeightsOf weights_of, Weighed weighed) {
  for (int a0 = 0; a0 < num_active; a0 += 4) {
    const int count = std::min(4, num_active - a0);
    __m512 s[4][2];
    float* rows[4];
    for (int i = 0; i < count; ++i) {
      if (next_tile != nullptr) next_tile->Issue(next_tile->LinesPerStep(1, pass.count));
      score(a0 + i, s[i]);
      rows[i] = weights_of(i, active[a0 + i]);
    }
    SoftmaxStep4(p, pass, active + a0, count, s, rows, corr);
    weighed(active + a0, count, rows);
  }
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

// The blocks of a value accumulation over heads [g0, g1) of a pass and
// rows of `vecs` 16-value vectors: groups of up to four heads, each in
// blocks of up to four vectors (4 x 4 accumulators live), calling
// block.template operator()<kHeads, kVecs>(g, d) for the group from head g
// and the vectors from value d. kHeads and kVecs are compile-time, so that
// a block's accumulators stay in registers.
template <int kHeads, class Block>
inline void ForEachVectorBlock(int g, int vecs, Block& block) {
  int c = 0;
  for (; c + 4 <= vecs; c += 4) block.template operator()<kHeads, 4>(g, 16 * c);
  switch (vecs - c) {
    case 3:
      block.template operator()<kHeads, 3>(g, 16 * c);
      break;
    case 2:
      block.template operator()<kHeads, 2>(g, 16 * c);
      break;
    case 1:
      block.template operator()<kHeads, 1>(g, 16 * c);
      break;
    default:
      break;
  }
}

template <class Block>
inline void ForEachAccumulatorBlock(int g0, int g1, int vecs, Block&& block) {
  for (int g = g0; g < g1; g += 4) {
    switch (std::min(4, g1 - g)) {
      case 4:
        ForEachVectorBlock<4>(g, vecs, block);
        break;
      case 3:
        ForEachVectorBlock<3>(g, vecs, block);
        break;
      case 2:
        ForEachVectorBlock<2>(g, vecs, block);
        break;
      default:
        ForEachVectorBlock<1>(g, vecs, block);
        break;
    }
  }
}

// run(g0, g1, n) for each run of heads [g0, g1) of the pass that attend the
// same n > 0 of the tile's keys (what a value accumulation shares).
template <class Run>
inline void ForEachAttendingHeadRun(const HeadPass& pass, Run&& run) {
  for (int g = 0; g < pass.count;) {
    const int e = HeadRunEnd(pass, g);
    if (pass.n[g] > 0) run(g, e, pass.n[g]);
    g = e;
  }
}

// The accumulation of every head of the pass that attends some of the
// tile: out = out * corr + sum_j w[j] v_j, j < n, each run of heads with
// the same key count together.
template <class Row, __m512 (*Load)(const Row*, int)>
void AccumulatePass(HeadPass& pass, const float* corr, const float (*w)[kTile],
                    const Row* const* vals, int vecs) {
  ForEachAttendingHeadRun(pass, [&](int g0, int g1, int n) {
    ForEachAccumulatorBlock(g0, g1, vecs, [&]<int kHeads, int kVecs>(int g, int d) {
      AccumulateBlock<Row, Load, kHeads, kVecs>(pass.out + g, corr + g, w + g, vals, n, d);
    });
  });
}

}  // namespace
}  // namespace kvserve::kernels::internal
