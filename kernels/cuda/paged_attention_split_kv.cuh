// The split-KV kernels (SplitKvKernel, MergeKernel) as templates on the KV
// cache format, shared by paged_attention_split_kv.cu (entry point, the fp32
// and 16-bit caches) and paged_attention_split_kv_quant.cu (the scaled
// formats), so each format's instantiations compile in their own unit.
// Design and invariants: the comment at the top of paged_attention_split_kv.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/paged_attention.h"

namespace kvserve::kernels::cuda::split_kv {

constexpr int kThreads = 128;
constexpr int kMergeWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;

inline bool SupportedHeadDim(int d) {
  return d == 16 || d == 32 || d == 64 || d == 80 || d == 96 || d == 128 || d == 256;
}

inline bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// Stores four floats as T (round to nearest even) at dst, which is
// 4 * sizeof(T)-byte aligned.
template <typename T>
__device__ __forceinline__ void Store4(const float4& v, T* dst) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(dst) = v;
  } else {
    uint2 packed;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
      memcpy(&packed.x, &a, 4);
      memcpy(&packed.y, &b, 4);
    } else {
      const __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
      memcpy(&packed.x, &a, 4);
      memcpy(&packed.y, &b, 4);
    }
    *reinterpret_cast<uint2*>(dst) = packed;
  }
}

constexpr int PowerOfTwoAtLeast(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

// How a K/V row of kDim elements in format F maps onto the lanes of a row
// group. A chunk is 16 bytes for fp32 and the 16-bit formats, 8 or 4 bytes
// for the scaled ones (8 elements, as a 16-bit chunk): a lane decodes as
// many values per row whatever the format, so registers and the row-group
// shape are the 16-bit cache's.
template <KvDtype F, int kDim>
struct RowShape {
  using Chunk = typename KvChunk<F>::Chunk;
  static constexpr int kVec = KvChunk<F>::kVec;  // elements per chunk
  static constexpr int kChunks = kDim / kVec;    // chunks per row
  static constexpr int kLanes = PowerOfTwoAtLeast(kChunks) < 32 ? PowerOfTwoAtLeast(kChunks) : 32;
  static constexpr int kChunksPerLane = (kChunks + kLanes - 1) / kLanes;
  static constexpr int kPerLane = kChunksPerLane * kVec;  // floats per lane per row
  static constexpr int kGroups = kThreads / kLanes;       // row groups per CTA
  // Rows per row group per iteration: every lane keeps 4 K and 4 V chunks in flight.
  static constexpr int kUnroll = 4 / kChunksPerLane;
  static constexpr int kKeysPerIter = kGroups * kUnroll;
  static_assert(kDim % kVec == 0 && kChunksPerLane * kLanes >= kChunks && kUnroll >= 1);
};

// Device-side arguments of the split-KV kernel (a copy of the params plus
// derived values).
struct SplitKvArgs {
  const void* q;
  ElemType q_type;  // read once per CTA into shared memory (fp32)
  int64_t q_stride;
  const void* k_cache;
  const void* v_cache;
  const float* k_scales;  // scaled formats: per row; unused otherwise
  const float* v_scales;
  const int32_t* token_seq;
  const int32_t* token_pos;
  const int32_t* block_table_start;
  const int32_t* block_ids;
  float2* ws_ml;
  float* ws_acc;
  int num_heads;
  int num_kv_heads;
  int group;   // query heads per kv head
  int passes;  // ceil(group / kHeads)
  int block_size;
  int num_splits;  // S of the workspace layout
  int sliding_window;
  float scale_log2;    // scale * log2(e)
  float softcap_log2;  // softcap * log2(e); 0: no soft-capping
};

// Resident CTAs per SM the register allocation must allow (more heads per
// pass hold more accumulators).
constexpr int SplitKvMinBlocks(int heads) { return heads <= 1 ? 5 : (heads <= 4 ? 3 : 2); }

// q of one query row element as fp32 (the q type is uniform per call).
// (__forceinline__ implies inline: one definition in every unit.)
__device__ __forceinline__ float LoadQ(const void* q, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::kF32:
      return static_cast<const float*>(q)[i];
    case ElemType::kF16:
      return __half2float(static_cast<const __half*>(q)[i]);
    default:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(q)[i]);
  }
}

