// Split-KV ("flash-decoding") paged attention, its workspace layout, and the
// KV-cache write. Contract: kernels/cuda/paged_attention.h.
//
// Work decomposition of PagedAttentionSplitKv (two launches):
//
//   1. SplitKvKernel, grid (token, split, kv head x head pass). Split s covers
//      the absolute key positions [512 s, 512 s + 512); a token attends to
//      lo..pos, so only splits lo / 512 .. pos / 512 do work, the other CTAs
//      of the grid return at once:
//
//        positions  0 ....... 511 | 512 ...... 1023 | 1024 ... pos
//                          lo ^^^^|^^^^^^^^^^^^^^^^^|^^^^^^^^^^^
//        split          0         |        1        |      2
//
//      The CTA computes every query head of its GQA group (in passes of at
//      most 8 heads when the group is larger), so each K/V row is loaded once
//      per pass. It writes the unnormalised partial (m, l, acc[head_dim]) of
//      each head to the workspace; scores are kept in the log2 domain
//      (q is pre-multiplied by scale * log2(e)).
//   2. MergeKernel, one warp per (token, head): combines the token's splits
//      in increasing split order and writes out in the storage dtype.
//
// Inside a CTA (128 threads): a "row group" of kLanes lanes covers one K/V
// row (head_dim elements) with 16-byte loads, one or two chunks per lane.
// Row group g takes the split's attended keys i = (it * kUnroll + u) *
// kGroups + g (i counted from the first attended key k0), so neighbouring
// row groups of a warp read neighbouring keys, which are contiguous rows
// when they share a block. Each row group runs its own online softmax over
// its keys; at the end the row groups are merged in increasing order.
//
// Batch invariance: every choice above (key -> row group assignment, the
// order of additions in the dot product, the butterfly reduction, the row
// group merge, the split merge) depends only on the token's position, the
// window, the dtype, head_dim and the GQA group size, never on the batch, the
// grid, max_seq_len or the other heads of a pass. There is no single-split
// shortcut: every token goes through the merge kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/paged_attention.h"

