// AVX-512 VNNI tile step of PagedAttention over integer KV codes (int8,
// int4, fp4 e2m1; attention.h says when it runs). Per head:
//   score_j = (sum_d u_j[d] * q8[d] - offset) * q_scale * k_scale_j
//             u = code + bias, unsigned (vpdpbusd multiplies u8 by s8);
//             the sum is an exact integer, so its order does not matter
//             (int8 rows: 256 times that plus the low digit's, q_scale / 256)
//   weights = exp(score - m_new) (attention_avx512_inl.h's softmax step)
//   out     = out * corr + step * sum_j weight_j * code_j
//             weight_j = w_j * v_scale_j rounded to a multiple of step =
//             the tile's largest / kWeightSteps, the sum exact in int32:
//             int8 rows int16 weights (32767 steps; vpdpwssd, two keys per
//             instruction), 4-bit rows uint8 weights (255 steps; vpdpbusd,
//             four keys per instruction)
// A tile's key rows are turned into unsigned codes once and transposed, so
// a score vector holds 16 keys and needs no horizontal sums; every head of
// the pass reads that buffer (int4 and fp4 rows transpose their packed
// bytes and split the nibbles after, half the data to move). The value
// sums leave out in an order of their own, which RestoreCodeValueOrder
// undoes after the last tile.
//
// Why 4-bit rows take 8-bit weights: their value sums were half the tile
// step's instructions (per two keys, 14 to split and pair the nibbles and 4
// vpdpwssd per head). Four keys per lane halve both. The weights' rounding
// error (at most 1/510 of the tile's largest) is far below the codes' own
// (1/14 of a row's largest for int4, and fp4's steps are coarser still).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx512f,avx512bw,avx512vnni")

#include "kernels/cpu/attention_avx512_inl.h"

namespace kvserve::kernels::internal {
namespace {

constexpr int kMaxDim = 256;

// Transposes 16 rows of 16 int32 in place: r[i] lane k <- r[k] lane i.
inline void Transpose16x16(__m512i* r) {
  __m512i t[16], x[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // x[4a + e], 128-bit quarter Q: element 4Q + e of rows 4a..4a+3.
  for (int a = 0; a < 4; ++a) {
    x[4 * a + 0] = _mm512_unpacklo_epi64(t[4 * a], t[4 * a + 2]);
    x[4 * a + 1] = _mm512_unpackhi_epi64(t[4 * a], t[4 * a + 2]);
    x[4 * a + 2] = _mm512_unpacklo_epi64(t[4 * a + 1], t[4 * a + 3]);
    x[4 * a + 3] = _mm512_unpackhi_epi64(t[4 * a + 1], t[4 * a + 3]);
  }
  for (int e = 0; e < 4; ++e) {
    const __m512i even01 = _mm512_shuffle_i32x4(x[e], x[4 + e], 0x88);  // quarters 0, 2
    const __m512i odd01 = _mm512_shuffle_i32x4(x[e], x[4 + e], 0xdd);   // quarters 1, 3
    const __m512i even23 = _mm512_shuffle_i32x4(x[8 + e], x[12 + e], 0x88);
    const __m512i odd23 = _mm512_shuffle_i32x4(x[8 + e], x[12 + e], 0xdd);
    r[e] = _mm512_shuffle_i32x4(even01, even23, 0x88);
    r[8 + e] = _mm512_shuffle_i32x4(even01, even23, 0xdd);
    r[4 + e] = _mm512_shuffle_i32x4(odd01, odd23, 0x88);
    r[12 + e] = _mm512_shuffle_i32x4(odd01, odd23, 0xdd);
  }
}

// Rows a and b's 64 signed int8 codes of a piece as int16 pairs (a[i],
// b[i]) per 32-bit lane: what vpdpwssd multiplies by a pair of weights.
// They interleave 8 bytes at a time within each 128-bit quarter, and
// widening the low and high 256 bits takes quarters 0-1 and 2-3, so
// vector v, lane l holds byte 16 (2 (v & 1) + l / 8) + 8 (v >> 1) + l % 8.
inline void PairByteValues64(__m512i a, __m512i b, __m512i* pairs) {
  const __m512i lo = _mm512_unpacklo_epi8(a, b), hi = _mm512_unpackhi_epi8(a, b);
  pairs[0] = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(lo));
  pairs[1] = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(lo, 1));
  pairs[2] = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(hi));
  pairs[3] = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(hi, 1));
}

