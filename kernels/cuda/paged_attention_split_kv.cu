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
// The scaled formats at head dims 64 and 128 run step 1 on tensor cores
// instead (SplitKvMmaKernel, paged_attention_split_kv_mma.cuh: same grid,
// splits, workspace partials and merge). The rest of this comment is the
// CUDA-core kernel, SplitKvKernel.
//
// Inside a CTA (128 threads): a "row group" of kLanes lanes covers one K/V
// row (head_dim elements) with 16-byte loads, one or two chunks per lane
// (scaled KV formats: 8-byte (fp8, int8) or 4-byte (int4, fp4) chunks of 8
// elements, decoded in registers with the row's scale, read once per row
// and key by every lane of the row group; never a dequantized copy).
// Row group g takes the split's attended keys i = (it * kUnroll + u) *
// kGroups + g (i counted from the first attended key k0), so neighbouring
// row groups of a warp read neighbouring keys, which are contiguous rows
// when they share a block. The scaled formats' row scales are gathered into
// shared memory with the page table, once per CTA. Each row group runs its
// own online softmax over its keys; at the end the row groups are merged in
// increasing order.
//
// Batch invariance: every choice above (key -> row group assignment, the
// order of additions in the dot product, the butterfly reduction, the row
// group merge, the split merge) depends only on the token's position, the
// window, the dtype, the KV format, head_dim and the GQA group size (a row
// decodes to the same fp32 values wherever it is read), never on the batch, the
// grid, max_seq_len or the other heads of a pass. There is no single-split
// shortcut: every token goes through the merge kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/paged_attention_split_kv.cuh"
#include "kernels/cuda/paged_attention_split_kv_mma.cuh"

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

namespace split_kv {
#define KVSERVE_SPLIT_KV_INSTANTIATE(F)                                                       \
  template cudaError_t LaunchSplitKvFormat<F>(int, const SplitKvArgs&, const MergeArgs&, int, \
                                              dim3, cudaStream_t);
// The caches without scales; paged_attention_split_kv_quant.cu has the others.
KVSERVE_SPLIT_KV_INSTANTIATE(KvDtype::kFloat32)
KVSERVE_SPLIT_KV_INSTANTIATE(KvDtype::kBfloat16)
KVSERVE_SPLIT_KV_INSTANTIATE(KvDtype::kFloat16)
#undef KVSERVE_SPLIT_KV_INSTANTIATE
}  // namespace split_kv

namespace {

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

namespace {

// allow_tensor_cores: the scaled formats at the head dims the tensor-core
// kernel has (MmaSplitKvSupports) go to it; false keeps every call on
// SplitKvKernel (internal::PagedAttentionSplitKvCudaCores).
cudaError_t SplitKv(const CudaPagedAttentionParams& p, bool allow_tensor_cores,
                    cudaStream_t stream) {
  using namespace split_kv;  // NOLINT(build/namespaces): the kernels' own helpers
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
  const KvDtype format = ResolveKvDtype(p.dtype, p.kv_dtype);
  if (KvHasScale(format) && (p.k_scales == nullptr || p.v_scales == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const int num_splits = internal::SplitKvNumSplits(p.max_seq_len);
  const size_t needed =
      internal::SplitKvWorkspaceBytes(p.num_tokens, p.num_heads, p.head_dim, p.max_seq_len);
  if (p.workspace_bytes < needed) return cudaErrorInvalidValue;

  const bool tensor_cores = allow_tensor_cores && MmaSplitKvSupports(format, p.head_dim);
  const int group = p.num_heads / p.num_kv_heads;
  const int heads_per_pass =
      tensor_cores ? kMmaHeads : (group <= 1 ? 1 : (group <= 2 ? 2 : (group <= 4 ? 4 : 8)));
  const int passes = (group + heads_per_pass - 1) / heads_per_pass;
  if (num_splits > 65535 || static_cast<int64_t>(p.num_kv_heads) * passes > 65535) {
    return cudaErrorInvalidValue;
  }

  const size_t partials = static_cast<size_t>(p.num_tokens) * p.num_heads * num_splits;
  auto* ws = static_cast<char*>(p.workspace);
  SplitKvArgs args{};
  args.q = p.q;
  args.q_type = p.dtype;
  args.q_stride = p.q_stride;
  args.k_cache = p.k_cache;
  args.v_cache = p.v_cache;
  args.k_scales = p.k_scales;
  args.v_scales = p.v_scales;
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
  if (tensor_cores) return LaunchSplitKvMmaFormat(format, p.head_dim, args, merge, grid, stream);
  switch (format) {
#define KVSERVE_SPLIT_KV_CASE(F) \
  case F:                        \
    return LaunchSplitKvFormat<F>(p.head_dim, args, merge, heads_per_pass, grid, stream);
    KVSERVE_SPLIT_KV_FORMATS(KVSERVE_SPLIT_KV_CASE)
#undef KVSERVE_SPLIT_KV_CASE
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t PagedAttentionSplitKv(const CudaPagedAttentionParams& p, cudaStream_t stream) {
  return SplitKv(p, /*allow_tensor_cores=*/true, stream);
}

namespace internal {
cudaError_t PagedAttentionSplitKvCudaCores(const CudaPagedAttentionParams& p, cudaStream_t stream) {
  return SplitKv(p, /*allow_tensor_cores=*/false, stream);
}
}  // namespace internal

namespace internal {
// kv_write.cu: the encoding write for a cache format other than p.dtype.
cudaError_t WriteKvCacheEncoded(const CudaWriteKvParams& p, KvDtype format, cudaStream_t stream);
}  // namespace internal

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
  const KvDtype format = ResolveKvDtype(p.dtype, p.kv_dtype);
  if (format != KvDtypeOf(p.dtype)) return internal::WriteKvCacheEncoded(p, format, stream);
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
