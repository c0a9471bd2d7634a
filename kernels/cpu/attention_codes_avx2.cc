// AVX2 tile step of PagedAttention over 4-bit integer KV codes (int4, fp4
// e2m1; attention.h says when it runs): the arithmetic of the AVX-512 VNNI
// step (attention_codes_avx512.cc) on 8-lane vectors, without VNNI. Per
// head:
//   score_j = (sum_d u_j[d] * q8[d] - offset) * q_scale * k_scale_j
//             u = code + bias unsigned; vpmaddubsw multiplies u (<= 24) by
//             q8 (|q8| <= 127) and sums pairs in int16 without saturating,
//             vpmaddwd by ones sums those into int32: an exact integer
//   weights = SoftmaxAvx2 over the tile's scores
//   out     = out * corr + step * sum_j weight_j * code_j
//             weight_j = w_j * v_scale_j rounded to an int16 multiple of
//             step = the tile's largest / 32767, the sum exact in int32
//             (vpmaddwd, two keys per instruction)
// The scores equal the VNNI step's bit for bit (the same integers, the same
// fp32 products); the softmax is the AVX2 one, so outputs differ from that
// step's in the last bits. A head's operations do not depend on the pass's
// other heads, so batch invariance holds.
//
// Why only the 4-bit formats: the fp32 row step (attention_avx2.cc) spends
// four instructions turning 8 nibbles into fp32 (fp4: a permute more), more
// than its three multiply-adds for a group of three heads; here 32 codes
// cost a mask and a shuffle. For int8 rows the fp32 step's two (vpmovsxbd,
// vcvtdq2ps) were already cheap, and without VNNI an integer dot product
// needs as many instructions per value as fp32 FMAs: this step, with int8
// rows (q as one int16 digit, vpmaddwd), measured slower than the fp32 step
// on an AVX2 CPU (kv_cache_bench), so int8 stays there.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx2,fma,f16c")

namespace kvserve::kernels::internal {
namespace {

constexpr int kTile = kAttentionKeyTile;
static_assert(kTile == 32, "weights are rounded and packed as 4 vectors of 8");

// Heads sharing each row's loads: 3 heads x 4 keys of score accumulators
// (12 ymm), or 3 heads x 2 vectors of value sums.
constexpr int kGroupHeads = 3;

// A row's codes per 64-value piece in "byte order": the piece's 32 packed
// bytes' low nibbles (its even values) as bytes 0..31, their high nibbles
// (the odd values) as bytes 32..63, as PrepareCodeQuery lays out q. The
// scores read a piece in halves (bytes 32 h .. 32 h + 31), the values in
// quarters (16 q .. 16 q + 15).
inline void NibblesOfHalves(const uint8_t* row, int piece, __m256i* half0, __m256i* half1) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 32 * piece));
  const __m256i mask = _mm256_set1_epi8(15);
  *half0 = _mm256_and_si256(b, mask);
  *half1 = _mm256_and_si256(_mm256_srli_epi16(b, 4), mask);
}

template <int kQuarter>
inline __m128i NibblesOfQuarter(const uint8_t* row, int piece) {
  const __m128i b =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 32 * piece + 16 * (kQuarter % 2)));
  const __m128i mask = _mm_set1_epi8(15);
  return kQuarter < 2 ? _mm_and_si128(b, mask) : _mm_and_si128(_mm_srli_epi16(b, 4), mask);
}

// int4: nibble n holds code (n ^ 8) - 8, so u = n ^ 8 = code + 8.
struct Int4Codes {
  static constexpr float kValueUnit = 1.0f;
  // Both halves of a piece (bytes 0..31 and 32..63) as unsigned codes.
  static void Unsigned64(const uint8_t* row, int piece, __m256i* half0, __m256i* half1) {
    NibblesOfHalves(row, piece, half0, half1);
    *half0 = _mm256_xor_si256(*half0, _mm256_set1_epi8(8));
    *half1 = _mm256_xor_si256(*half1, _mm256_set1_epi8(8));
  }
  template <int kQuarter>
  static __m128i Signed16(const uint8_t* row, int piece) {
    const __m128i code = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
    return _mm_shuffle_epi8(code, NibblesOfQuarter<kQuarter>(row, piece));
  }
};

