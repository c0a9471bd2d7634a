// Paged attention on the GPU: the contract of kernels/cpu/attention.h (same
// KV layout, same page table, same causal rule, same sliding window) for
// fp32, fp16 and bf16 storage, with fp32 arithmetic.
//
// KV layout of one layer (engine/kv_cache.h):
//   cache[block][kv_head][offset_in_block][head_dim]
// Key j of sequence s lives in block block_ids[block_table_start[s] + j / block_size]
// at offset j % block_size. Query token t (sequence token_seq[t], absolute
// position token_pos[t]) attends to keys lo..token_pos[t] of its sequence,
// lo = 0 or max(0, pos - sliding_window + 1). No other slot is read.
//
// Two kernels behind one entry point:
//  * split-KV ("flash-decoding"): one CTA per (token, kv head, split of
//    kSplitKeys keys aligned to absolute position 0); the CTA computes every
//    query head of its GQA group, so each K/V tile is read once per group.
//    Partial (max, sum, acc) go to the workspace and a merge kernel combines
//    the splits of a token in increasing split order. Used for decode tokens,
//    and for every token in batch-invariant mode. On CUDA cores, except for
//    the scaled KV formats at head dims 64 and 128, which run it on tensor
//    cores (paged_attention_split_kv_mma.cuh).
//  * prefill (FlashAttention-2 style, tensor cores via mma.sync, fp16/bf16
//    activations only; a KV cache in another format than theirs (the other
//    16-bit type, fp8/int8/int4/fp4) is decoded by the tile loader, through
//    registers, into the shared memory tiles in the activations' type): one CTA per (kv head,
//    sequence, tile of 128 rows), a row being one (token, query head) pair of the GQA group, so K/V
//    tiles are loaded once per group (64 rows for head dim 256); online softmax over 64-key tiles
//    of the sequence's pages, double-buffered with cp.async; used for every token of a call in
//    which some query chunk is longer than one token.
//
// Batch invariance: in the split-KV kernel a token's result depends only on
// its own q and keys (the splits are fixed by absolute position and merged in
// a fixed order), never on the batch, the chunking or the number of CTAs.
// With batch_invariant = true every token goes through it, so a sequence's
// output is identical however its prompt was chunked; the cost is that
// prefill runs without tensor cores (measured by bench/cuda/e2e_decode_bench.cc).
#pragma once

#include <optional>

#include "kernels/cpu/kv_quant.h"
#include "kernels/cuda/cuda_types.h"

