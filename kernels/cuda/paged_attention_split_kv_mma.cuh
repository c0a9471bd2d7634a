// The split-KV kernel for the scaled KV formats (fp8_e4m3, int8, int4,
// fp4_e2m1) on tensor cores: the same CTA grid, splits, workspace partials
// and merge as SplitKvKernel (paged_attention_split_kv.cuh), with the scores
// and the weighted sum of V as fp16 mma.sync products.
//
// Why: on CUDA cores every lane of a row group repeats the online softmax of
// each head for each key, and a butterfly sums every score; for 1-byte and
// half-byte rows that instruction stream, not memory, set the time (about
// 80 warp instructions per key). Here one m16n8k16 MMA does 16 dims x 8 keys
// for up to 8 heads, the softmax runs once per (head, key) on the score
// fragment, and a row's codes are decoded to fp16 pairs with 1 to 2
// instructions per element.
//
// Exactness. Every code of these formats is an fp16 value (int8 and int4
// integers, e4m3 and e2m1 values; e2m1 scaled by 2^-14, folded back into the
// row scale), so K and V enter the MMAs exactly. q and the softmax weights do
// not fit in fp16; each is split into hi = fp16(x) and lo = fp16(x - hi)
// (22 significant bits together), and the MMA's A operand carries hi in rows
// 0..7 and lo in rows 8..15, one row per query head of the pass. The fp32
// accumulators of rows h and h + 8 sit in the same thread, so hi + lo is one
// add. Before splitting, q is scaled by a power of two per head (its largest
// |element| to [2^14, 2^15)) and the weights times V's row scale by a power
// of two per CTA (the split's largest V scale to [0.5, 1)), so neither
// overflows fp16 nor loses bits to its subnormals; both powers are undone in
// fp32. K's row scale, q's power and scale * log2(e) multiply the fp32 score.
//
// Layout per warp and 16-key block (g = lane / 4, t = lane % 4):
//  * Scores S = Q K^T: A = q (16 x 16 dims per k-step), B = K^T (16 dims x
//    8 keys), two n8 tiles per block. Thread (g, t) loads key g of each tile,
//    the quarter t of its row (head_dim / 4 codes, contiguous). The MMA only
//    needs q and K to agree on which dim each of the thread's four k-step
//    slots holds, so the slots follow the decoder's order within the quarter
//    (DimOfPair) and q's fragments are built in the same order once per CTA.
//  * The C fragments of the two n8 score tiles are the A fragment of one
//    k16 step of P V (keys 2t, 2t + 1, 2t + 8, 2t + 9 of the block).
//  * O = P V: B = V (16 keys x 8 dims). Thread (g, t) loads the keys 2t,
//    2t + 1, 2t + 8, 2t + 9, the eighth g of their rows; the pairs it needs
//    (the same dim of two keys) come from byte permutes of two rows' words.
//    Output column n of d-tile j is dim n * head_dim / 8 + j.
//
// Batch invariance: warp w of the CTA takes the blocks w, w + 4, ... of the
// split's keys; every sum's order depends only on the token's position, the
// window, head_dim and the format, as in SplitKvKernel.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cuda/paged_attention_split_kv.cuh"