// Rows r[0..3]'s 32 packed bytes of a piece (64 nibbles each) as four
// vectors of their nibbles, one per byte (each < 16), the four rows' nibbles
// of one value in each 32-bit lane (what vpdpbusd multiplies by four keys'
// weights). The rows are paired bytewise (0 with 1, 2 with 3), the pairs'
// halves brought side by side, paired again, then split. Vector v, lane l
// holds byte kQuarterByte[l / 4] + 4 (v >> 1) + l % 4, its low nibble for
// even v, else its high.
constexpr int kQuarterByte[4] = {0, 16, 8, 24};
inline void QuadNibbles64(const uint8_t* const* r, int piece, __m512i* quads) {
  const auto bytes = [&](int i) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r[i] + 32 * piece));
  };
  const __m512i rows02 = _mm512_inserti64x4(_mm512_castsi256_si512(bytes(0)), bytes(2), 1);
  const __m512i rows13 = _mm512_inserti64x4(_mm512_castsi256_si512(bytes(1)), bytes(3), 1);
  // Quarters 0-1: rows 0 and 1's byte pairs, 2-3: rows 2 and 3's.
  const __m512i lo = _mm512_unpacklo_epi8(rows02, rows13);
  const __m512i hi = _mm512_unpackhi_epi8(rows02, rows13);
  const __m512i pairs01 = _mm512_shuffle_i64x2(lo, hi, 0x44);  // lo.q0 lo.q1 hi.q0 hi.q1
  const __m512i pairs23 = _mm512_shuffle_i64x2(lo, hi, 0xee);  // lo.q2 lo.q3 hi.q2 hi.q3
  const __m512i a = _mm512_unpacklo_epi16(pairs01, pairs23);
  const __m512i b = _mm512_unpackhi_epi16(pairs01, pairs23);
  const __m512i low_nibble = _mm512_set1_epi8(15);
  quads[0] = _mm512_and_si512(a, low_nibble);
  quads[1] = _mm512_and_si512(_mm512_srli_epi16(a, 4), low_nibble);
  quads[2] = _mm512_and_si512(b, low_nibble);
  quads[3] = _mm512_and_si512(_mm512_srli_epi16(b, 4), low_nibble);
}

// What each format contributes, per 64-value piece of a row:
// - the unsigned codes u = code + bias that the scores read, in the
//   format's byte order (int8: value d at byte d; int4 and fp4: the even
//   values in bytes 0..31, the odd ones in 32..63); PrepareCodeQuery takes
//   the bias off again. int8 makes them from a row, int4 and fp4 from
//   nibbles already split, one per byte.
// - kWeightSteps: what the value weights are rounded to (TileWeights).
// - the codes the value sums read, a value being code * kValueUnit. int8:
//   ValuePairs, two rows' codes as int16 pairs. int4 and fp4:
//   SignedOfNibbles, the signed codes of QuadNibbles64's nibbles.
//   ValueOfSlot(i) says which value slot i of a piece's sums holds (vector
//   i / 16, lane i % 16).
struct Int8Codes {
  static constexpr bool kNibbles = false;
  static constexpr int kWeightSteps = 32767;
  static constexpr float kValueUnit = 1.0f;
  static __m512i Unsigned64(const uint8_t* row, int piece) {
    return _mm512_xor_si512(_mm512_loadu_si512(row + 64 * piece), _mm512_set1_epi8(-128));
  }
  static void ValuePairs(const uint8_t* a, const uint8_t* b, int piece, __m512i* pairs) {
    PairByteValues64(_mm512_loadu_si512(a + 64 * piece), _mm512_loadu_si512(b + 64 * piece), pairs);
  }
  static constexpr int ValueOfSlot(int slot) {
    const int vec = slot / 16, lane = slot % 16;
    return 16 * (2 * (vec & 1) + lane / 8) + 8 * (vec >> 1) + lane % 8;
  }
};

