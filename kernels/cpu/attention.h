// Paged attention over a block-structured KV cache: one kernel for prefill,
// chunked prefill and decode.
//
// KV layout of one layer (documented in engine/kv_cache.h):
//   cache[block][kv_head][offset_in_block][head_dim]
// Key j of a sequence lives in block block_ids[block_table_start[s] + j / block_size]
// at offset j % block_size.
//
// Contract: the query token at absolute position p of sequence s attends to keys
// lo..p of s (causal), lo = 0, or max(0, p - sliding_window + 1) with a window.
// Those keys must already be written (WriteKvCache before this call for the
// step's own tokens). No slot outside them is read: NaN elsewhere is harmless.
//
// Batch invariance: keys are reduced in tiles of kAttentionKeyTile aligned to
// absolute position 0 with an online softmax, in increasing tile order within
// each partition of kAttentionPartitionKeys, the partitions folded in
// increasing order, so a query's output depends only on its own q and keys,
// never on chunking, on other sequences or on thread count. Threads take
// whole GQA groups (one kv head's query heads of one token); when a batch
// has too few of them for the threads, each group's partitions of keys
// (kAttentionPartitionKeys) are spread over the threads and folded in order
// afterwards.
#pragma once

#include <cstdint>

#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::kernels {

inline constexpr int kAttentionKeyTile = 32;
// Keys are also cut into partitions of this many, aligned to absolute
// position 0 (whole tiles): each partition's softmax state starts from
// nothing and is folded into the head's result in increasing order, so a
// pass of few heads can be split across threads by partition without
// changing a bit (PagedAttention).
inline constexpr int kAttentionPartitionKeys = 1024;

struct PagedAttentionParams {
  const float* q = nullptr;  // [num_tokens, num_heads, head_dim], row stride q_stride
  int64_t q_stride = 0;      // floats between consecutive tokens
  float* out = nullptr;      // [num_tokens, num_heads, head_dim], contiguous
  // The layer's K/V storage in kv_dtype's row format (kernels/cpu/kv_quant.h):
  // fp32 values for kFloat32, else the packed bytes behind this pointer.
  const float* k_cache = nullptr;
  const float* v_cache = nullptr;
  KvDtype kv_dtype = KvDtype::kFloat32;
  // Scaled formats: one fp32 scale per cache row (block, kv_head, offset).
  const float* k_scales = nullptr;
  const float* v_scales = nullptr;
  int num_tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;  // num_heads % num_kv_heads == 0 (GQA / MQA)
  int head_dim = 0;
  int block_size = 0;
  const int32_t* token_seq = nullptr;          // [num_tokens] sequence index
  const int32_t* token_pos = nullptr;          // [num_tokens] absolute position
  const int32_t* block_table_start = nullptr;  // [num_seqs + 1], CSR into block_ids
  const int32_t* block_ids = nullptr;
  float scale = 1.0f;      // usually 1 / sqrt(head_dim)
  int sliding_window = 0;  // 0: unlimited (per call: a model may mix layers)
  // 0: none. Else each score s = scale * q.k becomes softcap * tanh(s / softcap)
  // before the softmax (Gemma 2's attn_logit_softcapping), per key, so it
  // keeps the reduction order.
  float softcap = 0.0f;
};