namespace kvserve::kernels::cuda::split_kv {

// Head dims and formats the tensor-core kernel is built for; the others use
// SplitKvKernel.
inline bool MmaSplitKvSupports(KvDtype format, int head_dim) {
  return KvHasScale(format) && (head_dim == 64 || head_dim == 128);
}
constexpr int kMmaHeads = 8;              // query heads per pass (rows 0..7; 8..15: their lo parts)
constexpr int kMmaWarps = kThreads / 32;  // 4
constexpr int kMmaBlockKeys = 16;         // keys per warp step
#ifndef KVSERVE_MMA_L2_AHEAD
#define KVSERVE_MMA_L2_AHEAD 3
#endif
// Each warp holds the next block's words in registers and asks L2 for the
// rows of the block this many warp steps ahead (< 2: none; < 0: the whole
// split during the prologue).
constexpr int kMmaL2Ahead = KVSERVE_MMA_L2_AHEAD;

// ---- fp16 pairs from codes. Every decoder returns exact fp16 values. ----

__device__ __forceinline__ uint32_t HalfPairSub(uint32_t x, uint32_t bias_pair) {
  __half2 a, b;
  memcpy(&a, &x, 4);
  memcpy(&b, &bias_pair, 4);
  const __half2 r = __hsub2(a, b);
  uint32_t out;
  memcpy(&out, &r, 4);
  return out;
}

// How a format's 32-bit word of codes becomes kPairs fp16 pairs
// (Decode), which of the word's elements each pair holds (ElementOf), and
// the byte permutes that put the same elements of two rows' words side by
// side (kInterleave: after the permute, Decode's pairs are (row a, row b)).
template <KvDtype F>
struct MmaCodec;

// 8-bit codes: pair p = elements (2p, 2p + 1).
struct MmaCodec8Bit {
  static constexpr int kBits = 8;
  static constexpr int kPairs = 2;
  __device__ static constexpr int ElementOf(int pair, int half) { return 2 * pair + half; }
  // [a0 b0 a1 b1], [a2 b2 a3 b3]
  __device__ static constexpr uint32_t Interleave(int half) {
    return half == 0 ? 0x5140u : 0x7362u;
  }
};
// 4-bit codes (element 2i in the low nibble of byte i): pair p = elements
// (p, p + 4), nibbles p of the two 16-bit halves.
struct MmaCodec4Bit {
  static constexpr int kBits = 4;
  static constexpr int kPairs = 4;
  __device__ static constexpr int ElementOf(int pair, int half) { return pair + 4 * half; }
  // [a.b0 a.b1 b.b0 b.b1], [a.b2 a.b3 b.b2 b.b3]: elements 0..3 (4..7) of
  // row a in the low half, of row b in the high half.
  __device__ static constexpr uint32_t Interleave(int half) {
    return half == 0 ? 0x5410u : 0x7632u;
  }
};

template <>
struct MmaCodec<KvDtype::kInt8> : MmaCodec8Bit {
  static constexpr float kScaleFactor = 1.0f;
  // Byte q + 128 in the low mantissa of 1024 (fp16 0x6400), minus 1152.
  __device__ __forceinline__ static void Decode(uint32_t w, uint32_t (&h)[kPairs]) {
    w ^= 0x80808080u;
    h[0] = HalfPairSub(__byte_perm(w, 0x64646464u, 0x4140u), 0x64806480u);
    h[1] = HalfPairSub(__byte_perm(w, 0x64646464u, 0x4342u), 0x64806480u);
  }
};

template <>
struct MmaCodec<KvDtype::kFp8E4m3> : MmaCodec8Bit {
  static constexpr float kScaleFactor = 1.0f;
  // Hardware e4m3x2 -> f16x2 (every e4m3 value is an fp16 value).
  __device__ __forceinline__ static void Decode(uint32_t w, uint32_t (&h)[kPairs]) {
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const __half2_raw r =
          __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> (16 * p)), __NV_E4M3);
      memcpy(&h[p], &r, 4);
    }
  }
};

template <>
struct MmaCodec<KvDtype::kInt4> : MmaCodec4Bit {
  static constexpr float kScaleFactor = 1.0f;
  // Nibble q + 8 in the low mantissa of 1024, minus 1032.
  __device__ __forceinline__ static void Decode(uint32_t w, uint32_t (&h)[kPairs]) {
    w ^= 0x88888888u;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      h[p] = HalfPairSub(((w >> (4 * p)) & 0x000F000Fu) | 0x64006400u, 0x64086408u);
    }
  }
};

