// AVX-512 tile step of PagedAttention over fp8 e4m3 rows with bf16 dot
// products (vdpbf16ps), for CPUs with AVX512-BF16 and VBMI (Zen 4, Sapphire
// Rapids). Every e4m3 value is a bf16 value exactly (4 significant bits,
// exponents 2^-9 .. 2^8), so the rows are decoded exactly, by two byte
// tables (vpermi2b), into the pairs vdpbf16ps multiplies: keys i and
// i + 16 of the tile into the two halves of one vector per 16 values
// (DecodeKeyPairs), two value rows j and j + 1 into (v_j[d], v_j+1[d])
// pairs (DecodeValuePairs). The rows' scales multiply the scores and the
// weights, as on the fp32 step. What this step rounds, and the fp32 step
// (attention_avx512.cc) does not:
//   - q, to bf16 (round to nearest even): 2^-8 of each value at most,
//     against e4m3's own 2^-4 on the keys;
//   - each softmax weight times its V row's scale, to bf16 likewise.
// Both roundings are per (token, head) and per tile, and the operations
// per head are fixed whatever the pass holds, so batch and chunk
// invariance hold as on the other paths:
//   score_j = scale * Sum8(sum_c dpbf(qb_c, kb_j,c)) * ks_j  (c over 16-value
//             chunks in order, one chain; Sum8 a fixed lane tree)
//   out     = out * corr + sum over pairs (j, j + 1) in order of
//             dpbf(bf16(w_j vs_j, w_j+1 vs_j+1), vb_pair)
// A head's last pair, when its key count is odd, pairs its last row with
// +0 (whatever row follows it in the tile), so a head's bits do not depend
// on the keys of the heads beside it.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/target_pragmas.h"

namespace kvserve::kernels::internal {
namespace {

// bf16 bits of e4m3's magnitude codes 0..127, as two byte tables (low and
// high byte). Code 0x7f (e4m3fn's NaN) maps to a quiet NaN, so a row
// holding one makes its scores or outputs NaN with no check of its own.
struct Fp8Bf16Tables {
  alignas(64) uint8_t low[128];
  alignas(64) uint8_t high[128];
};

constexpr Fp8Bf16Tables MakeFp8Bf16Tables() {
  Fp8Bf16Tables t{};
  t.low[127] = 0xC0;  // 0x7fc0
  t.high[127] = 0x7F;
  for (int m = 0; m < 127; ++m) {
    const int e = m >> 3, f = m & 7;
    // Subnormal: f * 2^-9; normal: (8 + f) * 2^(e - 10).
    double v = e == 0 ? f : 8 + f;
    for (int k = 0; k < (e == 0 ? 9 : 10 - e); ++k) v /= 2;
    for (int k = 0; k < e - 10; ++k) v *= 2;
    const uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(v));
    t.low[m] = static_cast<uint8_t>(bits >> 16);
    t.high[m] = static_cast<uint8_t>(bits >> 24);
  }
  return t;
}

constexpr Fp8Bf16Tables kFp8Bf16 = MakeFp8Bf16Tables();

constexpr int kMaxChunks = 256 / 16;  // 16-value chunks of a row

// Byte indices for vpermt2b. pair_bytes interleaves the first 32 bytes of
// two vectors a, b: byte 2i = a[i], 2i + 1 = b[i]. The others interleave a
// vector of low bytes (from 0) with one of high bytes (from 64) into 32
// words, taking the words' sources in order (words_first: 0..31,
// words_second: 32..63) or by 256-bit halves (halves_first: 0..15 and
// 32..47, halves_second: 16..31 and 48..63).
struct PermuteIndices {
  alignas(64) uint8_t pair_bytes[64];
  alignas(64) uint8_t words_first[64];
  alignas(64) uint8_t words_second[64];
  alignas(64) uint8_t halves_first[64];
  alignas(64) uint8_t halves_second[64];
};

constexpr PermuteIndices MakePermuteIndices() {
  PermuteIndices x{};
  const auto words = [](uint8_t* idx, auto source) {
    for (int w = 0; w < 32; ++w) {
      idx[2 * w] = static_cast<uint8_t>(source(w));
      idx[2 * w + 1] = static_cast<uint8_t>(64 + source(w));
    }
  };
  for (int i = 0; i < 32; ++i) {
    x.pair_bytes[2 * i] = static_cast<uint8_t>(i);
    x.pair_bytes[2 * i + 1] = static_cast<uint8_t>(64 + i);
  }
  words(x.words_first, [](int w) { return w; });
  words(x.words_second, [](int w) { return 32 + w; });
  words(x.halves_first, [](int w) { return w < 16 ? w : w + 16; });
  words(x.halves_second, [](int w) { return w < 16 ? w + 16 : w + 32; });
  return x;
}

constexpr PermuteIndices kPermute = MakePermuteIndices();

}  // namespace
}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_BEGIN("avx512f,avx512bw,avx512vbmi,avx512bf16")

