// AVX2 tile step of PagedAttention: the rows of every KV format read in
// place, each 8 values turned into fp32 in registers as they are used (no
// decoded copy of the tile), and the heads of a pass sharing every key and
// value row they read, in groups of up to three.
//
// Per head the operations are fixed, whatever the pass's other heads or the
// tile's place in the batch:
//   dot_j    = one FMA chain per (head, key) over the row's 8-value chunks
//              in order, its 8 lanes summed by a fixed hadd tree
//   score_j  = (dot_j * k_scale_j) * attention scale
//   weights  = SoftmaxAvx2 over the tile's scores
//   out      = out * corr + sum_j (w_j * v_scale_j) v_j  (j in order, one FMA each)
// A row's values enter the arithmetic before its scale: the scale multiplies
// the dot product (keys) and the weight (values) instead of every value.
// For unscaled formats the scale is 1, so bf16 and fp16 rows give exactly
// what an fp32 cache holding their values gives.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx2,fma,f16c")

namespace kvserve::kernels::internal {
namespace {

constexpr int kTile = kAttentionKeyTile;
static_assert(kTile % 8 == 0, "scores are stored 4 keys at a time; softmax reads 8");

// Heads that share each row's loads and conversions: 3 heads x 4 keys of
// score accumulators (12 ymm), or 3 heads x 3 chunks of output.
constexpr int kGroupHeads = 3;

// The row formats: Load8(row, d) = the row's values d .. d + 7 in fp32,
// before the row's scale, exactly; kScaleFactor: what the row's scale is
// multiplied by to make up for it (a power of two: exact).
struct F32Rows {
  static constexpr bool kConvertForManyHeads = false;
  static constexpr float kScaleFactor = 1.0f;
  static constexpr int kValueGroupHeads = 1;
  static constexpr int kScoreGroupHeads = 1;
  static __m256 Load8(const uint8_t* row, int d) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d);
  }
};

struct Bf16Rows {
  static constexpr bool kConvertForManyHeads = false;
  static constexpr float kScaleFactor = 1.0f;
  static constexpr int kValueGroupHeads = kGroupHeads;
  static constexpr int kScoreGroupHeads = kGroupHeads;
  static __m256 Load8(const uint8_t* row, int d) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * d));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

struct F16Rows {
  static constexpr bool kConvertForManyHeads = false;
  static constexpr float kScaleFactor = 1.0f;
  static constexpr int kValueGroupHeads = kGroupHeads;
  static constexpr int kScoreGroupHeads = kGroupHeads;
  static __m256 Load8(const uint8_t* row, int d) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * d)));
  }
};

// e4m3fn codes through fp16: (c & 0x7f) << 7 puts the code's exponent and
// mantissa under fp16's, which is the code's value times 2^-8 exactly,
// subnormals included (fp16's exponent bias is 8 more), and the sign goes
// to bit 15. Built as c << 8 (the code in a lane's high byte, by one
// unpack), shifted right arithmetically by 1 (the sign lands in bits 15 and
// 14), bit 14 cleared. NaN codes (0x7f, 0xff) come out finite: a row
// holding one gets a NaN scale instead (RowHasFp8Nan).
struct Fp8Rows {
  static constexpr bool kConvertForManyHeads = true;
  static constexpr float kScaleFactor = 256.0f;
  static constexpr int kValueGroupHeads = kGroupHeads;
  static constexpr int kScoreGroupHeads = kGroupHeads;
  static __m256 Load8(const uint8_t* row, int d) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + d));
    const __m128i high = _mm_unpacklo_epi8(_mm_setzero_si128(), b);
    const __m128i h = _mm_and_si128(_mm_srai_epi16(high, 1), _mm_set1_epi16(~0x4000));
    return _mm256_cvtph_ps(h);
  }
};

struct Int8Rows {
  static constexpr bool kConvertForManyHeads = false;
  static constexpr float kScaleFactor = 1.0f;
  static constexpr int kValueGroupHeads = kGroupHeads;
  static constexpr int kScoreGroupHeads = kGroupHeads;
  static __m256 Load8(const uint8_t* row, int d) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + d));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
};