namespace kvserve::kernels::cuda {

// KV cache formats on the GPU: the rows of kernels/cpu/kv_quant.h, bit for
// bit (the CPU encoder is the reference; kernels/cuda/kv_codec.cuh mirrors
// it), in the block layout of engine/kv_cache.h with the fp32 per-row scales
// of the scaled formats in separate arrays. A call's `kv_dtype` names the
// format; nullopt (the default) stores the activations' dtype, the cache the
// backend had before the formats existed ("auto" on CUDA: bf16 for a bf16
// model, where the CPU's auto is fp32).
inline KvDtype KvDtypeOf(ElemType t) {
  return t == ElemType::kF32 ? KvDtype::kFloat32
                             : (t == ElemType::kF16 ? KvDtype::kFloat16 : KvDtype::kBfloat16);
}
inline KvDtype ResolveKvDtype(ElemType t, std::optional<KvDtype> kv) {
  return kv.value_or(KvDtypeOf(t));
}

// Keys per split in the split-KV kernel (a multiple of every block size
// 1..64 is not required: splits are in key positions, pages are looked up
// per key).
inline constexpr int kSplitKeys = 512;

struct CudaPagedAttentionParams {
  ElemType dtype = ElemType::kBF16;  // of q, out, k_cache and v_cache
  const void* q = nullptr;           // [num_tokens, num_heads, head_dim], token stride q_stride
  int64_t q_stride = 0;              // elements between consecutive tokens
  void* out = nullptr;               // [num_tokens, num_heads, head_dim], contiguous
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  // Cache format (see above) and, for the scaled ones (fp8_e4m3, int8, int4,
  // fp4_e2m1), the fp32 scale of every row: [num_blocks][num_kv_heads][block_size].
  std::optional<KvDtype> kv_dtype;
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  int num_tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  // num_heads % num_kv_heads == 0
  int head_dim = 0;      // 16, 32, 64, 80, 96, 128 or 256 (prefill: 64..256)
  int block_size = 0;    // 1 .. 64
  int num_seqs = 0;
  const int32_t* token_seq = nullptr;          // [num_tokens]
  const int32_t* token_pos = nullptr;          // [num_tokens]
  const int32_t* query_start = nullptr;        // [num_seqs + 1]: tokens of s are contiguous
  const int32_t* block_table_start = nullptr;  // [num_seqs + 1], CSR into block_ids
  const int32_t* block_ids = nullptr;
  // Host-side bounds for grid sizing (exact values or upper bounds).
  int max_query_len = 0;  // longest query chunk of any sequence in this call
  int max_seq_len = 0;    // largest token_pos + 1 of any token
  float scale = 1.0f;
  int sliding_window = 0;  // 0: unlimited
  // Attention logit soft-capping (Gemma 2): score = tanh(score / softcap) *
  // softcap after the scale, before the mask and softmax; 0: none.
  float softcap = 0.0f;
  bool batch_invariant = false;
  // Scratch for split-KV partials; at least PagedAttentionWorkspaceBytes().
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The dispatcher's rule: whether PagedAttention sends a call with these
// properties through split-KV (every token) rather than the prefill kernel.
// Callers size the workspace with it (only split-KV uses one).
// An fp32 KV cache goes through split-KV too; the prefill kernel reads 16-bit
// rows and the scaled formats (decoded to the activations' type in its tile
// loader).
bool PagedAttentionUsesSplitKv(ElemType dtype, int head_dim, int max_query_len,
                               bool batch_invariant,
                               std::optional<KvDtype> kv_dtype = std::nullopt);

// Workspace bytes for a call with these bounds (0 is a valid answer).
size_t PagedAttentionWorkspaceBytes(int num_tokens, int num_heads, int head_dim, int max_seq_len);

// The entry point: decode tokens (query chunk of length 1) and, in
// batch-invariant mode, all tokens through split-KV; longer chunks through
// the prefill kernel (fp32 storage: split-KV, no tensor cores for fp32).
cudaError_t PagedAttention(const CudaPagedAttentionParams& p, cudaStream_t stream);

// The two kernels on their own (tests and benchmarks). PagedAttentionSplitKv
// handles any token; PagedAttentionPrefill needs fp16/bf16 and handles every
// token of every sequence (cudaErrorInvalidValue for fp32).
cudaError_t PagedAttentionSplitKv(const CudaPagedAttentionParams& p, cudaStream_t stream);
cudaError_t PagedAttentionPrefill(const CudaPagedAttentionParams& p, cudaStream_t stream);

namespace internal {
// Split-KV on CUDA cores for every format and head dim. PagedAttentionSplitKv
// runs the scaled formats (fp8_e4m3, int8, int4, fp4_e2m1) at head dims 64
// and 128 on tensor cores instead; tests and benchmarks compare the two.
cudaError_t PagedAttentionSplitKvCudaCores(const CudaPagedAttentionParams& p, cudaStream_t stream);
}  // namespace internal

struct CudaWriteKvParams {
  ElemType dtype = ElemType::kBF16;  // of k and v (and of the caches without kv_dtype)
  const void* k = nullptr;  // [num_tokens, num_kv_heads, head_dim], token stride src_stride
  const void* v = nullptr;
  int64_t src_stride = 0;  // elements
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  std::optional<KvDtype> kv_dtype;  // as CudaPagedAttentionParams::kv_dtype
  float* k_scales = nullptr;        // scaled formats: one fp32 per row
  float* v_scales = nullptr;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]: block * block_size + offset; < 0: skip
  int num_tokens = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
};

// Writes each new token's K and V into its slot: a byte copy (16-byte stores
// where the head dimension allows) when the cache has the activations'
// dtype; otherwise each (token, kv head) row is encoded as
// kernels::QuantizeKvRow encodes its fp32 widening (same bytes, same scale).
cudaError_t WriteKvCache(const CudaWriteKvParams& p, cudaStream_t stream);

}  // namespace kvserve::kernels::cuda