namespace kvserve::kernels::cuda {

// Workspace layout (bytes), P = num_tokens * num_heads * S partials with
// S = ceil(max_seq_len / kSplitKeys), partial index ((t * num_heads + h) * S + s):
//   [0, P * 8)                     float2 (m, l) per partial
//   [RoundUp(P * 8, 256), + P * head_dim * 4)  float acc[head_dim] per partial
// PagedAttentionWorkspaceBytes (paged_attention.cu) returns this size.
namespace internal {

int SplitKvNumSplits(int max_seq_len) { return (max_seq_len + kSplitKeys - 1) / kSplitKeys; }

size_t SplitKvAccOffset(size_t partials) { return (partials * sizeof(float2) + 255) / 256 * 256; }

size_t SplitKvWorkspaceBytes(int num_tokens, int num_heads, int head_dim, int max_seq_len) {
  if (num_tokens <= 0 || num_heads <= 0 || head_dim <= 0 || max_seq_len <= 0) return 0;
  const size_t partials = static_cast<size_t>(num_tokens) * static_cast<size_t>(num_heads) *
                          static_cast<size_t>(SplitKvNumSplits(max_seq_len));
  return SplitKvAccOffset(partials) + partials * static_cast<size_t>(head_dim) * sizeof(float);
}

}  // namespace internal

namespace {

constexpr int kThreads = 128;
constexpr int kMergeWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;

bool SupportedHeadDim(int d) {
  return d == 16 || d == 32 || d == 64 || d == 80 || d == 96 || d == 128 || d == 256;
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// ---- Element conversions (fp32 arithmetic, storage as T). ----

__device__ __forceinline__ float ToFloat(float x) { return x; }
__device__ __forceinline__ float ToFloat(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 x) { return __bfloat162float(x); }

// The 16 / sizeof(T) elements of a 16-byte chunk as floats.
template <typename T>
__device__ __forceinline__ void Unpack(const uint4& raw, float* f) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(T) == 4) {
      f[i] = __uint_as_float(w[i]);
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    } else {
      __half2 h;
      memcpy(&h, &w[i], 4);
      const float2 v = __half22float2(h);
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  }
}

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

// How a K/V row of kDim elements of T maps onto the lanes of a row group.
template <typename T, int kDim>
struct RowShape {
  static constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per chunk
  static constexpr int kChunks = kDim / kVec;                    // 16-byte chunks per row
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
  int64_t q_stride;
  const void* k_cache;
  const void* v_cache;
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

template <typename T, int kDim, int kHeads>
__global__ void __launch_bounds__(kThreads, SplitKvMinBlocks(kHeads))
    SplitKvKernel(const SplitKvArgs a) {
  using S = RowShape<T, kDim>;
  constexpr int kVec = S::kVec, kLanes = S::kLanes, kCpl = S::kChunksPerLane;
  constexpr int kPerLane = S::kPerLane, kGroups = S::kGroups, kUnroll = S::kUnroll;
  constexpr bool kUnpackKOnce = kHeads <= 4;  // register budget

  const int token = blockIdx.x;
  const int split = blockIdx.y;
  const int kv_head = blockIdx.z / a.passes;
  const int pass = blockIdx.z % a.passes;
  const int pos = a.token_pos[token];
  const int lo = a.sliding_window > 0 ? max(0, pos - a.sliding_window + 1) : 0;
  const int k0 = max(lo, split * kSplitKeys);
  const int k1 = min(pos + 1, (split + 1) * kSplitKeys);
  if (k0 >= k1) return;  // the split does not meet lo..pos (uniform per CTA)
  const int n = k1 - k0;
  const int head0 = kv_head * a.group + pass * kHeads;  // first query head of the CTA
  const int heads = min(kHeads, a.group - pass * kHeads);

  // The loop phase and the row-group merge phase never overlap in time.
  struct LoopSmem {
    // Key k0 + i's row, in 16-byte chunks from the cache start (K and V alike).
    int64_t row[kSplitKeys];
    float q[kHeads][kDim];  // q * scale * log2(e)
  };
  struct MergeSmem {
    float acc[kGroups][kHeads][kDim];
    float2 ml[kGroups][kHeads];
    float w[kGroups][kHeads];
  };
  union Smem {
    LoopSmem loop;
    MergeSmem merge;
  };
  __shared__ __align__(16) Smem smem;

  // Page table of the split, expanded to one row offset per attended key.
  {
    const int32_t* blocks = a.block_ids + a.block_table_start[a.token_seq[token]];
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const int j = k0 + i;
      const int b = j / a.block_size;
      const int64_t row =
          (static_cast<int64_t>(__ldg(blocks + b)) * a.num_kv_heads + kv_head) * a.block_size +
          (j - b * a.block_size);
      smem.loop.row[i] = row * S::kChunks;
    }
    const T* q =
        static_cast<const T*>(a.q) + token * a.q_stride + static_cast<int64_t>(head0) * kDim;
    for (int i = threadIdx.x; i < kHeads * kDim; i += kThreads) {
      const int h = i / kDim;
      smem.loop.q[h][i - h * kDim] = h < heads ? ToFloat(q[i]) * a.scale_log2 : 0.0f;
    }
  }
  __syncthreads();

  const int lane = threadIdx.x % kLanes;
  const int group = threadIdx.x / kLanes;
  const uint4* kc = static_cast<const uint4*>(a.k_cache);
  const uint4* vc = static_cast<const uint4*>(a.v_cache);

  float acc[kHeads][kPerLane];
  float m[kHeads], l[kHeads];
#pragma unroll
  for (int h = 0; h < kHeads; ++h) {
    m[h] = -INFINITY;
    l[h] = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[h][e] = 0.0f;
  }