template <>
struct MmaCodec<KvDtype::kFp4E2m1> : MmaCodec4Bit {
  // Nibble s e1 e0 m as the fp16 with sign s, exponent field e1 e0 and top
  // mantissa bit m: 2^(e - 15) (1 + m / 2) for e >= 1, m 2^-15 for e = 0,
  // which is the e2m1 value times 2^-14 in both cases.
  static constexpr float kScaleFactor = 16384.0f;
  __device__ __forceinline__ static void Decode(uint32_t w, uint32_t (&h)[kPairs]) {
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const uint32_t x = w >> (4 * p);
      h[p] = ((x & 0x00070007u) << 9) | ((x & 0x00080008u) << 12);
    }
  }
};

// ---- PTX. ----

// c += a * b, one m16n8k16 tile, fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void MmaF16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as the fp16 pairs hi = fp16(x) and lo = fp16(x - hi) (x - hi
// is exact in fp32).
__device__ __forceinline__ void SplitHalfPair(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x0, x1);
  const float2 back = __half22float2(h);
  const __half2 l = __floats2half2_rn(x0 - back.x, x1 - back.y);
  memcpy(&hi, &h, 4);
  memcpy(&lo, &l, 4);
}

// n 32-bit words from global memory at p (aligned to 4 * n bytes up to 16),
// read-only path.
template <int kWords>
__device__ __forceinline__ void LoadWords(const char* p, uint32_t (&w)[kWords]) {
  if constexpr (kWords % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kWords; i += 4) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i / 4);
      w[i] = v.x;
      w[i + 1] = v.y;
      w[i + 2] = v.z;
      w[i + 3] = v.w;
    }
  } else if constexpr (kWords % 2 == 0) {
#pragma unroll
    for (int i = 0; i < kWords; i += 2) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(p) + i / 2);
      w[i] = v.x;
      w[i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = __ldg(reinterpret_cast<const uint32_t*>(p) + i);
  }
}

// Asks L2 for the 128-byte line at p; nothing waits for it.
__device__ __forceinline__ void PrefetchL2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// e for |x| = m 2^e, m in [0.5, 1): 2^-e brings x to [0.5, 1). `fallback`
// for 0, inf and NaN (nothing to scale, and NaN must stay NaN). Clamped to
// [-100, 127] so that 2^(15 - e) and 2^e stay finite normal floats (an x
// below 2^-101 keeps fewer bits, far below what it adds to any sum).
__device__ __forceinline__ int NormalizingExponent(float x, int fallback) {
  if (!(x > 0.0f) || !isfinite(x)) return fallback;
  int e;
  frexpf(x, &e);
  return min(max(e, -100), 127);
}