// int4 and fp4: the value of slot i after QuadNibbles64.
constexpr int NibbleValueOfSlot(int slot) {
  const int vec = slot / 16, lane = slot % 16;
  const int byte = kQuarterByte[lane / 4] + 4 * (vec >> 1) + lane % 4;
  return 2 * byte + (vec & 1);
}

// int4: nibble n holds code (n ^ 8) - 8, so u = n ^ 8 = code + 8.
struct Int4Codes {
  static constexpr bool kNibbles = true;
  static constexpr int kWeightSteps = 255;
  static constexpr float kValueUnit = 1.0f;
  // Nibbles one per byte (each byte < 16) -> their unsigned codes.
  static __m512i UnsignedOfNibbles(__m512i nibbles) {
    return _mm512_xor_si512(nibbles, _mm512_set1_epi8(8));
  }
  static __m512i SignedOfNibbles(__m512i nibbles) {
    const __m512i code = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1));
    return _mm512_shuffle_epi8(code, nibbles);
  }
  static constexpr int ValueOfSlot(int slot) { return NibbleValueOfSlot(slot); }
};

// fp4 e2m1: twice a code's value is an integer in [-12, 12]; u = 2 v + 12
// (the query's scale carries the 1/2, and kValueUnit the values').
struct Fp4Codes {
  static constexpr bool kNibbles = true;
  static constexpr int kWeightSteps = 255;
  static constexpr float kValueUnit = 0.5f;
  static __m512i UnsignedOfNibbles(__m512i nibbles) {
    const __m512i twice_plus_12 = _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    return _mm512_shuffle_epi8(twice_plus_12, nibbles);
  }
  static __m512i SignedOfNibbles(__m512i nibbles) {
    const __m512i twice = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
    return _mm512_shuffle_epi8(twice, nibbles);
  }
  static constexpr int ValueOfSlot(int slot) { return NibbleValueOfSlot(slot); }
};

// A tile's keys as unsigned codes, transposed for the scores: word w of
// key j (its codes 4w .. 4w + 3, in the format's byte order) at
// words[w][j]. Keys past the tile's n: a copy of its last key.
struct KeyWords {
  alignas(64) uint32_t words[kMaxDim / 4][kTile];
};

// The row pointers of keys 16 half .. 16 half + 15 of a tile of n: in
// place when the tile has them all, else in `padded`, the keys past n a
// copy of its last.
inline const uint8_t* const* KeysOfHalf(const uint8_t* const* k_rows, int n, int half,
                                        const uint8_t** padded) {
  if (16 * half + 16 <= n) return k_rows + 16 * half;
  for (int i = 0; i < 16; ++i) padded[i] = k_rows[std::min(16 * half + i, n - 1)];
  return padded;
}

// int8 rows: 16 keys' 64 codes of a piece, made unsigned, then transposed.
template <class Codes>
void TransposeByteKeys(const uint8_t* const* k_rows, int n, int pieces, KeyWords* keys) {
  for (int half = 0; 16 * half < n; ++half) {
    const uint8_t* padded[16];
    const uint8_t* const* rows = KeysOfHalf(k_rows, n, half, padded);
    for (int c = 0; c < pieces; ++c) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) r[i] = Codes::Unsigned64(rows[i], c);
      Transpose16x16(r);
      for (int w = 0; w < 16; ++w) _mm512_store_si512(keys->words[16 * c + w] + 16 * half, r[w]);
    }
  }
}

// Transposes two 8 x 8 matrices of 32-bit words at once, one per 256-bit
// half: r[i] word k of each half <- r[k] word i of that half.
inline void Transpose8x8InHalves(__m512i* r) {
  __m512i t[8], x[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // x[4a + e], 128-bit quarter Q: word 4 (Q % 2) + e of rows 4a..4a+3 of
  // half Q / 2.
  for (int a = 0; a < 2; ++a) {
    x[4 * a + 0] = _mm512_unpacklo_epi64(t[4 * a], t[4 * a + 2]);
    x[4 * a + 1] = _mm512_unpackhi_epi64(t[4 * a], t[4 * a + 2]);
    x[4 * a + 2] = _mm512_unpacklo_epi64(t[4 * a + 1], t[4 * a + 3]);
    x[4 * a + 3] = _mm512_unpackhi_epi64(t[4 * a + 1], t[4 * a + 3]);
  }
  // Word e: quarters 0 and 2 of x[e] (rows 0..3) and x[4 + e] (rows 4..7);
  // word 4 + e: their quarters 1 and 3.
  const __m512i even_quarters = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i odd_quarters = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int e = 0; e < 4; ++e) {
    r[e] = _mm512_permutex2var_epi64(x[e], even_quarters, x[4 + e]);
    r[4 + e] = _mm512_permutex2var_epi64(x[e], odd_quarters, x[4 + e]);
  }
}

