// AVX-512 tile step of PagedAttention over fp8 e4m3 rows with bf16 dot
// products (vdpbf16ps), for CPUs with AVX512-BF16 and VBMI (Zen 4, Sapphire
// Rapids). Every e4m3 value is a bf16 value exactly (4 significant bits,
// exponents 2^-9 .. 2^8), so the rows are decoded exactly, by two byte
// tables (vpermi2b), into the pairs vdpbf16ps multiplies: a key row into
// its values in order, two value rows j and j + 1 into (v_j[d], v_j+1[d])
// pairs. What this step rounds, and the fp32 step (attention_avx512.cc)
// does not:
//   - q, to bf16 (round to nearest even): 2^-8 of each value at most,
//     against e4m3's own 2^-4 on the keys;
//   - each softmax weight times its V row's scale, to bf16 likewise.
// Both roundings are per (token, head) and per tile, and the operations
// per head are fixed whatever the pass holds, so batch and chunk
// invariance hold as on the other paths:
//   score_j = scale * Sum16(sum_c dpbf(qb_c, kb_j,c)) * ks_j
//   out     = out * corr + sum over pairs (j, j + 1) of dpbf(wb_pair, vb_pair)
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

constexpr int kMaxHeadDimChunks = 256 / 32;  // bf16 vectors of q per head

}  // namespace
}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_BEGIN("avx512f,avx512bw,avx512vbmi,avx512bf16")

#include "kernels/cpu/attention_avx512_inl.h"

