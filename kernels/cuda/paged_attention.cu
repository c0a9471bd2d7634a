// The paged-attention entry point: picks the kernel for a call.
//
// Dispatch rule (one kernel per call, decided on the host from the params):
//   * batch_invariant, or fp32 storage, or max_query_len <= 1 (a decode-only
//     batch), or an fp32 KV cache: PagedAttentionSplitKv for every token. It handles any token, so
//     in batch-invariant mode a sequence's output does not depend on how its
//     prompt was chunked or what else is in the batch.
//   * head dims 16 and 32 (small test models): split-KV, which has them;
//     the prefill kernel does not.
//   * otherwise (fp16/bf16 activations, a 16-bit or scaled KV format (the
//     prefill tile loader decodes fp8/int8/int4/fp4 and the other 16-bit
//     type into its shared memory tiles), some query chunk longer than one
//     token):
//     PagedAttentionPrefill for every token of every sequence, length-1
//     chunks included. A mixed batch therefore runs on tensor cores, and its
//     decode tokens may differ in the last bits from a decode-only step; that
//     is the relaxation batch_invariant = false allows.
//
// The workspace is only used by the split-KV path; callers size it with
// PagedAttentionWorkspaceBytes for every call (it is checked on that path).
#include "kernels/cuda/paged_attention.h"

namespace kvserve::kernels::cuda {

namespace internal {
// Defined with the split-KV kernel, which owns the workspace layout
// (paged_attention_split_kv.cu).
size_t SplitKvWorkspaceBytes(int num_tokens, int num_heads, int head_dim, int max_seq_len);
}  // namespace internal

size_t PagedAttentionWorkspaceBytes(int num_tokens, int num_heads, int head_dim, int max_seq_len) {
  return internal::SplitKvWorkspaceBytes(num_tokens, num_heads, head_dim, max_seq_len);
}

namespace {
bool PrefillHeadDim(int d) { return d == 64 || d == 80 || d == 96 || d == 128 || d == 256; }
}  // namespace

bool PagedAttentionUsesSplitKv(ElemType dtype, int head_dim, int max_query_len,
                               bool batch_invariant, std::optional<KvDtype> kv_dtype) {
  return batch_invariant || dtype == ElemType::kF32 || max_query_len <= 1 ||
         !PrefillHeadDim(head_dim) || ResolveKvDtype(dtype, kv_dtype) == KvDtype::kFloat32;
}

cudaError_t PagedAttention(const CudaPagedAttentionParams& p, cudaStream_t stream) {
  const int d = p.head_dim;
  const bool head_dim_ok = PrefillHeadDim(d) || d == 16 || d == 32;
  if (!head_dim_ok || p.block_size < 1 || p.block_size > 64 || p.num_heads <= 0 ||
      p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0 || p.num_tokens < 0) {
    return cudaErrorInvalidValue;
  }
  if (p.dtype != ElemType::kF32 && p.dtype != ElemType::kF16 && p.dtype != ElemType::kBF16) {
    return cudaErrorInvalidValue;
  }
  return PagedAttentionUsesSplitKv(p.dtype, d, p.max_query_len, p.batch_invariant, p.kv_dtype)
             ? PagedAttentionSplitKv(p, stream)
             : PagedAttentionPrefill(p, stream);
}

}  // namespace kvserve::kernels::cuda