// int4 and fp4 rows: the packed bytes are transposed first (8 words per
// 64 values, half the data of the codes) and the nibbles split after.
// Packed word w of a row holds values 8w .. 8w + 7, the even ones in its
// low nibbles: the codes' words w and 8 + w in their byte order.
template <class Codes>
void TransposeNibbleKeys(const uint8_t* const* k_rows, int n, int pieces, KeyWords* keys) {
  const __m512i low_nibbles = _mm512_set1_epi8(15);
  for (int half = 0; 16 * half < n; ++half) {
    const uint8_t* padded[16];
    const uint8_t* const* rows = KeysOfHalf(k_rows, n, half, padded);
    for (int c = 0; c < pieces; ++c) {
      __m512i r[8];  // rows i and 8 + i, one per half
      for (int i = 0; i < 8; ++i) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[i] + 32 * c));
        const __m256i b =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[8 + i] + 32 * c));
        r[i] = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
      }
      Transpose8x8InHalves(r);
      for (int w = 0; w < 8; ++w) {
        const __m512i even = _mm512_and_si512(r[w], low_nibbles);
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(r[w], 4), low_nibbles);
        _mm512_store_si512(keys->words[16 * c + w] + 16 * half, Codes::UnsignedOfNibbles(even));
        _mm512_store_si512(keys->words[16 * c + 8 + w] + 16 * half, Codes::UnsignedOfNibbles(odd));
      }
    }
  }
}

template <class Codes>
void TransposeKeys(const uint8_t* const* k_rows, int n, int pieces, KeyWords* keys) {
  if constexpr (Codes::kNibbles) {
    TransposeNibbleKeys<Codes>(k_rows, n, pieces, keys);
  } else {
    TransposeByteKeys<Codes>(k_rows, n, pieces, keys);
  }
}

// The raw key dots of heads heads[0, kHeads) for keys 16 half .. 16 half +
// 15 (lane j), each of the query's kDigits int8 digits (digit 0: q, 1:
// q_low), in the keys' byte order: dots[h][digit] = sum_d u_j[d] *
// digit[d], exact, |sum| <= 256 * 255 * 127 < 2^23 (so its order does not
// matter). One sweep over the key words: each word is loaded once for every
// head and digit, whose kHeads * kDigits chains run side by side.
template <int kHeads, int kDigits>
inline void CodeDotsOfHeads16(const CodeQuery& query, const int* heads, const KeyWords& keys,
                              int half, int pieces, __m512i (*dots)[2]) {
  const int32_t* q_words[kHeads][kDigits];
  __m512i acc[kHeads][kDigits];
  for (int h = 0; h < kHeads; ++h) {
    for (int digit = 0; digit < kDigits; ++digit) {
      q_words[h][digit] =
          reinterpret_cast<const int32_t*>(digit == 0 ? query.q[heads[h]] : query.q_low[heads[h]]);
      acc[h][digit] = _mm512_setzero_si512();
    }
  }
  for (int w = 0; w < 16 * pieces; ++w) {
    const __m512i key_word = _mm512_load_si512(keys.words[w] + 16 * half);
    for (int h = 0; h < kHeads; ++h) {
      for (int digit = 0; digit < kDigits; ++digit) {
        acc[h][digit] =
            _mm512_dpbusd_epi32(acc[h][digit], key_word, _mm512_set1_epi32(q_words[h][digit][w]));
      }
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    for (int digit = 0; digit < kDigits; ++digit) dots[h][digit] = acc[h][digit];
  }
}

// CodeDotsOfHeads16 for every head of heads[0, count), up to four at a time.
template <int kDigits>
inline void CodeDotsOfAllHeads16(const CodeQuery& query, const int* heads, int count,
                                 const KeyWords& keys, int half, int pieces, __m512i (*dots)[2]) {
  for (int a = 0; a < count; a += 4) {
    switch (std::min(4, count - a)) {
      case 4:
        CodeDotsOfHeads16<4, kDigits>(query, heads + a, keys, half, pieces, dots + a);
        break;
      case 3:
        CodeDotsOfHeads16<3, kDigits>(query, heads + a, keys, half, pieces, dots + a);
        break;
      case 2:
        CodeDotsOfHeads16<2, kDigits>(query, heads + a, keys, half, pieces, dots + a);
        break;
      default:
        CodeDotsOfHeads16<1, kDigits>(query, heads + a, keys, half, pieces, dots + a);
        break;
    }
  }
}

// Head g's scores of keys 16 half .. 16 half + nk - 1 (nk <= 16) from its
// raw dots (CodeDotsOfHeads16); lanes past nk = -inf. The bias comes off as
// offset; two digits combine as 256 * high + low in int32 (|sum| < 2^31),
// one rounding to fp32.
inline __m512 CodeScores16(const CodeQuery& query, int g, const __m512i* dots, int nk,
                           __m512 k_scales) {
  __m512i sum = _mm512_sub_epi32(dots[0], _mm512_set1_epi32(query.offset[g]));
  float scale = query.scale[g];
  if (query.digits == 2) {
    const __m512i low = _mm512_sub_epi32(dots[1], _mm512_set1_epi32(query.offset_low[g]));
    sum = _mm512_add_epi32(_mm512_slli_epi32(sum, 8), low);
    scale *= 1.0f / 256.0f;
  }
  const __m512 s =
      _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(scale)), k_scales);
  const __mmask16 valid = static_cast<__mmask16>((1u << nk) - 1);
  return _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), valid, s);
}