template <KvDtype F, int kDim>
__global__ void __launch_bounds__(kThreads, 2) SplitKvMmaKernel(const SplitKvArgs a) {
  using C = MmaCodec<F>;
  constexpr int kRowBytes = kDim * C::kBits / 8;
  constexpr int kKWords = kRowBytes / 4 / 4;  // a quarter row per thread
  constexpr int kVWords = kRowBytes / 8 / 4;  // an eighth row per thread
  constexpr int kKPairs = kKWords * C::kPairs;
  constexpr int kSteps = kDim / 16;  // k-steps of the score MMAs
  constexpr int kDTiles = kDim / 8;  // n8 tiles of the output
  static_assert(kKPairs == 2 * kSteps && kVWords * 32 / C::kBits == kDTiles);
  static_assert(kSplitKeys % (kMmaWarps * kMmaBlockKeys) == 0);

  const SplitSpan span = SplitSpan::Of(a, kMmaHeads);
  if (span.n <= 0) return;  // uniform per CTA
  const int n = span.n, head0 = span.head0, heads = span.heads;

  struct LoopSmem {
    float q[kMmaHeads][kDim];         // raw q (0 for heads past `heads`)
    int64_t row_byte[kSplitKeys];     // key k0 + i's row, in bytes from the cache start
    float k_scale[kSplitKeys];        // times C::kScaleFactor
    float v_scale[kSplitKeys];        // times C::kScaleFactor
    int q_exp[kMmaHeads];             // NormalizingExponent of max |q| per head
    unsigned v_scale_max[kMmaWarps];  // per warp, bits of its largest v_scale (>= 0)
  };
  union Smem {
    LoopSmem loop;
    PartialsSmem<kMmaWarps, kMmaHeads, kDim> merge;
  };
  __shared__ __align__(16) Smem smem;

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4;  // the thread's head (row g of A) and column of B
  const int t = lane % 4;
  const char* kc = static_cast<const char*>(a.k_cache);
  const char* vc = static_cast<const char*>(a.v_cache);
  {
    SplitRows<true> rows;
    rows.Load(a, span);
    const int64_t q0 = span.token * a.q_stride + static_cast<int64_t>(head0) * kDim;
#pragma unroll 4
    for (int i = threadIdx.x; i < kMmaHeads * kDim; i += kThreads) {
      const int h = i / kDim;
      smem.loop.q[h][i - h * kDim] = h < heads ? LoadQ(a.q, a.q_type, q0 + i) : 0.0f;
    }
    float v_max = 0.0f;
#pragma unroll
    for (int u = 0; u < rows.kPer; ++u) {
      const int i = threadIdx.x + u * kThreads;
      if (i >= n) break;
      const int64_t row_byte = rows.row[u] * kRowBytes;
      smem.loop.row_byte[i] = row_byte;
      if constexpr (kMmaL2Ahead < 0) {
        PrefetchL2(kc + row_byte);
        PrefetchL2(vc + row_byte);
      }
      smem.loop.k_scale[i] = rows.k_scale[u] * C::kScaleFactor;
      const float vs = rows.v_scale[u] * C::kScaleFactor;
      smem.loop.v_scale[i] = vs;
      // Scales are >= 0 or NaN; as bits, NaN orders above every number.
      v_max = __uint_as_float(max(__float_as_uint(v_max), __float_as_uint(fabsf(vs))));
    }
    const unsigned warp_max = __reduce_max_sync(0xFFFFFFFFu, __float_as_uint(v_max));
    if (lane == 0) smem.loop.v_scale_max[warp] = warp_max;
  }
  __syncthreads();

  struct Stage {
    uint32_t k[2][kKWords];  // keys g and 8 + g, quarter t
    uint32_t v[4][kVWords];  // keys 2t, 2t + 1, 2t + 8, 2t + 9, eighth g
  };
  // Keys past n are never read (their slots may be another sequence's or
  // NaN): their words are 0, which decodes to 0 in every format.
  auto load = [&](int block, Stage& st) {
    const int key0 = block * kMmaBlockKeys;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int key = key0 + 8 * i + g;
      if (key < n) {
        LoadWords(kc + smem.loop.row_byte[key] + t * (kRowBytes / 4), st.k[i]);
      } else {
#pragma unroll
        for (int w = 0; w < kKWords; ++w) st.k[i][w] = 0;
      }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int key = key0 + 2 * t + (r & 1) + 8 * (r >> 1);
      if (key < n) {
        LoadWords(vc + smem.loop.row_byte[key] + g * (kRowBytes / 8), st.v[r]);
      } else {
#pragma unroll
        for (int w = 0; w < kVWords; ++w) st.v[r][w] = 0;
      }
    }
  };
  // Asks L2 for the K rows (lanes 0-15) and V rows (16-31) of a block.
  auto prefetch = [&](int block) {
    const int key = block * kMmaBlockKeys + lane % 16;
    if (key < n) PrefetchL2((lane < 16 ? kc : vc) + smem.loop.row_byte[key]);
  };

  // The first block's loads go out before q is prepared.
  const int blocks = (n + kMmaBlockKeys - 1) / kMmaBlockKeys;
  Stage cur;
  if (warp < blocks) load(warp, cur);
  if constexpr (kMmaL2Ahead > 1) {
#pragma unroll
    for (int d = 2; d < kMmaL2Ahead; ++d) prefetch(warp + d * kMmaWarps);
  }

  for (int h = warp; h < kMmaHeads; h += kMmaWarps) {
    unsigned m = 0;
    for (int d = lane; d < kDim; d += 32) m = max(m, __float_as_uint(fabsf(smem.loop.q[h][d])));
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if (lane == 0)
      smem.loop.q_exp[h] = NormalizingExponent(__uint_as_float(m), 15);  // 15: q as it is
  }
  __syncthreads();

  // q of head g as A fragments: rows g (hi) and g + 8 (lo), the k-step slots
  // holding the dims of quarter t in decoding order. Scaled by 2^(15 - e) so
  // that max |q| lands in [2^14, 2^15).
  const int q_exp = smem.loop.q_exp[g];
  uint32_t qa[kSteps][4];
  {
    const float to_half = ldexpf(1.0f, 15 - q_exp);
    const float* qrow = smem.loop.q[g] + t * (kDim / 4);
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // cols 2t, 2t + 1 (half 0); 2t + 8, 2t + 9
        const int pair = 2 * s + half;
        const int base = (pair / C::kPairs) * (32 / C::kBits);  // the pair's word
        const int e0 = base + C::ElementOf(pair % C::kPairs, 0);
        const int e1 = base + C::ElementOf(pair % C::kPairs, 1);
        SplitHalfPair(qrow[e0] * to_half, qrow[e1] * to_half, qa[s][2 * half], qa[s][2 * half + 1]);
      }
    }
  }
  // Score of head g: (hi + lo) * K's row scale * this.
  const float score_factor = a.scale_log2 * ldexpf(1.0f, q_exp - 15);
  // The weights times V's row scale, over 2^v_exp before they are split.
  unsigned v_scale_max = 0;