// The keys and query heads of one split-KV CTA: blockIdx.x is the token,
// .y the split of kSplitKeys keys (aligned to position 0), .z the kv head
// times `passes` plus the pass of `heads_per_pass` query heads. The keys are
// k0 .. k0 + n - 1 of the token's window; n <= 0 when the split misses it
// (the CTA then returns, uniformly).
struct SplitSpan {
  int token, split, kv_head, head0, heads, k0, n;

  __device__ __forceinline__ static SplitSpan Of(const SplitKvArgs& a, int heads_per_pass) {
    SplitSpan s;
    s.token = blockIdx.x;
    s.split = blockIdx.y;
    s.kv_head = blockIdx.z / a.passes;
    const int pass = blockIdx.z % a.passes;
    const int pos = a.token_pos[s.token];
    const int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
    s.k0 = max(lo, s.split * kSplitKeys);
    s.n = min(pos + 1, (s.split + 1) * kSplitKeys) - s.k0;
    s.head0 = s.kv_head * a.group + pass * heads_per_pass;  // first query head of the CTA
    s.heads = min(heads_per_pass, a.group - pass * heads_per_pass);
    return s;
  }
};

// The cache rows (and, kScaled, the K / V row scales) of this thread's keys
// of the split: key k0 + i for i = threadIdx.x + u * kThreads, u < kPer,
// valid where i < n. Every page-table load is issued before any row is
// formed, and every scale load before any is used, so a CTA waits two
// memory latencies here rather than two per key: a split of 1-byte or
// half-byte rows streams only 32-128 KB, and this wait was a large part of
// its time.
template <bool kScaled>
struct SplitRows {
  static constexpr int kPer = kSplitKeys / kThreads;
  static_assert(kSplitKeys % kThreads == 0);
  int64_t row[kPer];
  float k_scale[kScaled ? kPer : 1];
  float v_scale[kScaled ? kPer : 1];

  __device__ __forceinline__ void Load(const SplitKvArgs& a, const SplitSpan& s) {
    const int32_t* blocks = a.block_ids + a.block_table_start[a.token_seq[s.token]];
    int32_t block_id[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int i = threadIdx.x + u * kThreads;
      block_id[u] = i < s.n ? __ldg(blocks + (s.k0 + i) / a.block_size) : 0;
    }
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int j = s.k0 + threadIdx.x + u * kThreads;
      const int b = j / a.block_size;
      row[u] = (static_cast<int64_t>(block_id[u]) * a.num_kv_heads + s.kv_head) * a.block_size +
               (j - b * a.block_size);
    }
    if constexpr (kScaled) {
#pragma unroll
      for (int u = 0; u < kPer; ++u) {
        const bool valid = threadIdx.x + u * kThreads < s.n;
        k_scale[u] = valid ? __ldg(a.k_scales + row[u]) : 0.0f;
        v_scale[u] = valid ? __ldg(a.v_scales + row[u]) : 0.0f;
      }
    }
  }
};

// The end of a split-KV CTA: kParts partial softmax states per head (row
// groups or warps, each with its own (m, l) and unnormalised acc) combined in
// increasing part order into the split's partial in the workspace. A part
// without keys has m = -inf, so its weight is 0 (part 0 always has one).
// Write() starts with the barrier that publishes every part's ml and acc.
template <int kParts, int kHeads, int kDim>
struct PartialsSmem {
  float acc[kParts][kHeads][kDim];
  float2 ml[kParts][kHeads];
  float w[kParts][kHeads];