// The weights of one head for one tile, rounded for the integer sum:
// w_j * v_scale_j (* kValueUnit) = step * weight[j], weight[j] in
// [0, kWeightSteps], step = the tile's largest / kWeightSteps. `packed`
// holds them as the value sums read them: int16 pairs (int8 rows; word p
// holds weights 2p and 2p + 1) or uint8 quads (4-bit rows; word p holds
// weights 4p .. 4p + 3). A step of NaN (a weight not finite: a NaN score
// or scale) makes the head's output NaN, as an fp32 sum would.
struct TileWeights {
  alignas(64) int32_t packed[kMaxHeadsPerPass][kTile / 2];
  float step[kMaxHeadsPerPass];
};

template <class Codes>
inline void RoundWeights(const float* w, __m512 vs0, __m512 vs1, int g, TileWeights* out) {
  constexpr float kSteps = Codes::kWeightSteps;
  const __m512 x0 = _mm512_mul_ps(_mm512_load_ps(w), vs0);
  const __m512 x1 = _mm512_mul_ps(_mm512_load_ps(w + 16), vs1);
  const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
  const bool finite =
      (_mm512_cmp_ps_mask(x0, big, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(x1, big, _CMP_NLE_UQ)) == 0;
  const float largest = _mm512_reduce_max_ps(_mm512_max_ps(x0, x1));  // >= 0
  __m512i q0 = _mm512_setzero_si512(), q1 = _mm512_setzero_si512();
  if (finite && largest > 0.0f) {
    // x * (kSteps / largest) <= kSteps (1 + 2^-23): rounds to at most kSteps.
    const __m512 to_steps = _mm512_set1_ps(kSteps / largest);
    q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, to_steps));
    q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, to_steps));
  }
  out->step[g] = !finite ? std::numeric_limits<float>::quiet_NaN() : largest * (1.0f / kSteps);
  if constexpr (Codes::kNibbles) {
    auto* bytes = reinterpret_cast<__m128i*>(out->packed[g]);
    _mm_store_si128(bytes, _mm512_cvtusepi32_epi8(q0));
    _mm_store_si128(bytes + 1, _mm512_cvtusepi32_epi8(q1));
  } else {
    auto* words = reinterpret_cast<__m256i*>(out->packed[g]);
    _mm256_store_si256(words, _mm512_cvtsepi32_epi16(q0));
    _mm256_store_si256(words + 1, _mm512_cvtsepi32_epi16(q1));
  }
}