// Runs on ActiveIsa(); pool == nullptr runs on the calling thread alone.
// Results are bit-identical across batch composition, chunking and thread
// count for a given ISA path; the paths differ from each other in the last
// bits. Scalar and AVX2 (vectorised exp, 8-lane dot products) attend head
// after head; AVX-512 (head_dim a multiple of 16, else the AVX2 path) attends
// all query heads of a kv head per key row, 16-lane dot products.
//
// The query heads of one kv head are attended in one pass: each key row
// loaded (or decoded) serves them all. Whole tokens of one sequence at
// consecutive positions (a prefill chunk's) in one thread's range share the
// pass too, up to 16 heads; a head's operations are those of a pass of its
// token alone, whatever it shares.
//
// Other formats than fp32 (scalar path): each key tile's rows are decoded
// into a per-thread fp32 tile (2 x 32 rows) and attended as fp32 rows are;
// a row decodes the same wherever it is read, so the invariance above
// holds. On AVX-512, bf16 and fp16 rows are read in place instead, each
// value widened in registers exactly as the decoder would: the same
// results, bit for bit. fp8 rows on AVX-512, and every format on AVX2 (head
// dim a multiple of 8; int4 and fp4 as integer codes, below), are read in
// place too, a row's values widened exactly before its scale, which
// multiplies the key's score and the value's weight instead of each value.
//
// Integer codes (int8, int4, fp4 e2m1 with AVX-512 VNNI; int4 and fp4 on
// AVX2; head_dim a multiple of 64 up to 256: UsesIntegerCodeAttention): no
// fp32 tile. Each (token, head)'s q is rounded once to int8 digits
// (QuantizeQueryInt8): two for int8 rows (q to 1/32512 of its largest
// value, far below the rows' own 1/254), one for the 4-bit formats (whose
// step is 16 times int8's; llama.cpp rounds q to int8 for its 8-bit K
// likewise). A score is then an exact integer dot product of codes (AVX-512
// VNNI vpdpbusd; AVX2 vpmaddubsw) times q's and the key row's scales. p.v is
// an exact integer sum too: per tile and head, each softmax weight times
// its V row's scale is rounded to a multiple of the tile's largest /
// CodeWeightSteps(): int16 weights, 32767 steps (vpdpwssd; AVX2 vpmaddwd),
// an error below 1/65534 of that largest weight against the int8 rows' own
// 1/254 of a row; uint8 weights, 255 steps, for 4-bit rows on AVX-512 VNNI
// (vpdpbusd, four keys per instruction), 1/510 against int4's own 1/14.
// These two roundings are the only approximations added; each depends on
// one (token, head) and one tile, so the invariance above holds.
void PagedAttention(const PagedAttentionParams& p, ThreadPool* pool);

// True when PagedAttention takes the integer-code path above for rows of
// `dtype` and `head_dim` on ActiveIsa(): int8, int4 and fp4 on AVX-512 with
// VNNI and BW; int4 and fp4 on AVX2 (without VNNI an integer dot product of
// int8 rows measured slower than their fp32 one).
bool UsesIntegerCodeAttention(KvDtype dtype, int head_dim);

// On that path, the number of steps of the tile's largest weight x V scale
// that each such product is rounded to (on ActiveIsa(); see above).
int CodeWeightSteps(KvDtype dtype);

// True when PagedAttention reads fp8 e4m3 rows of `head_dim` with bf16 dot
// products on ActiveIsa(): AVX-512 with BW, VBMI and BF16, head_dim a
// multiple of 16 up to 256. The rows are decoded exactly (every e4m3 value
// is a bf16 value); q and each softmax weight times its V row's scale are
// rounded to bf16 (to nearest even), 2^-8 of each at most against e4m3's
// own 2^-4. Both roundings depend on one (token, head) and one tile, so the
// invariance above holds.
bool UsesBf16DotFp8Attention(KvDtype dtype, int head_dim);

// The query rounding of that path, in fp32: x = q[d] * (127 / max|q|),
// q8[d] = x rounded to nearest even; with q8_low, also
// q8_low[d] = (x - q8[d]) * 256 rounded likewise, clamped to [-127, 127],
// so q[d] ~ scale * (q8[d] + q8_low[d] / 256). Returns the scale
// max|q| / 127 (0 for a zero q; NaN when q holds a NaN or an infinity, and
// then the digits are unspecified).
float QuantizeQueryInt8(const float* q, int dim, int8_t* q8, int8_t* q8_low = nullptr);

struct WriteKvParams {
  const float* k = nullptr;  // [num_tokens, num_kv_heads, head_dim], row stride src_stride
  const float* v = nullptr;
  int64_t src_stride = 0;
  float* k_cache = nullptr;  // as PagedAttentionParams::k_cache
  float* v_cache = nullptr;
  KvDtype kv_dtype = KvDtype::kFloat32;
  float* k_scales = nullptr;  // scaled formats: one per cache row
  float* v_scales = nullptr;
  const int64_t* slot_mapping = nullptr;  // [num_tokens]: block * block_size + offset; < 0: skip
  int num_tokens = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
};

// Writes each new token's K and V into its slot, encoded per (token, kv head)
// row: a row's bytes and scale depend on that row alone.
void WriteKvCache(const WriteKvParams& p);

}  // namespace kvserve::kernels