#include "kernels/cpu/attention_avx512_inl.h"

namespace kvserve::kernels::internal {
namespace {

// The bf16 values of the 64 e4m3 codes of `codes` as two vectors of 32
// words, whose sources (code positions) the word indices `first` and
// `second` name (PermuteIndices).
inline void Fp8ToBf16(__m512i codes, const uint8_t* first, const uint8_t* second, __m512i* a,
                      __m512i* b) {
  const __m512i low = _mm512_permutex2var_epi8(_mm512_load_si512(kFp8Bf16.low), codes,
                                               _mm512_load_si512(kFp8Bf16.low + 64));
  __m512i high = _mm512_permutex2var_epi8(_mm512_load_si512(kFp8Bf16.high), codes,
                                          _mm512_load_si512(kFp8Bf16.high + 64));
  // high | (codes & 0x80): the sign.
  high = _mm512_ternarylogic_epi32(high, codes, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
  *a = _mm512_permutex2var_epi8(low, _mm512_load_si512(first), high);
  *b = _mm512_permutex2var_epi8(low, _mm512_load_si512(second), high);
}

// The 32 codes of a row from value d (16 when the row ends first), the rest
// of the vector zero.
inline __m256i LoadCodes32(const uint8_t* row, int d, int dim) {
  return dim - d >= 32
             ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + d))
             : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d)));
}

// Keys i and i + 16 of the tile share a 512-bit vector per 16-value chunk
// c: key i's bf16 values 16c..16c+15 in the low half, key i + 16's in the
// high half, at dst + (i * chunks + c) * 32 words. So one vdpbf16ps chain
// per pair of keys scores both, and a head's 32 scores need one reduction
// tree (ScoresOfPairs). Pairs [0, min(n, 16)) are written; a key past n
// reads as zero_row.
void DecodeKeyPairs(const uint8_t* const* rows, int n, int dim, const uint8_t* zero_row,
                    uint16_t* dst) {
  const int chunks = dim / 16;
  for (int i = 0; i < std::min(n, 16); ++i) {
    const uint8_t* a = rows[i];
    const uint8_t* b = i + 16 < n ? rows[i + 16] : zero_row;
    uint16_t* out = dst + static_cast<int64_t>(i) * chunks * 32;
    for (int d = 0; d < dim; d += 32) {
      const __m512i codes = _mm512_inserti64x4(_mm512_castsi256_si512(LoadCodes32(a, d, dim)),
                                               LoadCodes32(b, d, dim), 1);
      __m512i first, second;
      Fp8ToBf16(codes, kPermute.halves_first, kPermute.halves_second, &first, &second);
      _mm512_store_si512(out + 2 * d, first);
      if (dim - d >= 32) _mm512_store_si512(out + 2 * d + 32, second);
    }
  }
}

// Value rows [0, n) decoded into (n + 1) / 2 pair rows of dim dwords:
// pair i's dword d = (v_2i[d], v_2i+1[d]) as bf16; an odd n's last row is
// paired with zero_row.
void DecodeValuePairs(const uint8_t* const* rows, int n, int dim, const uint8_t* zero_row,
                      uint32_t* dst) {
  for (int i = 0; 2 * i < n; ++i) {
    const uint8_t* a = rows[2 * i];
    const uint8_t* b = 2 * i + 1 < n ? rows[2 * i + 1] : zero_row;
    uint32_t* out = dst + static_cast<int64_t>(i) * dim;
    for (int d = 0; d < dim; d += 32) {
      const __m512i codes = _mm512_permutex2var_epi8(
          _mm512_castsi256_si512(LoadCodes32(a, d, dim)), _mm512_load_si512(kPermute.pair_bytes),
          _mm512_castsi256_si512(LoadCodes32(b, d, dim)));
      __m512i first, second;
      Fp8ToBf16(codes, kPermute.words_first, kPermute.words_second, &first, &second);
      _mm512_store_si512(out + d, first);
      if (dim - d >= 32) _mm512_store_si512(out + d + 16, second);
    }
  }
}