  __device__ __forceinline__ void Write(const SplitKvArgs& a, int heads, int token, int head0,
                                        int split) {
    __syncthreads();
    const int64_t partial0 =
        (static_cast<int64_t>(token) * a.num_heads + head0) * a.num_splits + split;
    if (threadIdx.x < heads) {
      const int h = threadIdx.x;
      float mx = -INFINITY;
      for (int g = 0; g < kParts; ++g) mx = fmaxf(mx, ml[g][h].x);
      float sum = 0.0f;
      for (int g = 0; g < kParts; ++g) {
        const float wg = exp2f(ml[g][h].x - mx);
        w[g][h] = wg;
        sum = fmaf(wg, ml[g][h].y, sum);
      }
      a.ws_ml[partial0 + static_cast<int64_t>(h) * a.num_splits] = make_float2(mx, sum);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < heads * kDim; i += blockDim.x) {
      const int h = i / kDim;
      const int d = i - h * kDim;
      float sum = 0.0f;
      for (int g = 0; g < kParts; ++g) sum = fmaf(w[g][h], acc[g][h][d], sum);
      a.ws_acc[(partial0 + static_cast<int64_t>(h) * a.num_splits) * kDim + d] = sum;
    }
  }
};

template <KvDtype F, int kDim, int kHeads>
__global__ void __launch_bounds__(kThreads, SplitKvMinBlocks(kHeads))
    SplitKvKernel(const SplitKvArgs a) {
  using S = RowShape<F, kDim>;
  using C = KvChunk<F>;
  using Chunk = typename S::Chunk;
  constexpr int kVec = S::kVec, kLanes = S::kLanes, kCpl = S::kChunksPerLane;
  constexpr int kPerLane = S::kPerLane, kGroups = S::kGroups, kUnroll = S::kUnroll;
  constexpr bool kUnpackKOnce = kHeads <= 4;  // register budget

  const SplitSpan span = SplitSpan::Of(a, kHeads);
  if (span.n <= 0) return;  // uniform per CTA
  const int token = span.token, split = span.split;
  const int n = span.n, head0 = span.head0, heads = span.heads;

  // The loop phase and the row-group merge phase never overlap in time.
  struct LoopSmem {
    // First: read as float4, so 16-byte aligned (the union is).
    float q[kHeads][kDim];  // q * scale * log2(e)
    // Key k0 + i's row, in chunks from the cache start (K and V alike).
    int64_t row[kSplitKeys];
    // Scaled formats: key k0 + i's K and V row scales, gathered with the rows
    // once per CTA (one array element otherwise).
    float k_scale[C::kScaled ? kSplitKeys : 1];
    float v_scale[C::kScaled ? kSplitKeys : 1];
  };
  static_assert(sizeof(float) * kHeads * kDim % alignof(int64_t) == 0);
  union Smem {
    LoopSmem loop;
    PartialsSmem<kGroups, kHeads, kDim> merge;
  };
  __shared__ __align__(16) Smem smem;

  // Page table of the split, expanded to one row offset per attended key.
  {
    SplitRows<C::kScaled> rows;
    rows.Load(a, span);
#pragma unroll
    for (int u = 0; u < rows.kPer; ++u) {
      const int i = threadIdx.x + u * kThreads;
      if (i >= n) break;
      smem.loop.row[i] = rows.row[u] * S::kChunks;
      if constexpr (C::kScaled) {
        smem.loop.k_scale[i] = rows.k_scale[u];
        smem.loop.v_scale[i] = rows.v_scale[u];
      }
    }
    const int64_t q0 = token * a.q_stride + static_cast<int64_t>(head0) * kDim;
    for (int i = threadIdx.x; i < kHeads * kDim; i += kThreads) {
      const int h = i / kDim;
      smem.loop.q[h][i - h * kDim] = h < heads ? LoadQ(a.q, a.q_type, q0 + i) * a.scale_log2 : 0.0f;
    }
  }
  __syncthreads();

  const int lane = threadIdx.x % kLanes;
  const int group = threadIdx.x / kLanes;
  const Chunk* kc = static_cast<const Chunk*>(a.k_cache);
  const Chunk* vc = static_cast<const Chunk*>(a.v_cache);

  float acc[kHeads][kPerLane];
  float m[kHeads], l[kHeads];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[h][e] = 0.0f;
  }

  // One iteration's K and V chunks (and row scales). Keys past n are never
  // loaded (NaN-safe): their chunks and scales are zero and `valid` is false.
  struct Stage {
    Chunk k[kUnroll][kCpl];
    Chunk v[kUnroll][kCpl];
    float ks[kUnroll], vs[kUnroll];
    bool valid[kUnroll];
  };
  auto load = [&](int it, Stage& st) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = (it * kUnroll + u) * kGroups + group;
      st.valid[u] = i < n;
      const int64_t vec_row = st.valid[u] ? smem.loop.row[i] : 0;
      if constexpr (C::kScaled) {  // every lane of the row group reads the row's scales
        st.ks[u] = st.valid[u] ? smem.loop.k_scale[i] : 0.0f;
        st.vs[u] = st.valid[u] ? smem.loop.v_scale[i] : 0.0f;
      } else {
        st.ks[u] = st.vs[u] = 1.0f;
      }
