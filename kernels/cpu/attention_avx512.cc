// AVX-512F tile step of PagedAttention (fp32 rows, and bf16 / fp16 / fp8
// rows read in place): every query head of a kv group
// against one key tile at once, so each key and value row read from the
// cache (or the decoded tile) serves all of the group's heads, and the heads'
// dependency chains (scores -> softmax -> accumulation) run side by side.
//
// Per head the operations are fixed, whatever the group's size or the tile's
// place in the batch:
//   score_j  = scale * Sum16(sum_c q[c] * k_j[c]) * ks_j  (c over 16-lane
//              chunks in order, one FMA chain; Sum16 a fixed lane tree, the
//              same for every key)
//   weights  = exp(score - m_new) for 16 keys at a time (masked keys: 0)
//   out      = out * corr + sum_j (w_j * vs_j) v_j   (j in order, one FMA each)
// ks_j / vs_j: the row's scale for fp8 rows (whose values enter before it,
// as in the AVX2 step), else 1 and not applied.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx512f")

#include "kernels/cpu/attention_avx512_inl.h"
#include "kernels/cpu/kv_fp8_avx512_inl.h"

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
// fp8 e4m3 rows: the codes' values times 2^-8, exactly (NaN codes come out
// finite: their rows get a NaN scale instead, AttendTileFp8Avx512).
inline __m512 LoadFp8x16(const uint8_t* row, int d) {
  return _mm512_cvtph_ps(Fp8ToHalfTimes2PowMinus8(row + d));
}

// Scores of keys[0, nk) (nk <= 16) for query q, times the keys' scales
// key_scales[0, 16) (nullable: none; past nk any finite value), lanes past
// nk = -inf.
template <class Row, __m512 (*Load)(const Row*, int)>
inline __m512 Scores16(const float* q, const Row* const* keys, int nk, int vecs, float scale,
                       const float* key_scales) {
  const Row* k[16];
  for (int i = 0; i < 16; ++i) k[i] = keys[i < nk ? i : 0];
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_setzero_ps();
  for (int c = 0; c < vecs; ++c) {
    const __m512 qc = _mm512_loadu_ps(q + 16 * c);
    for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(qc, Load(k[i], 16 * c), a[i]);
  }
  __m512 s = _mm512_mul_ps(Sum16Each(a), _mm512_set1_ps(scale));
  if (key_scales != nullptr) s = _mm512_mul_ps(s, _mm512_loadu_ps(key_scales));
  const __mmask16 valid = static_cast<__mmask16>((1u << nk) - 1);
  return _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), valid, s);
}

// Keys read by KLoad, values by VLoad; ks / vs (kTile each, nullable: none)
// scale the scores and the weights.
template <class KRow, __m512 (*KLoad)(const KRow*, int), class VRow,
          __m512 (*VLoad)(const VRow*, int)>
void AttendTile(const PagedAttentionParams& p, HeadPass& pass, const KRow* const* keys,
                const float* ks, const VRow* const* vals, const float* vs,
                LinePrefetcher* next_tile) {
  const int vecs = p.head_dim / 16;
  alignas(64) float w[kMaxHeadsPerPass][kTile];
  float corr[kMaxHeadsPerPass];
  int active[kMaxHeadsPerPass], num_active = 0;
  for (int g = 0; g < pass.count; ++g) {
    if (pass.n[g] > 0) active[num_active++] = g;
  }
  const auto score = [&](int a, __m512* s) {
    const int g = active[a], ng = pass.n[g];
    s[0] = Scores16<KRow, KLoad>(pass.q[g], keys, std::min(ng, 16), vecs, p.scale, ks);
    s[1] = ng > 16 ? Scores16<KRow, KLoad>(pass.q[g], keys + 16, ng - 16, vecs, p.scale,
                                           ks != nullptr ? ks + 16 : nullptr)
                   : _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  };
  const auto scale_by_values = [&](const int* heads, int count, float* const* rows) {
    if (vs == nullptr) return;
    for (int i = 0; i < count; ++i) {  // the weights of keys past ng stay 0
      const __mmask32 valid = static_cast<__mmask32>((uint64_t{1} << pass.n[heads[i]]) - 1);
      for (int half = 0; half < 2; ++half) {
        float* wh = rows[i] + 16 * half;
        _mm512_store_ps(wh,
                        _mm512_maskz_mul_ps(static_cast<__mmask16>(valid >> (16 * half)),
                                            _mm512_load_ps(wh), _mm512_loadu_ps(vs + 16 * half)));
      }
    }
  };
  SoftmaxOfActiveHeads(
      p, pass, active, num_active, next_tile, corr, score, [&](int, int g) { return w[g]; },
      scale_by_values);
  if (next_tile != nullptr) next_tile->IssueRest();
  AccumulatePass<VRow, VLoad>(pass, corr, w, vals, vecs);
}