// The 32-bit word holding values d .. d + 7 (value e in bits [4e, 4e + 4))
// in every lane, lane e shifted left so that value e's nibble is its top 4
// bits: an arithmetic shift right by 28 then sign-extends it, a logical one
// gives the code.
inline __m256i NibblesOnTop8(const uint8_t* row, int d) {
  int32_t word;
  std::memcpy(&word, row + d / 2, 4);
  const __m256i shifts = _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0);
  return _mm256_sllv_epi32(_mm256_set1_epi32(word), shifts);
}

struct Int4Rows {
  static constexpr bool kConvertForManyHeads = true;
  static constexpr int kValueGroupHeads = kGroupHeads;
  static constexpr int kScoreGroupHeads = kGroupHeads;
  static constexpr float kScaleFactor = 1.0f;
  static __m256 Load8(const uint8_t* row, int d) {
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(NibblesOnTop8(row, d), 28));
  }
};

// Magnitude from an 8-entry table by the code's low 3 bits (the permute
// reads no others), then its sign bit, already at bit 31.
struct Fp4Rows {
  static constexpr bool kConvertForManyHeads = true;
  static constexpr int kValueGroupHeads = kGroupHeads;
  static constexpr int kScoreGroupHeads = kGroupHeads;
  static constexpr float kScaleFactor = 1.0f;
  static __m256 Load8(const uint8_t* row, int d) {
    const __m256 magnitudes = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i top = NibblesOnTop8(row, d);
    const __m256 magnitude = _mm256_permutevar8x32_ps(magnitudes, _mm256_srli_epi32(top, 28));
    const __m256i sign = _mm256_and_si256(top, _mm256_set1_epi32(static_cast<int>(0x80000000u)));
    return _mm256_or_ps(magnitude, _mm256_castsi256_ps(sign));
  }
};

// True when one of the row's `dim` e4m3 codes is NaN: (c & 0x7f) + 1
// reaches 0x80 only for c & 0x7f == 0x7f, and never carries into the next
// byte, so 64-bit adds test eight codes each.
inline bool RowHasFp8Nan(const uint8_t* row, int dim) {
  uint64_t any = 0;
  for (int d = 0; d < dim; d += 8) {
    uint64_t w;
    std::memcpy(&w, row + d, 8);
    any |= (w & 0x7f7f7f7f7f7f7f7full) + 0x0101010101010101ull;
  }
  return (any & 0x8080808080808080ull) != 0;
}

// Scores of kHeads pass heads g[0..kHeads) over the tile's keys, into
// s[g[h]][0 .. n) (n = pass.n[g[h]] >= 1; keys up to the group's largest n
// rounded up to 4 are written too, and the softmax masks them). Four keys
// at a time; a key past the group's n reads key j0's row (its score is
// never used, and a key's sum depends on its own accumulator alone).
// kPrefetch: also asks for next_tile's lines, its share of them as one of
// `groups` score groups of the tile, spread over the keys (the loop
// without it is a separate instance: the extra live values slowed bf16
// scores in L2 by 9%). Spread over the first group alone, the asks made
// fp32 (one head per group) slower than none: 6.6 ms against 5.3.
template <class Rows, int kHeads, bool kPrefetch>
void ScoreGroup(const PagedAttentionParams& p, const HeadPass& pass, const int* g,
                const uint8_t* const* k_rows, const float* k_scale, float (*s)[kTile],
                LinePrefetcher& next_tile, int groups) {
  int nk = 0;
  const float* q[kHeads];
  for (int h = 0; h < kHeads; ++h) {
    nk = std::max(nk, pass.n[g[h]]);
    q[h] = pass.q[g[h]];
  }
  const __m128 scale = _mm_set1_ps(p.scale);
  const int lines_per_step = kPrefetch ? next_tile.LinesPerStep(4, nk * groups) : 0;
  for (int j0 = 0; j0 < nk; j0 += 4) {
    const uint8_t* k[4];
    for (int i = 0; i < 4; ++i) k[i] = k_rows[j0 + i < nk ? j0 + i : j0];
    __m256 a[kHeads][4];
    for (int h = 0; h < kHeads; ++h) {
      for (int i = 0; i < 4; ++i) a[h][i] = _mm256_setzero_ps();
    }
    for (int d = 0; d < p.head_dim; d += 8) {
      for (int i = 0; i < 4; ++i) {
        const __m256 kv = Rows::Load8(k[i], d);
        for (int h = 0; h < kHeads; ++h) {
          a[h][i] = _mm256_fmadd_ps(_mm256_loadu_ps(q[h] + d), kv, a[h][i]);
        }
      }
    }
    if constexpr (kPrefetch) next_tile.Issue(lines_per_step);
    const __m128 ks = _mm_loadu_ps(k_scale + j0);
    for (int h = 0; h < kHeads; ++h) {
      // Lane i of the lower (upper) half: key i's lanes 0-3 (4-7).
      const __m256 t =
          _mm256_hadd_ps(_mm256_hadd_ps(a[h][0], a[h][1]), _mm256_hadd_ps(a[h][2], a[h][3]));
      const __m128 dots = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
      _mm_storeu_ps(s[g[h]] + j0, _mm_mul_ps(_mm_mul_ps(dots, ks), scale));
    }
  }
}