#pragma unroll
      for (int c = 0; c < kCpl; ++c) {
        const int chunk = lane + c * kLanes;
        if (st.valid[u] && chunk < S::kChunks) {
          st.k[u][c] = __ldg(kc + vec_row + chunk);
          st.v[u][c] = __ldg(vc + vec_row + chunk);
        } else {
          st.k[u][c] = Chunk{};
          st.v[u][c] = Chunk{};
        }
      }
    }
  };

  const int iters = (n + S::kKeysPerIter - 1) / S::kKeysPerIter;
  Stage cur;
  load(0, cur);
  for (int it = 0; it < iters; ++it) {
    // The next iteration's loads are in flight while this one computes (past
    // the last iteration the stage is empty and loads nothing).
    Stage next;
    load(it + 1, next);
    const bool* valid = cur.valid;
    const Chunk(&kraw)[kUnroll][kCpl] = cur.k;
    const Chunk(&vraw)[kUnroll][kCpl] = cur.v;

    // Scores of the pass's heads for the iteration's keys. K is unpacked
    // once where registers allow, else once per head.
    float kf[kUnpackKOnce ? kUnroll : 1][kPerLane];
    if constexpr (kUnpackKOnce) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int c = 0; c < kCpl; ++c) C::Decode(kraw[u][c], &kf[u][c * kVec]);
      }
    }
    float s[kHeads][kUnroll];
#pragma unroll
    for (int h = 0; h < kHeads; ++h) {
      if (h >= heads) break;  // uniform per CTA
      float qv[kPerLane];
#pragma unroll
      for (int c = 0; c < kCpl; ++c) {
        const int chunk = lane + c * kLanes;
#pragma unroll
        for (int e = 0; e < kVec; e += 4) {
          const float4 x = chunk < S::kChunks
                               ? *reinterpret_cast<const float4*>(&smem.loop.q[h][chunk * kVec + e])
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          qv[c * kVec + e] = x.x;
          qv[c * kVec + e + 1] = x.y;
          qv[c * kVec + e + 2] = x.z;
          qv[c * kVec + e + 3] = x.w;
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float kv[kPerLane];
        if constexpr (kUnpackKOnce) {
#pragma unroll
          for (int e = 0; e < kPerLane; ++e) kv[e] = kf[u][e];
        } else {
#pragma unroll
          for (int c = 0; c < kCpl; ++c) C::Decode(kraw[u][c], &kv[c * kVec]);
        }
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) dot = fmaf(qv[e], kv[e], dot);
        if constexpr (C::kScaled) dot *= cur.ks[u];  // the same in every lane of the row
        s[h][u] = dot;
      }
    }
    // Butterfly over the row group: every lane ends with the same sums.