// fp4 e2m1: twice a code's value is an integer in [-12, 12]; u = 2 v + 12
// (the query's scale carries the 1/2, and kValueUnit the values').
struct Fp4Codes {
  static constexpr float kValueUnit = 0.5f;
  static void Unsigned64(const uint8_t* row, int piece, __m256i* half0, __m256i* half1) {
    const __m256i unsigned_twice = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    NibblesOfHalves(row, piece, half0, half1);
    *half0 = _mm256_shuffle_epi8(unsigned_twice, *half0);
    *half1 = _mm256_shuffle_epi8(unsigned_twice, *half1);
  }
  template <int kQuarter>
  static __m128i Signed16(const uint8_t* row, int piece) {
    const __m128i twice = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    return _mm_shuffle_epi8(twice, NibblesOfQuarter<kQuarter>(row, piece));
  }
};

// Scores of kHeads heads g[0..kHeads) over the tile's keys into
// s[g[h]][0 .. nk rounded up to 4) (nk: the group's largest key count);
// a key past nk reads key j0's row, and the softmax masks its score. Four
// keys at a time, each piece of a row unpacked once for the heads; the 12
// accumulators, the piece's two unsigned halves and the ones fill the 16
// registers, and q is read from memory by the multiplies.
template <class Codes, int kHeads>
void CodeScoreGroup(const CodeQuery& query, const int* g, int nk, int pieces,
                    const uint8_t* const* k_rows, const float* k_scales, float (*s)[kTile],
                    LinePrefetcher& next_tile, int groups) {
  const int lines_per_step = next_tile.LinesPerStep(4, nk * groups);
  for (int j0 = 0; j0 < nk; j0 += 4) {
    next_tile.Issue(lines_per_step);
    const uint8_t* k[4];
    for (int i = 0; i < 4; ++i) k[i] = k_rows[j0 + i < nk ? j0 + i : j0];
    __m256i acc[4][kHeads];  // acc[key][head]: int32 partial dots, lanes summed below
    for (int i = 0; i < 4; ++i) {
      for (int h = 0; h < kHeads; ++h) acc[i][h] = _mm256_setzero_si256();
    }
    // vpmaddubsw: u (<= 24) times q8 (|q8| <= 127), pairs summed in int16
    // without saturating (<= 6096); the two halves' pair sums added in
    // int16 (<= 12192), then vpmaddwd by ones sums them into int32.
    const __m256i ones = _mm256_set1_epi16(1);
    for (int c = 0; c < pieces; ++c) {
      for (int i = 0; i < 4; ++i) {
        __m256i u0, u1;
        Codes::Unsigned64(k[i], c, &u0, &u1);
        for (int h = 0; h < kHeads; ++h) {
          const __m256i* q = reinterpret_cast<const __m256i*>(query.q[g[h]] + 64 * c);
          const __m256i pair_sums =
              _mm256_add_epi16(_mm256_maddubs_epi16(u0, _mm256_load_si256(q)),
                               _mm256_maddubs_epi16(u1, _mm256_load_si256(q + 1)));
          acc[i][h] = _mm256_add_epi32(acc[i][h], _mm256_madd_epi16(pair_sums, ones));
        }
      }
    }
    const __m128 ks = _mm_loadu_ps(k_scales + j0);
    for (int h = 0; h < kHeads; ++h) {
      // Lane i of the lower (upper) half: key i's lanes 0-3 (4-7).
      const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(acc[0][h], acc[1][h]),
                                          _mm256_hadd_epi32(acc[2][h], acc[3][h]));
      __m128i dots = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
      dots = _mm_sub_epi32(dots, _mm_set1_epi32(query.offset[g[h]]));
      const __m128 sc = _mm_mul_ps(_mm_cvtepi32_ps(dots), _mm_set1_ps(query.scale[g[h]]));
      _mm_storeu_ps(s[g[h]] + j0, _mm_mul_ps(sc, ks));
    }
  }
}

// The weights of the tile per head, rounded for the integer sums: w_j *
// v_scale_j (* kValueUnit) = step * weight[j], weight[j] in [0, 32767] an
// int16, step = the tile's largest / 32767, weights past the head's own key
// count 0; pair p of `pairs` holds weights 2p and 2p + 1. A step of NaN (a
// weight not finite: a NaN score or scale) makes the head's output NaN, as
// an fp32 sum would.
struct TileWeights {
  alignas(32) int32_t pairs[kMaxHeadsPerPass][kTile / 2];
  float step[kMaxHeadsPerPass];
};

