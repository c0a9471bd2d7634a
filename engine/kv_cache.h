// KvCache: the physical K/V storage of every layer, in fixed-size blocks.
//
// Layout (the one place it is defined; kernels/cpu/attention.h relies on it):
//
//   k[layer], v[layer]:  [num_blocks][num_kv_heads][block_size][head_dim]  fp32
//
// so one (block, kv_head) is a contiguous block_size x head_dim tile, and the
// token at slot s = block * block_size + offset has, for kv head h, its key at
//   ((block * num_kv_heads + h) * block_size + offset) * head_dim.
//
// Ownership: the cache owns its storage. Which sequence owns which block is
// not known here; the scheduler's block pool decides that and passes block
// tables and slots in each StepInput. Block 0 is the scheduler's null block:
// it is storage like any other here.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/aligned_buffer.h"

namespace kvserve::engine {

struct KvCacheShape {
  int64_t num_layers = 0;
  int64_t num_blocks = 0;
  int64_t num_kv_heads = 0;
  int64_t block_size = 0;
  int64_t head_dim = 0;

  int64_t floats_per_block() const { return num_kv_heads * block_size * head_dim; }
  // K and V, all layers.
  int64_t bytes_per_block() const {
    return 2 * num_layers * floats_per_block() * static_cast<int64_t>(sizeof(float));
  }
};

class KvCache {
 public:
  explicit KvCache(const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  float* k(int64_t layer) { return k_[layer].data(); }
  float* v(int64_t layer) { return v_[layer].data(); }
  const float* k(int64_t layer) const { return k_[layer].data(); }
  const float* v(int64_t layer) const { return v_[layer].data(); }

  // Fills every slot of the given blocks (all layers, K and V) with `value`.
  // Tests use quiet NaN to prove kernels never read blocks they do not own.
  void FillBlocks(const std::vector<int32_t>& block_ids, float value);

 private:
  KvCacheShape shape_;
  std::vector<kernels::AlignedBuffer> k_;
  std::vector<kernels::AlignedBuffer> v_;
};

}  // namespace kvserve::engine