namespace kvserve::kernels::internal {
namespace {

// Byte indices for vpermt2b that interleave two 64-byte vectors a, b:
// byte 2i = a[i], 2i + 1 = b[i], i over the first (kInterleaveFirst) or the
// second (kInterleaveSecond) 32 bytes.
struct InterleaveIndices {
  alignas(64) uint8_t first[64];
  alignas(64) uint8_t second[64];
};
constexpr InterleaveIndices MakeInterleaveIndices() {
  InterleaveIndices x{};
  for (int i = 0; i < 32; ++i) {
    x.first[2 * i] = static_cast<uint8_t>(i);
    x.first[2 * i + 1] = static_cast<uint8_t>(64 + i);
    x.second[2 * i] = static_cast<uint8_t>(32 + i);
    x.second[2 * i + 1] = static_cast<uint8_t>(96 + i);
  }
  return x;
}
constexpr InterleaveIndices kInterleave = MakeInterleaveIndices();

// The bf16 values of 64 e4m3 codes, in order: codes 0..31 in *first, 32..63
// in *second (one word each).
inline void Fp8ToBf16x64(__m512i codes, __m512i* first, __m512i* second) {
  const __m512i low = _mm512_permutex2var_epi8(_mm512_load_si512(kFp8Bf16.low), codes,
                                               _mm512_load_si512(kFp8Bf16.low + 64));
  __m512i high = _mm512_permutex2var_epi8(_mm512_load_si512(kFp8Bf16.high), codes,
                                          _mm512_load_si512(kFp8Bf16.high + 64));
  // high | (codes & 0x80): the sign.
  high = _mm512_ternarylogic_epi32(high, codes, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
  *first = _mm512_permutex2var_epi8(low, _mm512_load_si512(kInterleave.first), high);
  *second = _mm512_permutex2var_epi8(low, _mm512_load_si512(kInterleave.second), high);
}

inline __m512i Interleave(__m512i a, __m512i b, const uint8_t* indices) {
  return _mm512_permutex2var_epi8(a, _mm512_load_si512(indices), b);
}

// The 32 or 64 codes of a row from element d: a half chunk (dim % 64 == 32)
// is read as 32 bytes, the rest of the vector zero.
inline __m512i LoadCodes(const uint8_t* row, int d, int dim) {
  return dim - d >= 64 ? _mm512_loadu_si512(row + d)
                       : _mm512_maskz_loadu_epi8(0xFFFFFFFFull, row + d);
}

// Key rows [0, n) decoded to bf16 into dst (dim words each, in order).
void DecodeKeyRows(const uint8_t* const* rows, int n, int dim, uint16_t* dst) {
  for (int j = 0; j < n; ++j) {
    uint16_t* out = dst + static_cast<int64_t>(j) * dim;
    for (int d = 0; d < dim; d += 64) {
      __m512i first, second;
      Fp8ToBf16x64(LoadCodes(rows[j], d, dim), &first, &second);
      _mm512_storeu_si512(out + d, first);
      if (dim - d >= 64) _mm512_storeu_si512(out + d + 32, second);
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
    for (int d = 0; d < dim; d += 64) {
      const __m512i ca = LoadCodes(a, d, dim), cb = LoadCodes(b, d, dim);
      __m512i first, second;
      Fp8ToBf16x64(Interleave(ca, cb, kInterleave.first), &first, &second);
      _mm512_storeu_si512(out + d, first);
      _mm512_storeu_si512(out + d + 16, second);
      if (dim - d >= 64) {
        Fp8ToBf16x64(Interleave(ca, cb, kInterleave.second), &first, &second);
        _mm512_storeu_si512(out + d + 32, first);
        _mm512_storeu_si512(out + d + 48, second);
      }
    }
  }
}

// Scores of keys[0, nk) (nk <= 16; bf16 rows of dim words) for the bf16
// query qb (dim / 32 vectors), times the keys' scales ks[0, 16) (past nk
// any finite value); lanes past nk = -inf.
inline __m512 ScoresBf16x16(const __m512bh* qb, const uint16_t* const* keys, int nk, int chunks,
                            float scale, const float* ks) {
  const uint16_t* k[16];
  for (int i = 0; i < 16; ++i) k[i] = keys[i < nk ? i : 0];
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_setzero_ps();
  for (int c = 0; c < chunks; ++c) {
    for (int i = 0; i < 16; ++i) {
      a[i] = _mm512_dpbf16_ps(a[i], qb[c], (__m512bh)_mm512_loadu_si512(k[i] + 32 * c));
    }
  }
  __m512 s = _mm512_mul_ps(Sum16Each(a), _mm512_set1_ps(scale));
  s = _mm512_mul_ps(s, _mm512_loadu_ps(ks));
  const __mmask16 valid = static_cast<__mmask16>((1u << nk) - 1);
  return _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), valid, s);
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
    for (int c = 0; c < kVecs; ++c) v[c] = _mm512_loadu_si512(row + 16 * c);
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

template <int kHeads>
void AccumulatePairsHeads(float* const* out, const float* corr, const uint32_t (*wb)[16],
                          const uint32_t* vb, int pairs, bool odd_tail, int dim) {
  const int vecs = dim / 16;
  int c = 0;
  for (; c + 4 <= vecs; c += 4)
    AccumulatePairsBlock<kHeads, 4>(out, corr, wb, vb, pairs, odd_tail, dim, 16 * c);
  if (vecs - c == 2)
    AccumulatePairsBlock<kHeads, 2>(out, corr, wb, vb, pairs, odd_tail, dim, 16 * c);
}

// The accumulation of every head of the pass that attends some of the
// tile: each run of heads with the same key count, four heads at a time.
void AccumulatePairsPass(HeadPass& pass, const float* corr, const uint32_t (*wb)[16],
                         const uint32_t* vb, int dim) {
  for (int g = 0; g < pass.count;) {
    const int e = HeadRunEnd(pass, g), ng = pass.n[g];
    if (ng > 0) {
      const int pairs = (ng + 1) / 2;
      const bool odd = ng % 2 != 0;
      for (int h = g; h < e; h += 4) {
        float* const* out = pass.out + h;
        switch (std::min(4, e - h)) {
          case 4:
            AccumulatePairsHeads<4>(out, corr + h, wb + h, vb, pairs, odd, dim);
            break;
          case 3:
            AccumulatePairsHeads<3>(out, corr + h, wb + h, vb, pairs, odd, dim);
            break;
          case 2:
            AccumulatePairsHeads<2>(out, corr + h, wb + h, vb, pairs, odd, dim);
            break;
          default:
            AccumulatePairsHeads<1>(out, corr + h, wb + h, vb, pairs, odd, dim);
            break;
        }
      }
    }
    g = e;
  }
}

}  // namespace

void AttendTileFp8Bf16Avx512(const PagedAttentionParams& p, HeadPass& pass,
                             const uint8_t* const* k_rows, const float* k_scales,
                             const uint8_t* const* v_rows, const float* v_scales, int n,
                             LinePrefetcher* next_tile) {
  const int dim = p.head_dim, chunks = dim / 32;
  alignas(64) float ks[kTile], vs[kTile];
  std::copy(k_scales, k_scales + kTile, ks);
  std::copy(v_scales, v_scales + kTile, vs);
  // The tile's rows decoded once into L1 (every head reads every row):
  // keys as bf16 rows, values as bf16 pairs of rows.
  float* scratch = ThreadScratch(ScratchUse::kDecodedRows, int64_t{2} * kTile * dim);
  auto* kb = reinterpret_cast<uint16_t*>(scratch);
  auto* vb = reinterpret_cast<uint32_t*>(scratch + int64_t{kTile} * dim / 2);
  alignas(64) static constexpr uint8_t kZeroRow[256] = {};
  DecodeKeyRows(k_rows, n, dim, kb);
  DecodeValuePairs(v_rows, n, dim, kZeroRow, vb);
  const uint16_t* keys[kTile];
  for (int j = 0; j < n; ++j) keys[j] = kb + static_cast<int64_t>(j) * dim;

  alignas(64) float w[kMaxHeadsPerPass][kTile];
  alignas(64) uint32_t wb[kMaxHeadsPerPass][16];
  float corr[kMaxHeadsPerPass];
  int active[kMaxHeadsPerPass], num_active = 0;
  for (int g = 0; g < pass.count; ++g) {
    if (pass.n[g] > 0) active[num_active++] = g;
  }
  const auto score = [&](int a, __m512* s) {
    const int g = active[a], ng = pass.n[g];
    __m512bh qb[kMaxHeadDimChunks];
    for (int c = 0; c < chunks; ++c) {
      const float* q = pass.q[g] + 32 * c;
      qb[c] = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(q + 16), _mm512_loadu_ps(q));
    }
    s[0] = ScoresBf16x16(qb, keys, std::min(ng, 16), chunks, p.scale, ks);
    s[1] = ng > 16 ? ScoresBf16x16(qb, keys + 16, ng - 16, chunks, p.scale, ks + 16)
                   : _mm512_set1_ps(-std::numeric_limits<float>::infinity());
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