#pragma unroll
    for (int off = kLanes / 2; off > 0; off /= 2) {
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (h >= heads) break;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) s[h][u] += __shfl_xor_sync(0xFFFFFFFFu, s[h][u], off);
      }
    }

    // Soft-capping in the log2 domain: with s = log2(e) * score and
    // C = log2(e) * cap, C * tanh(s / C) = log2(e) * cap * tanh(score / cap).
    if (a.softcap_log2 > 0.0f) {  // uniform per call
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          s[h][u] = a.softcap_log2 * tanhf(s[h][u] / a.softcap_log2);
        }
      }
    }

    // Online softmax step; s becomes the weights. Uniform per row group:
    // a row group with no key this iteration skips it.
    if (valid[0]) {
#pragma unroll
      for (int h = 0; h < kHeads; ++h) {
        if (h >= heads) break;
        float mx = m[h];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (valid[u]) mx = fmaxf(mx, s[h][u]);
        }
        const float corr = exp2f(m[h] - mx);  // 0 while m[h] is -inf
        m[h] = mx;
        float sum = l[h] * corr;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          s[h][u] = valid[u] ? exp2f(s[h][u] - mx) : 0.0f;
          sum += s[h][u];
        }
        l[h] = sum;
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) acc[h][e] *= corr;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float vf[kPerLane];
#pragma unroll
        for (int c = 0; c < kCpl; ++c) C::Decode(vraw[u][c], &vf[c * kVec]);
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          if (h >= heads) break;
          float w = s[h][u];
          if constexpr (C::kScaled) w *= cur.vs[u];  // p (c s) as (p s) c
#pragma unroll
          for (int e = 0; e < kPerLane; ++e) acc[h][e] = fmaf(w, vf[e], acc[h][e]);
        }
      }
    }
    cur = next;
  }

  // Merge the row groups in increasing order; a row group without keys has
  // m = -inf, so its weight is 0 (group 0 always has key k0).
  __syncthreads();  // the loop phase's shared memory is reused below
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    if (h >= heads) break;
    if (lane == 0) smem.merge.ml[group][h] = make_float2(m[h], l[h]);
#pragma unroll
    for (int c = 0; c < kCpl; ++c) {
      const int chunk = lane + c * kLanes;
      if (chunk < S::kChunks) {
#pragma unroll
        for (int e = 0; e < kVec; e += 4) {
          const float* x = &acc[h][c * kVec + e];
          *reinterpret_cast<float4*>(&smem.merge.acc[group][h][chunk * kVec + e]) =
              make_float4(x[0], x[1], x[2], x[3]);
        }
      }
    }
  }
  smem.merge.Write(a, heads, token, head0, split);
}

struct MergeArgs {
  void* out;
  const int32_t* token_pos;
  const float2* ws_ml;
  const float* ws_acc;
  int num_tokens;
  int num_heads;
  int num_splits;
  int max_seq_len;
  int sliding_window;
};

// One warp per (token, head): out = sum_s 2^(m_s - M) acc_s / sum_s 2^(m_s - M) l_s,
// s in increasing order. A token past the caller's max_seq_len bound had
// splits outside the grid: its output is NaN (a caller bug made visible).
template <typename T, int kDim>
__global__ void __launch_bounds__(kMergeWarps * 32) MergeKernel(const MergeArgs a) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kMergeWarps + threadIdx.x / 32;
  if (row >= static_cast<int64_t>(a.num_tokens) * a.num_heads) return;
  const int lane = threadIdx.x % 32;
  const int token = static_cast<int>(row / a.num_heads);
  const int pos = a.token_pos[token];
  T* out = static_cast<T*>(a.out) + row * kDim;
  if (pos < 0 || pos >= a.max_seq_len) {
    for (int c = lane; c < kDim / 4; c += 32) {
      Store4<T>(make_float4(NAN, NAN, NAN, NAN), out + 4 * c);
    }
    return;
  }
  const int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  const int s0 = lo / kSplitKeys, s1 = pos / kSplitKeys;
  const float2* ml = a.ws_ml + row * a.num_splits;
  const float4* acc = reinterpret_cast<const float4*>(a.ws_acc + row * a.num_splits * kDim);
  float mx = -INFINITY;
  for (int s = s0; s <= s1; ++s) mx = fmaxf(mx, ml[s].x);
  float sum = 0.0f;
  for (int s = s0; s <= s1; ++s) sum = fmaf(exp2f(ml[s].x - mx), ml[s].y, sum);
  for (int c = lane; c < kDim / 4; c += 32) {
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s = s0; s <= s1; ++s) {
      const float w = exp2f(ml[s].x - mx);
      const float4 x = acc[static_cast<int64_t>(s) * (kDim / 4) + c];
      o.x = fmaf(w, x.x, o.x);
      o.y = fmaf(w, x.y, o.y);
      o.z = fmaf(w, x.z, o.z);
      o.w = fmaf(w, x.w, o.w);
    }
    Store4<T>(make_float4(o.x / sum, o.y / sum, o.z / sum, o.w / sum), out + 4 * c);
  }
}