// For kHeads heads (pass indices heads[0, kHeads)), piece `piece` of the
// values: acc = sum_j weight[j] * code_j over the first n keys in int32
// (exact: every partial sum is below 32 * 32767 * 128 < 2^31, so in any
// order), then out = out * corr + acc * step * kValueUnit (the unit is in
// the weights), out in slot order. v_rows holds n rounded up to a whole
// group (int8: pairs, 4-bit: quads) with copies of the last row, whose
// weights are 0.
template <class Codes, int kHeads>
void AccumulateCodes(HeadPass& pass, const int* heads, const float* corr, const TileWeights& tw,
                     const uint8_t* const* v_rows, int n, int piece) {
  __m512i acc[kHeads][4];
  for (int h = 0; h < kHeads; ++h) {
    for (int c = 0; c < 4; ++c) acc[h][c] = _mm512_setzero_si512();
  }
  constexpr int kGroup = Codes::kNibbles ? 4 : 2;  // keys per 32-bit lane
  for (int j = 0; j < n; j += kGroup) {
    __m512i codes[4];
    if constexpr (Codes::kNibbles) {
      QuadNibbles64(v_rows + j, piece, codes);
      for (int c = 0; c < 4; ++c) codes[c] = Codes::SignedOfNibbles(codes[c]);
    } else {
      Codes::ValuePairs(v_rows[j], v_rows[j + 1], piece, codes);
    }
    for (int h = 0; h < kHeads; ++h) {
      const __m512i wj = _mm512_set1_epi32(tw.packed[heads[h]][j / kGroup]);
      for (int c = 0; c < 4; ++c) {
        acc[h][c] = Codes::kNibbles ? _mm512_dpbusd_epi32(acc[h][c], wj, codes[c])
                                    : _mm512_dpwssd_epi32(acc[h][c], codes[c], wj);
      }
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    const int g = heads[h];
    float* out = pass.out[g] + 64 * piece;
    const __m512 ch = _mm512_set1_ps(corr[g]), step = _mm512_set1_ps(tw.step[g]);
    for (int c = 0; c < 4; ++c) {
      const __m512 kept = _mm512_mul_ps(_mm512_loadu_ps(out + 16 * c), ch);
      _mm512_storeu_ps(out + 16 * c, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h][c]), step, kept));
    }
  }
}