// Rows [0, n) widened by Load into dst (dim floats each), rows[j] pointing
// at them.
template <class Row, __m512 (*Load)(const Row*, int)>
void WidenRows(const Row* const* src, int n, int dim, float* dst, const float** rows) {
  for (int j = 0; j < n; ++j) {
    float* row = dst + static_cast<int64_t>(j) * dim;
    for (int d = 0; d < dim; d += 16) _mm512_storeu_ps(row + d, Load(src[j], d));
    rows[j] = row;
  }
}

}  // namespace

bool Avx512AttentionSupports(int head_dim) {
  return head_dim > 0 && head_dim % 16 == 0 && head_dim / 16 <= kMaxVecs;
}

void AttendTileAvx512(const PagedAttentionParams& p, HeadPass& pass, const float* const* keys,
                      const float* const* vals, int /*n: pass.n[g] <= n per head*/,
                      LinePrefetcher* next_tile) {
  AttendTile<float, LoadF32x16, float, LoadF32x16>(p, pass, keys, nullptr, vals, nullptr,
                                                   next_tile);
}

void AttendTile16Avx512(const PagedAttentionParams& p, HeadPass& pass, const uint16_t* const* keys,
                        const uint16_t* const* vals, int /*n*/, LinePrefetcher* next_tile) {
  if (p.kv_dtype == KvDtype::kBfloat16) {
    AttendTile<uint16_t, LoadBf16x16, uint16_t, LoadBf16x16>(p, pass, keys, nullptr, vals, nullptr,
                                                             next_tile);
  } else {
    AttendTile<uint16_t, LoadF16x16, uint16_t, LoadF16x16>(p, pass, keys, nullptr, vals, nullptr,
                                                           next_tile);
  }
}

void AttendTileFp8Avx512(const PagedAttentionParams& p, HeadPass& pass,
                         const uint8_t* const* k_rows, const float* k_scales,
                         const uint8_t* const* v_rows, const float* v_scales, int n,
                         LinePrefetcher* next_tile) {
  const int dim = p.head_dim;
  // The rows' scales times 2^8 (LoadFp8x16's values are 2^-8 of the
  // codes'; a power of two, exact); a row holding a NaN code gets a NaN
  // scale, so that its scores or outputs are NaN, as its values make them.
  alignas(64) float ks[kTile], vs[kTile];
  for (int j = 0; j < kTile; ++j) {
    ks[j] = k_scales[j] * 256.0f;
    vs[j] = v_scales[j] * 256.0f;
  }
  if (Fp8RowPairsHaveNan(k_rows, v_rows, n, dim)) {
    for (int j = 0; j < n; ++j) {
      if (Fp8RowHasNan(k_rows[j], dim)) ks[j] = std::numeric_limits<float>::quiet_NaN();
      if (Fp8RowHasNan(v_rows[j], dim)) vs[j] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  // Every head scores every key (Scores16 reads a key row per head), so
  // the keys are widened once, into fp32 rows in L1. The values are
  // widened in registers as they are summed, once per four heads
  // (AccumulatePass): a pass of more (a prefill chunk's tokens) widens them
  // once into fp32 rows too. Widening is exact, so both give the same bits.
  float* widened = ThreadScratch(ScratchUse::kDecodedRows, int64_t{2} * kTile * dim);
  const float* keys[kTile];
  WidenRows<uint8_t, LoadFp8x16>(k_rows, n, dim, widened, keys);
  int active = 0;
  for (int g = 0; g < pass.count; ++g) active += pass.n[g] > 0 ? 1 : 0;
  if (active > 4) {
    const float* vals[kTile];
    WidenRows<uint8_t, LoadFp8x16>(v_rows, n, dim, widened + int64_t{kTile} * dim, vals);
    return AttendTile<float, LoadF32x16, float, LoadF32x16>(p, pass, keys, ks, vals, vs, next_tile);
  }
  AttendTile<float, LoadF32x16, uint8_t, LoadFp8x16>(p, pass, keys, ks, v_rows, vs, next_tile);
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