// out[h][d, d + 8 kVecs) = out * corr[h] + sum_j wv[h][j] v_j for kHeads
// heads; each value chunk converted once for all of them.
template <class Rows, int kHeads, int kVecs>
inline void AccumulateBlock(float* const* out, const float* corr, const float (*wv)[kTile],
                            const uint8_t* const* v_rows, int n, int d) {
  __m256 o[kHeads][kVecs];
  for (int h = 0; h < kHeads; ++h) {
    const __m256 c = _mm256_set1_ps(corr[h]);
    for (int v = 0; v < kVecs; ++v) o[h][v] = _mm256_mul_ps(_mm256_loadu_ps(out[h] + d + 8 * v), c);
  }
  for (int j = 0; j < n; ++j) {
    __m256 w[kHeads];
    for (int h = 0; h < kHeads; ++h) w[h] = _mm256_broadcast_ss(&wv[h][j]);
    for (int v = 0; v < kVecs; ++v) {
      const __m256 x = Rows::Load8(v_rows[j], d + 8 * v);
      for (int h = 0; h < kHeads; ++h) o[h][v] = _mm256_fmadd_ps(w[h], x, o[h][v]);
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    for (int v = 0; v < kVecs; ++v) _mm256_storeu_ps(out[h] + d + 8 * v, o[h][v]);
  }
}

// The last `rest` (< kVecs) chunks of a row.
template <class Rows, int kHeads, int kVecs>
inline void AccumulateRest(float* const* out, const float* corr, const float (*wv)[kTile],
                           const uint8_t* const* v_rows, int n, int d, int rest) {
  if constexpr (kVecs > 0) {
    if (rest == kVecs) return AccumulateBlock<Rows, kHeads, kVecs>(out, corr, wv, v_rows, n, d);
    AccumulateRest<Rows, kHeads, kVecs - 1>(out, corr, wv, v_rows, n, d, rest);
  }
}

// All of a row's chunks for kHeads heads, as many at a time as registers
// allow (12 accumulators at most).
template <class Rows, int kHeads>
void AccumulateGroup(int head_dim, float* const* out, const float* corr, const float (*wv)[kTile],
                     const uint8_t* const* v_rows, int n) {
  constexpr int kVecs = kHeads == 1 ? 8 : kHeads == 2 ? 4 : 3;
  const int vecs = head_dim / 8;
  int c = 0;
  for (; c + kVecs <= vecs; c += kVecs) {
    AccumulateBlock<Rows, kHeads, kVecs>(out, corr, wv, v_rows, n, 8 * c);
  }
  AccumulateRest<Rows, kHeads, kVecs - 1>(out, corr, wv, v_rows, n, 8 * c, vecs - c);
}

// The tile step proper; ks / vs: the rows' scales as the arithmetic uses
// them (AttendTileFormat).
template <class Rows>
void AttendTileRows(const PagedAttentionParams& p, HeadPass& pass, const uint8_t* const* k_rows,
                    const float* ks, const uint8_t* const* v_rows, const float* vs,
                    LinePrefetcher& next_tile) {
  alignas(32) float s[kMaxHeadsPerPass][kTile];  // scores, then weights
  float corr[kMaxHeadsPerPass];
  int active[kMaxHeadsPerPass];
  int count = 0;
  for (int g = 0; g < pass.count; ++g) {
    if (pass.n[g] > 0) active[count++] = g;
  }
  const int groups = (count + Rows::kScoreGroupHeads - 1) / Rows::kScoreGroupHeads;
  for (int i = 0; i < count;) {
    const int size = NextHeadGroupSize(count - i, Rows::kScoreGroupHeads);
    const bool prefetch = next_tile.Pending();
    const int* g = active + i;
    switch (size) {
      case 3:
        prefetch ? ScoreGroup<Rows, 3, true>(p, pass, g, k_rows, ks, s, next_tile, groups)
                 : ScoreGroup<Rows, 3, false>(p, pass, g, k_rows, ks, s, next_tile, groups);
        break;
      case 2:
        prefetch ? ScoreGroup<Rows, 2, true>(p, pass, g, k_rows, ks, s, next_tile, groups)
                 : ScoreGroup<Rows, 2, false>(p, pass, g, k_rows, ks, s, next_tile, groups);
        break;
      default:
        prefetch ? ScoreGroup<Rows, 1, true>(p, pass, g, k_rows, ks, s, next_tile, groups)
                 : ScoreGroup<Rows, 1, false>(p, pass, g, k_rows, ks, s, next_tile, groups);
        break;
    }
    for (int h = 0; h < size; ++h) {
      float* sg = s[g[h]];
      const int ng = pass.n[g[h]];
      if (p.softcap > 0.0f) {
        for (int j = 0; j < ng; ++j) sg[j] = std::tanh(sg[j] / p.softcap) * p.softcap;
      }
      const float sum = SoftmaxAvx2(sg, ng, &pass.m[g[h]], &corr[g[h]]);
      pass.l[g[h]] = pass.l[g[h]] * corr[g[h]] + sum;
    }
    i += size;
  }
  next_tile.IssueRest();  // if no head attends any key of this tile

  // Values: each run of heads attending the same keys, in groups.
  for (int g0 = 0; g0 < pass.count;) {
    const int g1 = HeadRunEnd(pass, g0);
    const int ng = pass.n[g0];
    for (int g = g0; ng > 0 && g < g1;) {
      const int size = NextHeadGroupSize(g1 - g, Rows::kValueGroupHeads);
      alignas(32) float wv[kGroupHeads][kTile];
      for (int h = 0; h < size; ++h) {
        for (int j = 0; j < ng; ++j) wv[h][j] = s[g + h][j] * vs[j];
      }
      float* const* out = pass.out + g;
      switch (size) {
        case 3:
          AccumulateGroup<Rows, 3>(p.head_dim, out, corr + g, wv, v_rows, ng);
          break;
        case 2:
          AccumulateGroup<Rows, 2>(p.head_dim, out, corr + g, wv, v_rows, ng);
          break;
        default:
          AccumulateGroup<Rows, 1>(p.head_dim, out, corr + g, wv, v_rows, ng);
          break;
      }
      g += size;
    }
    g0 = g1;
  }
}

// Converts rows [0, n) to fp32 values before their scales (Rows::Load8)
// into dst, dim floats per row, and points rows[j] at them.
template <class Rows>
void ConvertRows(const uint8_t* const* src, int n, int dim, float* dst, const uint8_t** rows) {
  for (int j = 0; j < n; ++j) {
    float* row = dst + static_cast<int64_t>(j) * dim;
    for (int d = 0; d < dim; d += 8) _mm256_storeu_ps(row + d, Rows::Load8(src[j], d));
    rows[j] = reinterpret_cast<const uint8_t*>(row);
  }
}

template <class Rows>
void AttendTileFormat(const PagedAttentionParams& p, HeadPass& pass, const uint8_t* const* k_rows,
                      const float* k_scales, const uint8_t* const* v_rows, const float* v_scales,
                      int n, LinePrefetcher& next_tile) {
  // The rows' scales times the format's factor; a fp8 row holding a NaN
  // code gets a NaN scale, so that its scores or outputs are NaN, as its
  // values would make them.
  alignas(32) float ks[kTile], vs[kTile];
  for (int j = 0; j < kTile; ++j) {
    ks[j] = k_scales[j] * Rows::kScaleFactor;
    vs[j] = v_scales[j] * Rows::kScaleFactor;
  }
  if constexpr (std::is_same_v<Rows, Fp8Rows>) {
    constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
    for (int j = 0; j < n; ++j) {
      if (RowHasFp8Nan(k_rows[j], p.head_dim)) ks[j] = kNan;
      if (RowHasFp8Nan(v_rows[j], p.head_dim)) vs[j] = kNan;
    }
  }
  // Formats whose conversion costs several instructions per 8 values
  // (fp8, int4, fp4), in a pass of more heads than one group (a prefill
  // chunk's tokens): the tile's rows are converted once into fp32 and
  // attended as fp32 rows with the same scales. The conversion is exact and
  // the scales enter as before, so each head's arithmetic, and its result,
  // is the same either way.
  if constexpr (Rows::kConvertForManyHeads) {
    int active = 0;
    for (int g = 0; g < pass.count; ++g) active += pass.n[g] > 0 ? 1 : 0;
    if (active > kGroupHeads) {
      float* scratch = ThreadScratch(ScratchUse::kDecodedRows, int64_t{2} * kTile * p.head_dim);
      const uint8_t* kf[kTile];
      const uint8_t* vf[kTile];
      ConvertRows<Rows>(k_rows, n, p.head_dim, scratch, kf);
      ConvertRows<Rows>(v_rows, n, p.head_dim, scratch + int64_t{kTile} * p.head_dim, vf);
      return AttendTileRows<F32Rows>(p, pass, kf, ks, vf, vs, next_tile);
    }
  }
  AttendTileRows<Rows>(p, pass, k_rows, ks, v_rows, vs, next_tile);
}

}  // namespace