// Lane i of *low = the sum of a[i]'s lanes 0..7 (its low half), lane i of
// *high = the sum of its lanes 8..15. Each half's eight lanes meet in the
// same tree, whichever vector and half they sit in.
inline void Sum8EachHalf(const __m512* a, __m512* low, __m512* high) {
  __m512 w[4];  // quarter q of w[i]: a[4i..4i+3]'s sums over their quarter q
  SumQuartersEach(a, w);
  // Quarters 0 + 1 (the low halves) and 2 + 3 (the high halves).
  const __m512 y01 = _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(w[0], w[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 y23 = _mm512_add_ps(_mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(w[2], w[3], _MM_SHUFFLE(3, 1, 3, 1)));
  *low = _mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(2, 0, 2, 0));
  *high = _mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(3, 1, 3, 1));
}

// Scores of the tile's keys [0, nk) for the bf16 query chunks qb (q's
// values 16c..16c+15 in both halves of qb[c]), times the keys' scales
// ks[0, 32) (past nk any finite value): keys 0..15 in s[0], 16..31 in s[1],
// lanes past nk -inf.
inline void ScoresOfPairs(const __m512bh* qb, const uint16_t* kb, int nk, int chunks, float scale,
                          const float* ks, __m512* s) {
  // All 16 pairs, a fixed count, so that the accumulators stay in
  // registers: pairs past the tile's keys read stale (finite or not) words,
  // whose lanes are dropped below; no lane's sum reads another's.
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_setzero_ps();
  for (int c = 0; c < chunks; ++c) {
    for (int i = 0; i < 16; ++i) {
      const auto* k = kb + (static_cast<int64_t>(i) * chunks + c) * 32;
      a[i] = _mm512_dpbf16_ps(a[i], qb[c], (__m512bh)_mm512_load_si512(k));
    }
  }
  Sum8EachHalf(a, &s[0], &s[1]);
  const __m512 vscale = _mm512_set1_ps(scale);
  const __mmask32 valid = static_cast<__mmask32>((uint64_t{1} << nk) - 1);
  for (int h = 0; h < 2; ++h) {
    const __m512 x = _mm512_mul_ps(_mm512_mul_ps(s[h], vscale), _mm512_load_ps(ks + 16 * h));
    s[h] = _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()),
                              static_cast<__mmask16>(valid >> (16 * h)), x);
  }
}

// out[h][d, d + 16 kVecs) = out * corr[h] + sum over pairs i < pairs of
// dpbf(wb[h][i], vb_i), for kHeads heads; with odd_tail, the last pair's
// second rows count as +0. Every (head, column vector) is one chain.
template <int kHeads, int kVecs>
inline void AccumulatePairsBlock(float* const* out, const float* corr, const uint32_t (*wb)[16],
                                 const uint32_t* vb, int pairs, bool odd_tail, int dim, int d) {
  __m512 o[kHeads][kVecs];
  for (int h = 0; h < kHeads; ++h) {
    const __m512 ch = _mm512_set1_ps(corr[h]);
    for (int c = 0; c < kVecs; ++c)
      o[h][c] = _mm512_mul_ps(_mm512_loadu_ps(out[h] + d + 16 * c), ch);
  }
  for (int i = 0; i < pairs; ++i) {
    const uint32_t* row = vb + static_cast<int64_t>(i) * dim + d;
    __m512i v[kVecs];
    for (int c = 0; c < kVecs; ++c) v[c] = _mm512_load_si512(row + 16 * c);
    if (odd_tail && i == pairs - 1) {
      for (int c = 0; c < kVecs; ++c) v[c] = _mm512_maskz_mov_epi16(0x55555555u, v[c]);
    }
    for (int h = 0; h < kHeads; ++h) {
      const __m512bh w = (__m512bh)_mm512_set1_epi32(static_cast<int>(wb[h][i]));
      for (int c = 0; c < kVecs; ++c) o[h][c] = _mm512_dpbf16_ps(o[h][c], w, (__m512bh)v[c]);
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(out[h] + d + 16 * c, o[h][c]);
  }
}

// The accumulation of every head of the pass that attends some of the
// tile: each run of heads with the same key count together.
void AccumulatePairsPass(HeadPass& pass, const float* corr, const uint32_t (*wb)[16],
                         const uint32_t* vb, int dim) {
  ForEachAttendingHeadRun(pass, [&](int g0, int g1, int n) {
    const int pairs = (n + 1) / 2;
    const bool odd = n % 2 != 0;
    ForEachAccumulatorBlock(g0, g1, dim / 16, [&]<int kHeads, int kVecs>(int g, int d) {
      AccumulatePairsBlock<kHeads, kVecs>(pass.out + g, corr + g, wb + g, vb, pairs, odd, dim, d);
    });
  });
}

}  // namespace