inline void RoundWeights(const float* w, int n, const float* vs, int g, TileWeights* out) {
  __m256 x[4];
  __m256 largest = _mm256_setzero_ps();
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  int not_finite = 0;
  const int vecs = (n + 7) / 8;  // s[g] holds n rounded up to 8 (past n: 0)
  for (int v = 0; v < 4; ++v) {
    if (v >= vecs) {
      x[v] = _mm256_setzero_ps();
      continue;
    }
    const __m256i lane =
        _mm256_add_epi32(_mm256_set1_epi32(8 * v), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const __m256 kept = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
    x[v] =
        _mm256_and_ps(_mm256_mul_ps(_mm256_load_ps(w + 8 * v), _mm256_load_ps(vs + 8 * v)), kept);
    not_finite |= _mm256_movemask_ps(_mm256_cmp_ps(x[v], big, _CMP_NLE_UQ));
    largest = _mm256_max_ps(largest, x[v]);
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(largest), _mm256_extractf128_ps(largest, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float top = _mm_cvtss_f32(m);  // >= 0
  __m256i q[4];
  for (int v = 0; v < 4; ++v) q[v] = _mm256_setzero_si256();
  if (not_finite == 0 && top > 0.0f) {
    // x * (32767 / top) <= 32767 (1 + 2^-23): rounds to at most 32767.
    const __m256 to_steps = _mm256_set1_ps(32767.0f / top);
    for (int v = 0; v < 4; ++v) q[v] = _mm256_cvtps_epi32(_mm256_mul_ps(x[v], to_steps));
  }
  out->step[g] =
      not_finite != 0 ? std::numeric_limits<float>::quiet_NaN() : top * (1.0f / 32767.0f);
  // packs interleaves its operands per 128-bit lane; the permute restores
  // key order (weights 16 v' .. 16 v' + 15 per packed vector).
  for (int v = 0; v < 4; v += 2) {
    const __m256i packed =
        _mm256_permute4x64_epi64(_mm256_packs_epi32(q[v], q[v + 1]), _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->pairs[g] + 4 * v), packed);
  }
}

// For kHeads heads (pass indices heads[0, kHeads)), bytes 16 kQuarter ..
// 16 kQuarter + 15 of piece `piece` of the values: acc = sum_j weight[j] *
// code_j over the first n keys in int32 (exact: |acc| <= 32 * 32767 * 12
// < 2^31), then out = out * corr + acc * step, out in byte order.
// v_rows holds n rounded up to even rows (an odd n's last row twice; its
// partner's weight is 0).
template <class Codes, int kHeads, int kQuarter>
void AccumulateCodeQuarter(HeadPass& pass, const int* heads, const float* corr,
                           const TileWeights& tw, const uint8_t* const* v_rows, int n, int piece) {
  __m256i acc[kHeads][2];
  for (int h = 0; h < kHeads; ++h) acc[h][0] = acc[h][1] = _mm256_setzero_si256();
  for (int j = 0; j < n; j += 2) {
    const __m128i a = Codes::template Signed16<kQuarter>(v_rows[j], piece);
    const __m128i b = Codes::template Signed16<kQuarter>(v_rows[j + 1], piece);
    // (a[i], b[i]) as int16 pairs: bytes 0-7, then 8-15.
    const __m256i lo = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
    const __m256i hi = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(a, b));
    for (int h = 0; h < kHeads; ++h) {
      const __m256i w = _mm256_set1_epi32(tw.pairs[heads[h]][j / 2]);
      acc[h][0] = _mm256_add_epi32(acc[h][0], _mm256_madd_epi16(lo, w));
      acc[h][1] = _mm256_add_epi32(acc[h][1], _mm256_madd_epi16(hi, w));
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    const int g = heads[h];
    float* out = pass.out[g] + 64 * piece + 16 * kQuarter;
    const __m256 ch = _mm256_set1_ps(corr[g]), step = _mm256_set1_ps(tw.step[g]);
    for (int v = 0; v < 2; ++v) {
      const __m256 kept = _mm256_mul_ps(_mm256_loadu_ps(out + 8 * v), ch);
      _mm256_storeu_ps(out + 8 * v, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[h][v]), step, kept));
    }
  }
}

// AccumulateCodeQuarter for every active head, in groups; a head's weights
// past its own key count are 0, so sharing keys with heads that attend
// more adds exact zeros.
template <class Codes, int kQuarter>
void AccumulateQuarterOfHeads(HeadPass& pass, const int* active, int num_active, const float* corr,
                              const TileWeights& tw, const uint8_t* const* pair_rows, int n,
                              int piece) {
  for (int i = 0; i < num_active;) {
    const int size = NextHeadGroupSize(num_active - i, kGroupHeads);
    const int* heads = active + i;
    switch (size) {
      case 3:
        AccumulateCodeQuarter<Codes, 3, kQuarter>(pass, heads, corr, tw, pair_rows, n, piece);
        break;
      case 2:
        AccumulateCodeQuarter<Codes, 2, kQuarter>(pass, heads, corr, tw, pair_rows, n, piece);
        break;
      default:
        AccumulateCodeQuarter<Codes, 1, kQuarter>(pass, heads, corr, tw, pair_rows, n, piece);
        break;
    }
    i += size;
  }
}