float SoftmaxAvx2(float* s, int n, float* m, float* corr) {
  const int vecs = (n + 7) / 8;
  for (int j = n; j < vecs * 8; ++j) s[j] = -std::numeric_limits<float>::infinity();
  __m256 vmax = _mm256_loadu_ps(s);
  for (int64_t v = 1; v < vecs; ++v) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + 8 * v));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float new_m = std::max(*m, _mm_cvtss_f32(h));
  // A running max that the tile leaves as it was (most tiles past the
  // first few) needs no exp: Exp256(0) is exactly 1. (Not for an infinite
  // max: inf - inf is NaN, and Exp256 gives what it gives.)
  *corr = new_m == *m && std::isfinite(new_m)
              ? 1.0f
              : _mm256_cvtss_f32(Exp256(_mm256_set1_ps(*m - new_m)));
  *m = new_m;
  const __m256 vm = _mm256_set1_ps(new_m);
  __m256 sum = _mm256_setzero_ps();
  for (int64_t v = 0; v < vecs; ++v) {
    const __m256 e = Exp256(_mm256_sub_ps(_mm256_loadu_ps(s + 8 * v), vm));
    _mm256_storeu_ps(s + 8 * v, e);
    sum = _mm256_add_ps(sum, e);
  }
  return HorizontalSum256(sum);
}