  // One iteration's K and V chunks. Keys past n are never loaded (NaN-safe):
  // their chunks are zero and `valid` is false.
  struct Stage {
    uint4 k[kUnroll][kCpl];
    uint4 v[kUnroll][kCpl];
    bool valid[kUnroll];
  };
  auto load = [&](int it, Stage& st) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = (it * kUnroll + u) * kGroups + group;
      st.valid[u] = i < n;
      const int64_t vec_row = st.valid[u] ? smem.loop.row[i] : 0;
#pragma unroll
      for (int c = 0; c < kCpl; ++c) {
        const int chunk = lane + c * kLanes;
        if (st.valid[u] && chunk < S::kChunks) {
          st.k[u][c] = __ldg(kc + vec_row + chunk);
          st.v[u][c] = __ldg(vc + vec_row + chunk);
        } else {
          st.k[u][c] = make_uint4(0, 0, 0, 0);
          st.v[u][c] = make_uint4(0, 0, 0, 0);
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
    const uint4(&kraw)[kUnroll][kCpl] = cur.k;
    const uint4(&vraw)[kUnroll][kCpl] = cur.v;

    // Scores of the pass's heads for the iteration's keys. K is unpacked
    // once where registers allow, else once per head.
    float kf[kUnpackKOnce ? kUnroll : 1][kPerLane];
    if constexpr (kUnpackKOnce) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int c = 0; c < kCpl; ++c) Unpack<T>(kraw[u][c], &kf[u][c * kVec]);
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
          for (int c = 0; c < kCpl; ++c) Unpack<T>(kraw[u][c], &kv[c * kVec]);
        }
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) dot = fmaf(qv[e], kv[e], dot);
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
        for (int c = 0; c < kCpl; ++c) Unpack<T>(vraw[u][c], &vf[c * kVec]);
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          if (h >= heads) break;
#pragma unroll
          for (int e = 0; e < kPerLane; ++e) acc[h][e] = fmaf(s[h][u], vf[e], acc[h][e]);
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
  __syncthreads();
  const int64_t partial0 =
      (static_cast<int64_t>(token) * a.num_heads + head0) * a.num_splits + split;
  if (threadIdx.x < heads) {
    const int h = threadIdx.x;
    float mx = -INFINITY;
    for (int g = 0; g < kGroups; ++g) mx = fmaxf(mx, smem.merge.ml[g][h].x);
    float sum = 0.0f;
    for (int g = 0; g < kGroups; ++g) {
      const float w = exp2f(smem.merge.ml[g][h].x - mx);
      smem.merge.w[g][h] = w;
      sum = fmaf(w, smem.merge.ml[g][h].y, sum);
    }
    a.ws_ml[partial0 + static_cast<int64_t>(h) * a.num_splits] = make_float2(mx, sum);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < heads * kDim; i += kThreads) {
    const int h = i / kDim;
    const int d = i - h * kDim;
    float sum = 0.0f;
    for (int g = 0; g < kGroups; ++g) sum = fmaf(smem.merge.w[g][h], smem.merge.acc[g][h][d], sum);
    a.ws_acc[(partial0 + static_cast<int64_t>(h) * a.num_splits) * kDim + d] = sum;
  }
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
cudaError_t LaunchSplitKv(const SplitKvArgs& args, const MergeArgs& merge, int heads_per_pass,
                          dim3 grid, cudaStream_t stream) {
  switch (heads_per_pass) {
    case 1:
      SplitKvKernel<T, kDim, 1><<<grid, kThreads, 0, stream>>>(args);
      break;
    case 2:
      SplitKvKernel<T, kDim, 2><<<grid, kThreads, 0, stream>>>(args);
      break;
    case 4:
      SplitKvKernel<T, kDim, 4><<<grid, kThreads, 0, stream>>>(args);
      break;
    default:
      SplitKvKernel<T, kDim, 8><<<grid, kThreads, 0, stream>>>(args);
      break;
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int64_t rows = static_cast<int64_t>(merge.num_tokens) * merge.num_heads;
  const auto merge_blocks = static_cast<unsigned>((rows + kMergeWarps - 1) / kMergeWarps);
  MergeKernel<T, kDim><<<merge_blocks, kMergeWarps * 32, 0, stream>>>(merge);
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchSplitKvType(int head_dim, const SplitKvArgs& args, const MergeArgs& merge,
                              int heads_per_pass, dim3 grid, cudaStream_t stream) {
  switch (head_dim) {
    case 16:  // small test models (builtin:tiny)
      return LaunchSplitKv<T, 16>(args, merge, heads_per_pass, grid, stream);
    case 32:
      return LaunchSplitKv<T, 32>(args, merge, heads_per_pass, grid, stream);
    case 64:
      return LaunchSplitKv<T, 64>(args, merge, heads_per_pass, grid, stream);
    case 80:
      return LaunchSplitKv<T, 80>(args, merge, heads_per_pass, grid, stream);
    case 96:
      return LaunchSplitKv<T, 96>(args, merge, heads_per_pass, grid, stream);
    case 128:
      return LaunchSplitKv<T, 128>(args, merge, heads_per_pass, grid, stream);
    case 256:
      return LaunchSplitKv<T, 256>(args, merge, heads_per_pass, grid, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// ---- WriteKvCache: a byte copy of each token's K/V rows into its slot, in
// units of W bytes (16 where every address and stride allows). ----

struct WriteKvArgs {
  const char* k;
  const char* v;
  char* k_cache;
  char* v_cache;
  const int64_t* slot_mapping;
  int64_t src_stride_bytes;
  int64_t row_bytes;  // head_dim * element size
  int64_t num_tokens;
  int num_kv_heads;
  int block_size;
};

template <int W>
struct CopyUnit;
template <>
struct CopyUnit<16> {
  using type = uint4;
};
template <>
struct CopyUnit<8> {
  using type = uint2;
};
template <>
struct CopyUnit<4> {
  using type = uint32_t;
};
template <>
struct CopyUnit<2> {
  using type = uint16_t;
};
template <>
struct CopyUnit<1> {
  using type = uint8_t;
};

template <int W>
__global__ void __launch_bounds__(256) WriteKvKernel(const WriteKvArgs a) {
  using U = typename CopyUnit<W>::type;
  const int64_t units = a.row_bytes / W;  // per (token, kv head)
  const int64_t total = a.num_tokens * a.num_kv_heads * units;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % units;
    const int64_t th = i / units;  // token * num_kv_heads + head
    const int64_t t = th / a.num_kv_heads;
    const int64_t h = th - t * a.num_kv_heads;
    const int64_t slot = a.slot_mapping[t];
    if (slot < 0) continue;
    const int64_t block = slot / a.block_size;
    const int64_t dst_row =
        (block * a.num_kv_heads + h) * a.block_size + (slot - block * a.block_size);
    const int64_t dst = dst_row * a.row_bytes + c * W;
    const int64_t src = t * a.src_stride_bytes + h * a.row_bytes + c * W;
    *reinterpret_cast<U*>(a.k_cache + dst) = *reinterpret_cast<const U*>(a.k + src);
    *reinterpret_cast<U*>(a.v_cache + dst) = *reinterpret_cast<const U*>(a.v + src);
  }
}

}  // namespace

cudaError_t PagedAttentionSplitKv(const CudaPagedAttentionParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.num_heads <= 0 || p.num_kv_heads <= 0 ||
      p.num_heads % p.num_kv_heads != 0 || !SupportedHeadDim(p.head_dim) || p.block_size < 1 ||
      p.block_size > 64 || p.sliding_window < 0 || !(p.softcap >= 0.0f)) {
    return cudaErrorInvalidValue;
  }
  if (p.dtype != ElemType::kF32 && p.dtype != ElemType::kF16 && p.dtype != ElemType::kBF16) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.q == nullptr || p.out == nullptr || p.k_cache == nullptr || p.v_cache == nullptr ||
      p.token_seq == nullptr || p.token_pos == nullptr || p.block_table_start == nullptr ||
      p.block_ids == nullptr || p.workspace == nullptr) {
    return cudaErrorInvalidValue;
  }
  // 16-byte K/V loads and vector output stores.
  if (!Aligned16(p.k_cache) || !Aligned16(p.v_cache) || !Aligned16(p.out) ||
      !Aligned16(p.workspace)) {
    return cudaErrorInvalidValue;
  }
  if (p.q_stride < static_cast<int64_t>(p.num_heads) * p.head_dim || p.max_seq_len <= 0) {
    return cudaErrorInvalidValue;
  }
  const int num_splits = internal::SplitKvNumSplits(p.max_seq_len);
  const size_t needed =
      internal::SplitKvWorkspaceBytes(p.num_tokens, p.num_heads, p.head_dim, p.max_seq_len);
  if (p.workspace_bytes < needed) return cudaErrorInvalidValue;

  const int group = p.num_heads / p.num_kv_heads;
  const int heads_per_pass = group <= 1 ? 1 : (group <= 2 ? 2 : (group <= 4 ? 4 : 8));
  const int passes = (group + heads_per_pass - 1) / heads_per_pass;
  if (num_splits > 65535 || static_cast<int64_t>(p.num_kv_heads) * passes > 65535) {
    return cudaErrorInvalidValue;
  }

  const size_t partials = static_cast<size_t>(p.num_tokens) * p.num_heads * num_splits;
  auto* ws = static_cast<char*>(p.workspace);
  SplitKvArgs args{};
  args.q = p.q;
  args.q_stride = p.q_stride;
  args.k_cache = p.k_cache;
  args.v_cache = p.v_cache;
  args.token_seq = p.token_seq;
  args.token_pos = p.token_pos;
  args.block_table_start = p.block_table_start;
  args.block_ids = p.block_ids;
  args.ws_ml = reinterpret_cast<float2*>(ws);
  args.ws_acc = reinterpret_cast<float*>(ws + internal::SplitKvAccOffset(partials));
  args.num_heads = p.num_heads;
  args.num_kv_heads = p.num_kv_heads;
  args.group = group;
  args.passes = passes;
  args.block_size = p.block_size;
  args.num_splits = num_splits;
  args.sliding_window = p.sliding_window;
  args.scale_log2 = p.scale * kLog2e;
  args.softcap_log2 = p.softcap * kLog2e;

  MergeArgs merge{};
  merge.out = p.out;
  merge.token_pos = p.token_pos;
  merge.ws_ml = args.ws_ml;
  merge.ws_acc = args.ws_acc;
  merge.num_tokens = p.num_tokens;
  merge.num_heads = p.num_heads;
  merge.num_splits = num_splits;
  merge.max_seq_len = p.max_seq_len;
  merge.sliding_window = p.sliding_window;

  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(num_splits),
                  static_cast<unsigned>(p.num_kv_heads * passes));
  switch (p.dtype) {
    case ElemType::kF32:
      return LaunchSplitKvType<float>(p.head_dim, args, merge, heads_per_pass, grid, stream);
    case ElemType::kF16:
      return LaunchSplitKvType<__half>(p.head_dim, args, merge, heads_per_pass, grid, stream);
    case ElemType::kBF16:
      return LaunchSplitKvType<__nv_bfloat16>(p.head_dim, args, merge, heads_per_pass, grid,
                                              stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t WriteKvCache(const CudaWriteKvParams& p, cudaStream_t stream) {
  if (p.dtype != ElemType::kF32 && p.dtype != ElemType::kF16 && p.dtype != ElemType::kBF16) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens < 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 || p.block_size <= 0 ||
      p.src_stride < static_cast<int64_t>(p.num_kv_heads) * p.head_dim) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.k == nullptr || p.v == nullptr || p.k_cache == nullptr || p.v_cache == nullptr ||
      p.slot_mapping == nullptr) {
    return cudaErrorInvalidValue;
  }
  WriteKvArgs a{};
  a.k = static_cast<const char*>(p.k);
  a.v = static_cast<const char*>(p.v);
  a.k_cache = static_cast<char*>(p.k_cache);
  a.v_cache = static_cast<char*>(p.v_cache);
  a.slot_mapping = p.slot_mapping;
  const auto esize = static_cast<int64_t>(ElemSize(p.dtype));
  a.src_stride_bytes = p.src_stride * esize;
  a.row_bytes = p.head_dim * esize;
  a.num_tokens = p.num_tokens;
  a.num_kv_heads = p.num_kv_heads;
  a.block_size = p.block_size;

  // The widest copy unit that divides every address and stride involved.
  const uint64_t bits =
      reinterpret_cast<uintptr_t>(p.k) | reinterpret_cast<uintptr_t>(p.v) |
      reinterpret_cast<uintptr_t>(p.k_cache) | reinterpret_cast<uintptr_t>(p.v_cache) |
      static_cast<uint64_t>(a.src_stride_bytes) | static_cast<uint64_t>(a.row_bytes);
  int width = 16;
  while (width > 1 && bits % width != 0) width /= 2;

  const int64_t total = a.num_tokens * a.num_kv_heads * (a.row_bytes / width);
  constexpr int kBlock = 256;
  const int64_t blocks = (total + kBlock - 1) / kBlock;
  const auto grid =
      static_cast<unsigned>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20));
  switch (width) {
    case 16:
      WriteKvKernel<16><<<grid, kBlock, 0, stream>>>(a);
      break;
    case 8:
      WriteKvKernel<8><<<grid, kBlock, 0, stream>>>(a);
      break;
    case 4:
      WriteKvKernel<4><<<grid, kBlock, 0, stream>>>(a);
      break;
    case 2:
      WriteKvKernel<2><<<grid, kBlock, 0, stream>>>(a);
      break;
    default:
      WriteKvKernel<1><<<grid, kBlock, 0, stream>>>(a);
      break;
  }
  return cudaGetLastError();
}

}  // namespace kvserve::kernels::cuda