#pragma unroll
  for (int w = 0; w < kMmaWarps; ++w) v_scale_max = max(v_scale_max, smem.loop.v_scale_max[w]);
  const int v_exp = NormalizingExponent(__uint_as_float(v_scale_max), 0);
  const float v_norm = ldexpf(1.0f, -v_exp);

  float acc[kDTiles][4];  // O of head g: [j][0..1] hi rows, [j][2..3] lo rows
#pragma unroll
  for (int j = 0; j < kDTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  float m = -INFINITY;  // head g's running max (the same in the 4 threads of g)
  float l = 0.0f;       // this thread's share of head g's running sum

  for (int block = warp; block < blocks; block += kMmaWarps) {
    Stage next;
    if (block + kMmaWarps < blocks) load(block + kMmaWarps, next);
    if constexpr (kMmaL2Ahead > 1) prefetch(block + kMmaL2Ahead * kMmaWarps);
    const int key0 = block * kMmaBlockKeys;

    // S = q K^T for the block's two n8 tiles.
    float s[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
      uint32_t kp[kKPairs];
#pragma unroll
      for (int w = 0; w < kKWords; ++w) {
        uint32_t h[C::kPairs];
        C::Decode(cur.k[i][w], h);
#pragma unroll
        for (int p = 0; p < C::kPairs; ++p) kp[w * C::kPairs + p] = h[p];
      }
#pragma unroll
      for (int st = 0; st < kSteps; ++st) MmaF16(s[i], qa[st], kp[2 * st], kp[2 * st + 1]);
    }

    // Scores of head g for keys 8i + 2t + e (log2 domain), masked past n.
    float x[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key0 + 8 * i + 2 * t + e;
        float v = (s[i][e] + s[i][2 + e]) * (smem.loop.k_scale[key] * score_factor);
        if (a.softcap_log2 > 0.0f) v = a.softcap_log2 * tanhf(v / a.softcap_log2);
        x[i][e] = key < n ? v : -INFINITY;
      }
    }

    // Online softmax of head g over the block (the 4 threads of g hold its
    // 16 keys); x becomes the weights.
    float mx = fmaxf(fmaxf(x[0][0], x[0][1]), fmaxf(x[1][0], x[1][1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 2));
    const float m_new = fmaxf(m, mx);
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;  // no key scored yet: weights 0
    const float corr = exp2f(m - m_ref);
    m = m_new;
    float sum = 0.0f;
    uint32_t pa[4];  // A of P V: rows g (hi) and g + 8 (lo), keys 2t.. (tile 0), 8 + 2t.. (tile 1)
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float pv[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key0 + 8 * i + 2 * t + e;
        const float p = exp2f(x[i][e] - m_ref);
        sum += p;
        pv[e] = key < n ? p * (smem.loop.v_scale[key] * v_norm) : 0.0f;
      }
      SplitHalfPair(pv[0], pv[1], pa[2 * i], pa[2 * i + 1]);
    }
    l = l * corr + sum;
    if (corr != 1.0f) {
#pragma unroll
      for (int j = 0; j < kDTiles; ++j) {
        acc[j][0] *= corr;
        acc[j][1] *= corr;
        acc[j][2] *= corr;
        acc[j][3] *= corr;
      }
    }

    // O += P V, one MMA per d-tile; V pairs (key 2t, 2t + 1) and
    // (2t + 8, 2t + 9) of the same dim.
#pragma unroll
    for (int w = 0; w < kVWords; ++w) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        uint32_t b0[C::kPairs], b1[C::kPairs];
        C::Decode(__byte_perm(cur.v[0][w], cur.v[1][w], C::Interleave(half)), b0);
        C::Decode(__byte_perm(cur.v[2][w], cur.v[3][w], C::Interleave(half)), b1);
#pragma unroll
        for (int p = 0; p < C::kPairs; ++p) {
          // Element of the thread's eighth: word w, then (8-bit) 2 per
          // permuted word or (4-bit) 4 per permuted word.
          const int j = w * (32 / C::kBits) + half * C::kPairs + p;
          MmaF16(acc[j], pa, b0[p], b1[p]);
        }
      }
    }
    cur = next;
  }

  // Head g's sum over its 4 threads; the parts (warps) go to shared memory.
  l += __shfl_xor_sync(0xFFFFFFFFu, l, 1);
  l += __shfl_xor_sync(0xFFFFFFFFu, l, 2);
  __syncthreads();  // the loop phase's shared memory is reused below
  if (g < heads) {
    if (t == 0) smem.merge.ml[warp][g] = make_float2(m, l);
    const float to_acc = ldexpf(1.0f, v_exp);
#pragma unroll
    for (int j = 0; j < kDTiles; ++j) {
      const int d = 2 * t * (kDim / 8) + j;  // column 2t of d-tile j
      smem.merge.acc[warp][g][d] = (acc[j][0] + acc[j][2]) * to_acc;
      smem.merge.acc[warp][g][d + kDim / 8] = (acc[j][1] + acc[j][3]) * to_acc;
    }
  }
  smem.merge.Write(a, heads, span.token, head0, span.split);
}

// The tensor-core split kernel for format F (MmaSplitKvSupports), then the
// merge. The grid's z is num_kv_heads * passes of kMmaHeads heads.
// LaunchSplitKvMmaFormat (paged_attention_split_kv_quant.cu) picks F.
template <KvDtype F>
cudaError_t LaunchSplitKvMma(int head_dim, const SplitKvArgs& args, const MergeArgs& merge,
                             dim3 grid, cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      SplitKvMmaKernel<F, 64><<<grid, kThreads, 0, stream>>>(args);
      break;
    case 128:
      SplitKvMmaKernel<F, 128><<<grid, kThreads, 0, stream>>>(args);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return head_dim == 64 ? LaunchMergeFor<64>(args.q_type, merge, stream)
                        : LaunchMergeFor<128>(args.q_type, merge, stream);
}

cudaError_t LaunchSplitKvMmaFormat(KvDtype format, int head_dim, const SplitKvArgs& args,
                                   const MergeArgs& merge, dim3 grid, cudaStream_t stream);

}  // namespace kvserve::kernels::cuda::split_kv
