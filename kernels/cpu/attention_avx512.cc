// AVX-512F tile step of PagedAttention (fp32 rows, and bf16 / fp16 rows
// read in place): every query head of a kv group
// against one key tile at once, so each key and value row read from the
// cache (or the decoded tile) serves all of the group's heads, and the heads'
// dependency chains (scores -> softmax -> accumulation) run side by side.
//
// Per head the operations are fixed, whatever the group's size or the tile's
// place in the batch:
//   score_j  = scale * Sum16(sum_c q[c] * k_j[c])  (c over 16-lane chunks in
//              order, one FMA chain; Sum16 a fixed lane tree, the same for
//              every key)
//   weights  = exp(score - m_new) for 16 keys at a time (masked keys: 0)
//   out      = out * corr + sum_j w_j v_j          (j in order, one FMA each)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx512f")

#include "kernels/cpu/attention_avx512_inl.h"

namespace kvserve::kernels::internal {
namespace {

constexpr int kMaxVecs = 16;  // head_dim <= 256

// A row's 16 values from element d as fp32: fp32 rows as they are, and
// bf16 / fp16 rows widened in registers (exact, so the tile step computes
// what it would on the rows decoded to fp32 first).
inline __m512 LoadF32x16(const float* row, int d) { return _mm512_loadu_ps(row + d); }
inline __m512 LoadBf16x16(const uint16_t* row, int d) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + d));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 LoadF16x16(const uint16_t* row, int d) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + d)));
}

// Scores of keys[0, nk) (nk <= 16) for query q, lanes past nk = -inf.
template <class Row, __m512 (*Load)(const Row*, int)>
inline __m512 Scores16(const float* q, const Row* const* keys, int nk, int vecs, float scale) {
  const Row* k[16];
  for (int i = 0; i < 16; ++i) k[i] = keys[i < nk ? i : 0];
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_setzero_ps();
  for (int c = 0; c < vecs; ++c) {
    const __m512 qc = _mm512_loadu_ps(q + 16 * c);
    for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(qc, Load(k[i], 16 * c), a[i]);
  }
  const __m512 s = _mm512_mul_ps(Sum16Each(a), _mm512_set1_ps(scale));
  const __mmask16 valid = static_cast<__mmask16>((1u << nk) - 1);
  return _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), valid, s);
}

template <class Row, __m512 (*Load)(const Row*, int)>
void AttendTile(const PagedAttentionParams& p, HeadPass& pass, const Row* const* keys,
                const Row* const* vals, LinePrefetcher* next_tile) {
  const int vecs = p.head_dim / 16;
  alignas(64) float w[kMaxHeadsPerPass][kTile];
  float corr[kMaxHeadsPerPass];
  for (int g = 0; g < pass.count; ++g) {
    const int ng = pass.n[g];
    if (ng <= 0) continue;
    if (next_tile != nullptr) next_tile->Issue(next_tile->LinesPerStep(1, pass.count));
    __m512 s0 = Scores16<Row, Load>(pass.q[g], keys, std::min(ng, 16), vecs, p.scale);
    __m512 s1 = ng > 16 ? Scores16<Row, Load>(pass.q[g], keys + 16, ng - 16, vecs, p.scale)
                        : _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    SoftmaxStep(p, pass, g, ng, s0, s1, w[g], &corr[g]);
  }
  if (next_tile != nullptr) next_tile->IssueRest();
  AccumulatePass<Row, Load>(pass, corr, w, vals, vecs);
}

}  // namespace

bool Avx512AttentionSupports(int head_dim) {
  return head_dim > 0 && head_dim % 16 == 0 && head_dim / 16 <= kMaxVecs;
}

void AttendTileAvx512(const PagedAttentionParams& p, HeadPass& pass, const float* const* keys,
                      const float* const* vals, int /*n: pass.n[g] <= n per head*/,
                      LinePrefetcher* next_tile) {
  AttendTile<float, LoadF32x16>(p, pass, keys, vals, next_tile);
}

void AttendTile16Avx512(const PagedAttentionParams& p, HeadPass& pass, const uint16_t* const* keys,
                        const uint16_t* const* vals, int /*n*/, LinePrefetcher* next_tile) {
  if (p.kv_dtype == KvDtype::kBfloat16) {
    AttendTile<uint16_t, LoadBf16x16>(p, pass, keys, vals, next_tile);
  } else {
    AttendTile<uint16_t, LoadF16x16>(p, pass, keys, vals, next_tile);
  }
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