bool Avx2RowTileSupports(int head_dim) { return head_dim > 0 && head_dim % 8 == 0; }

void AttendRowTileAvx2(const PagedAttentionParams& p, HeadPass& pass, const uint8_t* const* k_rows,
                       const float* k_scales, const uint8_t* const* v_rows, const float* v_scales,
                       int n, LinePrefetcher& next_tile) {
  switch (p.kv_dtype) {
    case KvDtype::kFloat32:
      return AttendTileFormat<F32Rows>(p, pass, k_rows, k_scales, v_rows, v_scales, n, next_tile);
    case KvDtype::kBfloat16:
      return AttendTileFormat<Bf16Rows>(p, pass, k_rows, k_scales, v_rows, v_scales, n, next_tile);
    case KvDtype::kFloat16:
      return AttendTileFormat<F16Rows>(p, pass, k_rows, k_scales, v_rows, v_scales, n, next_tile);
    case KvDtype::kFp8E4m3:
      return AttendTileFormat<Fp8Rows>(p, pass, k_rows, k_scales, v_rows, v_scales, n, next_tile);
    case KvDtype::kInt8:
      return AttendTileFormat<Int8Rows>(p, pass, k_rows, k_scales, v_rows, v_scales, n, next_tile);
    case KvDtype::kInt4:
      return AttendTileFormat<Int4Rows>(p, pass, k_rows, k_scales, v_rows, v_scales, n, next_tile);
    case KvDtype::kFp4E2m1:
      return AttendTileFormat<Fp4Rows>(p, pass, k_rows, k_scales, v_rows, v_scales, n, next_tile);
  }
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