template <typename T, int kDim>
cudaError_t LaunchMerge(const MergeArgs& merge, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(merge.num_tokens) * merge.num_heads;
  const auto merge_blocks = static_cast<unsigned>((rows + kMergeWarps - 1) / kMergeWarps);
  MergeKernel<T, kDim><<<merge_blocks, kMergeWarps * 32, 0, stream>>>(merge);
  return cudaGetLastError();
}

// The merge kernel writing out in the activations' type (q's).
template <int kDim>
cudaError_t LaunchMergeFor(ElemType out_type, const MergeArgs& merge, cudaStream_t stream) {
  switch (out_type) {
    case ElemType::kF32:
      return LaunchMerge<float, kDim>(merge, stream);
    case ElemType::kF16:
      return LaunchMerge<__half, kDim>(merge, stream);
    case ElemType::kBF16:
      return LaunchMerge<__nv_bfloat16, kDim>(merge, stream);
  }
  return cudaErrorInvalidValue;
}

// The split kernel for cache format F, then the merge writing out_type.
template <KvDtype F, int kDim>
cudaError_t LaunchSplitKv(const SplitKvArgs& args, const MergeArgs& merge, int heads_per_pass,
                          dim3 grid, cudaStream_t stream) {
  switch (heads_per_pass) {
    case 1:
      SplitKvKernel<F, kDim, 1><<<grid, kThreads, 0, stream>>>(args);
      break;
    case 2:
      SplitKvKernel<F, kDim, 2><<<grid, kThreads, 0, stream>>>(args);
      break;
    case 4:
      SplitKvKernel<F, kDim, 4><<<grid, kThreads, 0, stream>>>(args);
      break;
    default:
      SplitKvKernel<F, kDim, 8><<<grid, kThreads, 0, stream>>>(args);
      break;
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return LaunchMergeFor<kDim>(args.q_type, merge, stream);
}

template <KvDtype F>
cudaError_t LaunchSplitKvFormat(int head_dim, const SplitKvArgs& args, const MergeArgs& merge,
                                int heads_per_pass, dim3 grid, cudaStream_t stream) {
  switch (head_dim) {
    case 16:  // small test models (builtin:tiny)
      return LaunchSplitKv<F, 16>(args, merge, heads_per_pass, grid, stream);
    case 32:
      return LaunchSplitKv<F, 32>(args, merge, heads_per_pass, grid, stream);
    case 64:
      return LaunchSplitKv<F, 64>(args, merge, heads_per_pass, grid, stream);
    case 80:
      return LaunchSplitKv<F, 80>(args, merge, heads_per_pass, grid, stream);
    case 96:
      return LaunchSplitKv<F, 96>(args, merge, heads_per_pass, grid, stream);
    case 128:
      return LaunchSplitKv<F, 128>(args, merge, heads_per_pass, grid, stream);
    case 256:
      return LaunchSplitKv<F, 256>(args, merge, heads_per_pass, grid, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// Declared here, instantiated once per format (fp32 / bf16 / fp16 in
// paged_attention_split_kv.cu, the scaled formats in _quant.cu).
#define KVSERVE_SPLIT_KV_FORMATS(X) \
  X(KvDtype::kFloat32)              \
  X(KvDtype::kBfloat16)             \
  X(KvDtype::kFloat16)              \
  X(KvDtype::kFp8E4m3)              \
  X(KvDtype::kInt8)                 \
  X(KvDtype::kInt4)                 \
  X(KvDtype::kFp4E2m1)
#define KVSERVE_SPLIT_KV_EXTERN(F)                                                              \
  extern template cudaError_t LaunchSplitKvFormat<F>(int, const SplitKvArgs&, const MergeArgs&, \
                                                     int, dim3, cudaStream_t);
KVSERVE_SPLIT_KV_FORMATS(KVSERVE_SPLIT_KV_EXTERN)
#undef KVSERVE_SPLIT_KV_EXTERN

}  // namespace kvserve::kernels::cuda::split_kv