void AttendTileFp8Bf16Avx512(const PagedAttentionParams& p, HeadPass& pass,
                             const uint8_t* const* k_rows, const float* k_scales,
                             const uint8_t* const* v_rows, const float* v_scales, int n,
                             LinePrefetcher* next_tile) {
  const int dim = p.head_dim, chunks = dim / 16;
  alignas(64) float ks[kTile], vs[kTile];
  std::copy(k_scales, k_scales + kTile, ks);
  std::copy(v_scales, v_scales + kTile, vs);
  // The tile's rows decoded once into L1 (every head reads every row):
  // keys as bf16 pairs of keys (DecodeKeyPairs), values as bf16 pairs of
  // rows (DecodeValuePairs), 64-byte aligned.
  float* scratch = ThreadScratch(ScratchUse::kDecodedRows, int64_t{kTile} * dim + 16);
  scratch += (64 - reinterpret_cast<uintptr_t>(scratch) % 64) % 64 / sizeof(float);
  auto* kb = reinterpret_cast<uint16_t*>(scratch);
  auto* vb = reinterpret_cast<uint32_t*>(scratch + int64_t{kTile} * dim / 2);
  alignas(64) static constexpr uint8_t kZeroRow[256] = {};
  DecodeKeyPairs(k_rows, n, dim, kZeroRow, kb);
  DecodeValuePairs(v_rows, n, dim, kZeroRow, vb);

  alignas(64) float w[kMaxHeadsPerPass][kTile];
  alignas(64) uint32_t wb[kMaxHeadsPerPass][16];
  float corr[kMaxHeadsPerPass];
  int active[kMaxHeadsPerPass], num_active = 0;
  for (int g = 0; g < pass.count; ++g) {
    if (pass.n[g] > 0) active[num_active++] = g;
  }
  const auto score = [&](int a, __m512* s) {
    const int g = active[a];
    __m512bh qb[kMaxChunks];
    for (int c = 0; c < chunks; ++c) {
      const __m512 q = _mm512_loadu_ps(pass.q[g] + 16 * c);
      qb[c] = _mm512_cvtne2ps_pbh(q, q);
    }
    ScoresOfPairs(qb, kb, pass.n[g], chunks, p.scale, ks, s);
  };
  // Weights times their V rows' scales (past the head's keys 0), rounded
  // to bf16 pairs.
  const auto to_pairs = [&](const int* heads, int count, float* const* rows) {
    for (int i = 0; i < count; ++i) {
      const __mmask32 valid = static_cast<__mmask32>((uint64_t{1} << pass.n[heads[i]]) - 1);
      const __m512 w0 = _mm512_maskz_mul_ps(static_cast<__mmask16>(valid), _mm512_load_ps(rows[i]),
                                            _mm512_load_ps(vs));
      const __m512 w1 = _mm512_maskz_mul_ps(static_cast<__mmask16>(valid >> 16),
                                            _mm512_load_ps(rows[i] + 16), _mm512_load_ps(vs + 16));
      _mm512_store_si512(wb[heads[i]], (__m512i)_mm512_cvtne2ps_pbh(w1, w0));
    }
  };
  SoftmaxOfActiveHeads(
      p, pass, active, num_active, next_tile, corr, score, [&](int, int g) { return w[g]; },
      to_pairs);
  if (next_tile != nullptr) next_tile->IssueRest();
  AccumulatePairsPass(pass, corr, wb, vb, dim);
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