template <class Codes>
void AttendCodeTile(const PagedAttentionParams& p, HeadPass& pass, const CodeQuery& query,
                    const uint8_t* const* k_rows, const float* k_scales,
                    const uint8_t* const* v_rows, const float* v_scales, int n,
                    LinePrefetcher* next_tile) {
  const int pieces = p.head_dim / 64;
  KeyWords keys;
  TransposeKeys<Codes>(k_rows, n, pieces, &keys);
  const __m512 ks0 = _mm512_loadu_ps(k_scales), ks1 = _mm512_loadu_ps(k_scales + 16);
  const __m512 unit = _mm512_set1_ps(Codes::kValueUnit);
  const __m512 vs0 = _mm512_mul_ps(_mm512_loadu_ps(v_scales), unit);
  const __m512 vs1 = _mm512_mul_ps(_mm512_loadu_ps(v_scales + 16), unit);
  alignas(64) float w[4][kTile];
  float corr[kMaxHeadsPerPass];
  TileWeights tw;
  int active[kMaxHeadsPerPass], num_active = 0, most_keys = 0;
  for (int g = 0; g < pass.count; ++g) {
    if (pass.n[g] <= 0) continue;
    active[num_active++] = g;
    most_keys = std::max(most_keys, pass.n[g]);
  }
  // dots[half][a][digit]: active head a's raw dots (a head that attends 16
  // keys or fewer does not read half 1's).
  __m512i dots[2][kMaxHeadsPerPass][2];
  for (int half = 0; 16 * half < most_keys; ++half) {
    if (query.digits == 2) {
      CodeDotsOfAllHeads16<2>(query, active, num_active, keys, half, pieces, dots[half]);
    } else {
      CodeDotsOfAllHeads16<1>(query, active, num_active, keys, half, pieces, dots[half]);
    }
  }
  const auto score = [&](int a, __m512* s) {
    const int g = active[a], ng = pass.n[g];
    s[0] = CodeScores16(query, g, dots[0][a], std::min(ng, 16), ks0);
    s[1] = ng > 16 ? CodeScores16(query, g, dots[1][a], ng - 16, ks1)
                   : _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  };
  const auto round_weights = [&](const int* heads, int count, float* const* rows) {
    for (int i = 0; i < count; ++i) {
      RoundWeights<Codes>(rows[i], vs0, vs1, heads[i], &tw);  // weights past ng are 0
    }
  };
  SoftmaxOfActiveHeads(
      p, pass, active, num_active, next_tile, corr, score, [&](int i, int) { return w[i]; },
      round_weights);
  if (next_tile != nullptr) next_tile->IssueRest();
  if (most_keys == 0) return;
  // Value rows in whole groups (AccumulateCodes): the last row repeated.
  const uint8_t* group_rows[kTile + 3];
  std::copy_n(v_rows, most_keys, group_rows);
  std::fill_n(group_rows + most_keys, 3, group_rows[most_keys - 1]);
  // The heads four at a time; a head's weights past its own key count are
  // 0, so sharing a block with heads that attend more keys adds exact zeros.
  for (int c = 0; c < pieces; ++c) {
    for (int a = 0; a < num_active; a += 4) {
      switch (std::min(4, num_active - a)) {
        case 4:
          AccumulateCodes<Codes, 4>(pass, active + a, corr, tw, group_rows, most_keys, c);
          break;
        case 3:
          AccumulateCodes<Codes, 3>(pass, active + a, corr, tw, group_rows, most_keys, c);
          break;
        case 2:
          AccumulateCodes<Codes, 2>(pass, active + a, corr, tw, group_rows, most_keys, c);
          break;
        default:
          AccumulateCodes<Codes, 1>(pass, active + a, corr, tw, group_rows, most_keys, c);
          break;
      }
    }
  }
}

// Every value of a piece has exactly one slot.
template <class Codes>
constexpr bool SlotsCoverPiece() {
  bool seen[64] = {};
  for (int slot = 0; slot < 64; ++slot) {
    const int value = Codes::ValueOfSlot(slot);
    if (value < 0 || value >= 64 || seen[value]) return false;
    seen[value] = true;
  }
  return true;
}
static_assert(SlotsCoverPiece<Int8Codes>() && SlotsCoverPiece<Int4Codes>() &&
              SlotsCoverPiece<Fp4Codes>());

template <class Codes>
void RestoreValueOrder(int dim, float* out) {
  float slots[kMaxDim];
  std::copy(out, out + dim, slots);
  for (int piece = 0; piece < dim / 64; ++piece) {
    for (int slot = 0; slot < 64; ++slot) {
      out[64 * piece + Codes::ValueOfSlot(slot)] = slots[64 * piece + slot];
    }
  }
}

}  // namespace

void AttendCodeTileAvx512Vnni(const PagedAttentionParams& p, HeadPass& pass, const CodeQuery& query,
                              const uint8_t* const* k_rows, const float* k_scales,
                              const uint8_t* const* v_rows, const float* v_scales, int n,
                              LinePrefetcher* next_tile) {
  switch (p.kv_dtype) {
    case KvDtype::kInt8:
      return AttendCodeTile<Int8Codes>(p, pass, query, k_rows, k_scales, v_rows, v_scales, n,
                                       next_tile);
    case KvDtype::kInt4:
      return AttendCodeTile<Int4Codes>(p, pass, query, k_rows, k_scales, v_rows, v_scales, n,
                                       next_tile);
    case KvDtype::kFp4E2m1:
      return AttendCodeTile<Fp4Codes>(p, pass, query, k_rows, k_scales, v_rows, v_scales, n,
                                      next_tile);
    default:
      break;  // UsesIntegerCodeAttention admits no other format
  }
}

void RestoreCodeValueOrder(KvDtype dtype, int head_dim, float* out) {
  if (dtype == KvDtype::kInt8) {
    RestoreValueOrder<Int8Codes>(head_dim, out);
  } else {
    RestoreValueOrder<Int4Codes>(head_dim, out);  // fp4 rows: the same nibble order
  }
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