template <class Codes>
void AttendCodeTile(const PagedAttentionParams& p, HeadPass& pass, const CodeQuery& query,
                    const uint8_t* const* k_rows, const float* k_scales,
                    const uint8_t* const* v_rows, const float* v_scales,
                    LinePrefetcher& next_tile) {
  const int pieces = p.head_dim / 64;
  alignas(32) float s[kMaxHeadsPerPass][kTile];  // scores, then weights
  alignas(32) float vs[kTile];
  for (int j = 0; j < kTile; ++j) vs[j] = v_scales[j] * Codes::kValueUnit;
  float corr[kMaxHeadsPerPass];
  TileWeights tw;
  int active[kMaxHeadsPerPass], num_active = 0, most_keys = 0;
  for (int g = 0; g < pass.count; ++g) {
    if (pass.n[g] > 0) active[num_active++] = g;
  }
  const int groups = (num_active + kGroupHeads - 1) / kGroupHeads;
  for (int i = 0; i < num_active;) {
    const int size = NextHeadGroupSize(num_active - i, kGroupHeads);
    const int* g = active + i;
    int nk = 0;
    for (int h = 0; h < size; ++h) nk = std::max(nk, pass.n[g[h]]);
    switch (size) {
      case 3:
        CodeScoreGroup<Codes, 3>(query, g, nk, pieces, k_rows, k_scales, s, next_tile, groups);
        break;
      case 2:
        CodeScoreGroup<Codes, 2>(query, g, nk, pieces, k_rows, k_scales, s, next_tile, groups);
        break;
      default:
        CodeScoreGroup<Codes, 1>(query, g, nk, pieces, k_rows, k_scales, s, next_tile, groups);
        break;
    }
    for (int h = 0; h < size; ++h) {
      const int gh = g[h], ng = pass.n[gh];
      float* sg = s[gh];
      if (p.softcap > 0.0f) {
        for (int j = 0; j < ng; ++j) sg[j] = std::tanh(sg[j] / p.softcap) * p.softcap;
      }
      const float sum = SoftmaxAvx2(sg, ng, &pass.m[gh], &corr[gh]);
      pass.l[gh] = pass.l[gh] * corr[gh] + sum;
      RoundWeights(sg, ng, vs, gh, &tw);
    }
    most_keys = std::max(most_keys, nk);
    i += size;
  }
  next_tile.IssueRest();  // if no head attends any key of this tile
  if (most_keys == 0) return;
  // Value rows in pairs: an odd count's last row twice.
  const uint8_t* pair_rows[kTile + 1];
  std::copy_n(v_rows, most_keys, pair_rows);
  pair_rows[most_keys] = pair_rows[most_keys - 1];
  for (int c = 0; c < pieces; ++c) {
    AccumulateQuarterOfHeads<Codes, 0>(pass, active, num_active, corr, tw, pair_rows, most_keys, c);
    AccumulateQuarterOfHeads<Codes, 1>(pass, active, num_active, corr, tw, pair_rows, most_keys, c);
    AccumulateQuarterOfHeads<Codes, 2>(pass, active, num_active, corr, tw, pair_rows, most_keys, c);
    AccumulateQuarterOfHeads<Codes, 3>(pass, active, num_active, corr, tw, pair_rows, most_keys, c);
  }
}

}  // namespace

void AttendCodeTileAvx2(const PagedAttentionParams& p, HeadPass& pass, const CodeQuery& query,
                        const uint8_t* const* k_rows, const float* k_scales,
                        const uint8_t* const* v_rows, const float* v_scales,
                        LinePrefetcher& next_tile) {
  switch (p.kv_dtype) {
    case KvDtype::kInt4:
      return AttendCodeTile<Int4Codes>(p, pass, query, k_rows, k_scales, v_rows, v_scales,
                                       next_tile);
    case KvDtype::kFp4E2m1:
      return AttendCodeTile<Fp4Codes>(p, pass, query, k_rows, k_scales, v_rows, v_scales,
                                      next_tile);
    default:
      break;  // UsesIntegerCodeAttention admits no other format
  }
}

void RestoreCodeValueOrderAvx2(int head_dim, float* out) {
  float bytes[256];
  std::memcpy(bytes, out, sizeof(float) * head_dim);
  for (int piece = 0; piece < head_dim / 64; ++piece) {
    for (int b = 0; b < 64; ++b) {
      const int d = b < 32 ? 2 * b : 2 * (b - 32) + 1;
      out[64 * piece + d] = bytes[64 * piece + b];
    }
  }
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
