// AVX-512 VNNI tile step of PagedAttention over integer KV codes (int8,
// int4, fp4 e2m1; attention.h says when it runs). Per head:
//   score_j = (sum_d u_j[d] * q8[d] - offset) * q_scale * k_scale_j
//             u = code + bias, unsigned (vpdpbusd multiplies u8 by s8);
//             the sum is an exact integer, so its order does not matter
//             (int8 rows: 256 times that plus the low digit's, q_scale / 256)
//   weights = exp(score - m_new) (attention_avx512_inl.h's softmax step)
//   out     = out * corr + sum_j (w_j * v_scale_j) * code_j   (fp32 FMAs,
//             j in order, codes widened in registers)
// A tile's key rows are turned into unsigned codes once, into a small
// buffer that every head of the pass reads.
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

// Lane i of the result = the sum of a[i]'s 16 int32 lanes (exact).
inline __m512i Sum16EachI32(const __m512i* a) {
  __m512i u[8];
  for (int i = 0; i < 8; ++i) {
    u[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(a[2 * i], a[2 * i + 1]),
                            _mm512_unpackhi_epi32(a[2 * i], a[2 * i + 1]));
  }
  __m512i w[4];
  for (int i = 0; i < 4; ++i) {
    w[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(u[2 * i], u[2 * i + 1]),
                            _mm512_unpackhi_epi64(u[2 * i], u[2 * i + 1]));
  }
  const __m512i y01 = _mm512_add_epi32(_mm512_shuffle_i32x4(w[0], w[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_i32x4(w[0], w[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512i y23 = _mm512_add_epi32(_mm512_shuffle_i32x4(w[2], w[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                       _mm512_shuffle_i32x4(w[2], w[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(y01, y23, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(y01, y23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// The 16 nibbles of 8 bytes as int32, element 2i = low nibble of byte i.
inline __m512i Nibbles16(const uint8_t* src) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
  const __m512i x = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
  const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
  return _mm512_and_si512(_mm512_srlv_epi32(x, shifts), _mm512_set1_epi32(15));
}

// The 64 nibbles of 32 bytes as bytes: the low nibbles (even values) in
// bytes 0..31, the high ones (odd values) in 32..63.
inline __m512i NibblesEvenOdd64(const uint8_t* src) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  const __m256i mask = _mm256_set1_epi8(15);
  const __m256i lo = _mm256_and_si256(b, mask);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), mask);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// What each format contributes: its 64-value pieces of a row as unsigned
// codes u = code + bias (PrepareCodeQuery takes the bias off again), and a
// row's 16 values from element d as fp32, before the row's scale.
struct Int8Codes {
  static __m512i Unsigned64(const uint8_t* row, int piece) {
    return _mm512_xor_si512(_mm512_loadu_si512(row + 64 * piece), _mm512_set1_epi8(-128));
  }
  static __m512 Values16(const uint8_t* row, int d) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  }
};

// int4: nibble n holds code (n ^ 8) - 8, so u = n ^ 8 = code + 8.
struct Int4Codes {
  static __m512i Unsigned64(const uint8_t* row, int piece) {
    return _mm512_xor_si512(NibblesEvenOdd64(row + 32 * piece), _mm512_set1_epi8(8));
  }
  static __m512 Values16(const uint8_t* row, int d) {
    const __m512i eight = _mm512_set1_epi32(8);
    return _mm512_cvtepi32_ps(
        _mm512_sub_epi32(_mm512_xor_si512(Nibbles16(row + d / 2), eight), eight));
  }
};

// fp4 e2m1: twice a code's value is an integer in [-12, 12]; u = 2 v + 12
// (the query's scale carries the 1/2).
struct Fp4Codes {
  static __m512i Unsigned64(const uint8_t* row, int piece) {
    const __m512i twice_plus_12 = _mm512_broadcast_i32x4(
        _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    return _mm512_shuffle_epi8(twice_plus_12, NibblesEvenOdd64(row + 32 * piece));
  }
  static __m512 Values16(const uint8_t* row, int d) {
    const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f,
                                        -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    return _mm512_permutexvar_ps(Nibbles16(row + d / 2), table);
  }
};

// sum_d u_i[d] * q8[d] - offset for the nk (<= 16) keys whose unsigned
// codes are rows u[0, nk) (lanes past nk: a copy of the last key's). Exact;
// |result| <= 256 * 128 * 127 < 2^22.
inline __m512i CodeDots16(const int8_t* q8, const uint8_t (*u)[kMaxDim], int nk, int pieces,
                          int32_t offset) {
  __m512i a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_setzero_si512();
  for (int c = 0; c < pieces; ++c) {
    const __m512i qc = _mm512_load_si512(q8 + 64 * c);
    for (int i = 0; i < 16; ++i) {
      const uint8_t* row = u[std::min(i, nk - 1)];
      a[i] = _mm512_dpbusd_epi32(a[i], _mm512_load_si512(row + 64 * c), qc);
    }
  }
  return _mm512_sub_epi32(Sum16EachI32(a), _mm512_set1_epi32(offset));
}

// Head g's scores of those keys; lanes past nk = -inf. Two digits combine
// as 256 * high + low in int32 (|sum| < 2^30), one rounding to fp32.
inline __m512 CodeScores16(const CodeQuery& query, int g, const uint8_t (*u)[kMaxDim], int nk,
                           int pieces, __m512 k_scales) {
  __m512i dots = CodeDots16(query.q[g], u, nk, pieces, query.offset[g]);
  float scale = query.scale[g];
  if (query.digits == 2) {
    dots = _mm512_add_epi32(_mm512_slli_epi32(dots, 8),
                            CodeDots16(query.q_low[g], u, nk, pieces, query.offset_low[g]));
    scale *= 1.0f / 256.0f;
  }
  const __m512 s =
      _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(dots), _mm512_set1_ps(scale)), k_scales);
  const __mmask16 valid = static_cast<__mmask16>((1u << nk) - 1);
  return _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), valid, s);
}

template <class Codes>
void AttendCodeTile(const PagedAttentionParams& p, HeadPass& pass, const CodeQuery& query,
                    const uint8_t* const* k_rows, const float* k_scales,
                    const uint8_t* const* v_rows, const float* v_scales, int n) {
  const int pieces = p.head_dim / 64;
  alignas(64) uint8_t u[kAttentionKeyTile][kMaxDim];
  for (int j = 0; j < n; ++j) {
    for (int c = 0; c < pieces; ++c) {
      _mm512_store_si512(u[j] + 64 * c, Codes::Unsigned64(k_rows[j], c));
    }
  }
  const __m512 ks0 = _mm512_loadu_ps(k_scales), ks1 = _mm512_loadu_ps(k_scales + 16);
  const __m512 vs0 = _mm512_loadu_ps(v_scales), vs1 = _mm512_loadu_ps(v_scales + 16);
  alignas(64) float w[kMaxHeadsPerPass][kTile];
  float corr[kMaxHeadsPerPass];
  for (int g = 0; g < pass.count; ++g) {
    const int ng = pass.n[g];
    if (ng <= 0) continue;
    const __m512 s0 = CodeScores16(query, g, u, std::min(ng, 16), pieces, ks0);
    const __m512 s1 = ng > 16 ? CodeScores16(query, g, u + 16, ng - 16, pieces, ks1)
                              : _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    SoftmaxStep(p, pass, g, ng, s0, s1, w[g], &corr[g]);
    // Each value row's scale moves onto its weight (the weights of keys
    // past ng are 0, their scales finite).
    _mm512_store_ps(w[g], _mm512_mul_ps(_mm512_load_ps(w[g]), vs0));
    _mm512_store_ps(w[g] + 16, _mm512_mul_ps(_mm512_load_ps(w[g] + 16), vs1));
  }
  AccumulatePass<uint8_t, Codes::Values16>(pass, corr, w, v_rows, p.head_dim / 16);
}

}  // namespace

void AttendCodeTileAvx512Vnni(const PagedAttentionParams& p, HeadPass& pass, const CodeQuery& query,
                              const uint8_t* const* k_rows, const float* k_scales,
                              const uint8_t* const* v_rows, const float* v_scales, int n) {
  switch (p.kv_dtype) {
    case KvDtype::kInt8:
      return AttendCodeTile<Int8Codes>(p, pass, query, k_rows, k_scales, v_rows, v_scales, n);
    case KvDtype::kInt4:
      return AttendCodeTile<Int4Codes>(p, pass, query, k_rows, k_scales, v_rows, v_scales, n);
    case KvDtype::kFp4E2m1:
      return AttendCodeTile<Fp4Codes>(p, pass, query, k_rows, k_scales, v_rows, v_scales, n);
    default:
      break;  // UsesIntegerCodeAttention admits no other format
  }
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
