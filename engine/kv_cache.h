// KvCache: the physical K/V storage of every layer, in fixed-size blocks.
//
// Layout (the one place it is defined; kernels/cpu/attention.h relies on it).
// A "row" is one token's K (or V) for one kv head: head_dim values.
//
//   k[layer], v[layer]:  [num_blocks][num_kv_heads][block_size] rows,
//                        each row KvRowBytes(dtype, head_dim) bytes
//   k_scales[layer], v_scales[layer] (fp8_e4m3, int8, int4, fp4_e2m1 only):
//                        [num_blocks][num_kv_heads][block_size] fp32
//
// so one (block, kv_head) is a contiguous block_size-row tile, and the token
// at slot s = block * block_size + offset has, for kv head h, the row index
//   r = (block * num_kv_heads + h) * block_size + offset,
// its data at byte r * row_bytes and its scale (if any) at k_scales[r].
//
// Row formats (kernels/cpu/kv_quant.h has the exact encodings), bytes per
// row and per-row scale, head_dim = d:
//
//   auto (fp32)  4d                      none      (today's cache, unchanged)
//   bfloat16     2d                      none
//   float16      2d                      none
//   fp8_e4m3     d  (e4m3fn bytes)        fp32 max|row| / 448
//   int8         d  (int8, [-127, 127])   fp32 max|row| / 127
//   int4         ceil(d/2), 2 per byte    fp32 max|row| / 8, codes [-8, 7]
//   fp4_e2m1     ceil(d/2), 2 per byte    fp32 max|row| / 6
//
// int8, int4 and fp4_e2m1 hold each head's K and V rotated (kernels::KvRowsRotated):
// a row is the encoding of H k (H v), H the normalized Walsh-Hadamard
// transform over blocks of kernels::HadamardBlock(head_dim) elements
// (kernels::RotateHeads). Real models' K and V carry outlier channels that
// would set a row's scale alone; rotated, every element shares their
// magnitude. The decoder (engine/decoder.h) rotates q the same way, so the
// scores are q . k, and rotates attention's output back (H is its own
// inverse); attention itself never sees the rotation.
// Scales are fp32 (not fp16) so that no row's range can underflow or
// overflow its scale and the scale is the one the encoder divided by; at
// head_dim 64 they cost 4 bytes against 64 (int8) or 32 (int4) of data.
// Rows are encoded once, when written (WriteKvCache), and decoded tile by
// tile inside PagedAttention; a row's encoding depends on that row alone.
//
// Ownership: the cache owns its storage. Which sequence owns which block is
// not known here; the scheduler's block pool decides that and passes block
// tables and slots in each StepInput. Block 0 is the scheduler's null block:
// it is storage like any other here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::engine {

using KvCacheDtype = kernels::KvDtype;

// The --kv_cache_dtype spellings, and InvalidArgument listing them.
absl::StatusOr<KvCacheDtype> ParseKvCacheDtype(const std::string& name);
std::string KvCacheDtypeName(KvCacheDtype dtype);
std::string KvCacheDtypeChoices();  // "auto, bfloat16, ..., fp4_e2m1"

struct KvCacheShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;
  int64_t num_kv_heads = 0;
  int64_t block_size = 0;
  int64_t head_dim = 0;
  KvCacheDtype dtype = KvCacheDtype::kFloat32;

  int64_t rows_per_block() const { return num_kv_heads * block_size; }
  int64_t row_bytes() const { return kernels::KvRowBytes(dtype, head_dim); }
  // Data and scales of one row.
  int64_t bytes_per_row() const {
    return row_bytes() + (kernels::KvHasScale(dtype) ? int64_t{sizeof(float)} : 0);
  }
  // K and V, all layers, scales included.
  int64_t bytes_per_block() const { return 2 * num_layers * rows_per_block() * bytes_per_row(); }
};

class KvCache {
 public:
  explicit KvCache(const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  // The layer's rows: fp32 values for the fp32 format, else packed bytes
  // (as kernels::PagedAttentionParams::k_cache takes them).
  float* k(int64_t layer) { return k_[layer].data(); }
  float* v(int64_t layer) { return v_[layer].data(); }
  const float* k(int64_t layer) const { return k_[layer].data(); }
  const float* v(int64_t layer) const { return v_[layer].data(); }
  // Per-row scales; nullptr for the formats without.
  float* k_scales(int64_t layer) { return has_scales() ? k_scales_[layer].data() : nullptr; }
  float* v_scales(int64_t layer) { return has_scales() ? v_scales_[layer].data() : nullptr; }

  // Fills every row of the given blocks (all layers, K and V) with rows of
  // `value`, encoded in the cache's format (NaN stays NaN when decoded).
  // Tests use quiet NaN to prove kernels never read blocks they do not own.
  void FillBlocks(const std::vector<int32_t>& block_ids, float value);

 private:
  bool has_scales() const { return kernels::KvHasScale(shape_.dtype); }

  KvCacheShape shape_;
  std::vector<kernels::AlignedBuffer> k_, v_, k_scales_, v_scales_;
};

}  // namespace kvserve::engine
