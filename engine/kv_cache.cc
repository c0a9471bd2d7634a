#include "engine/kv_cache.h"

#include <algorithm>

namespace kvserve::engine {

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape) {
  const size_t floats = static_cast<size_t>(shape.num_blocks * shape.floats_per_block());
  k_.reserve(shape.num_layers);
  v_.reserve(shape.num_layers);
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    k_.emplace_back(floats);
    v_.emplace_back(floats);
  }
}

void KvCache::FillBlocks(const std::vector<int32_t>& block_ids, float value) {
  const int64_t per_block = shape_.floats_per_block();
  for (int64_t l = 0; l < shape_.num_layers; ++l) {
    for (int32_t b : block_ids) {
      std::fill_n(k_[l].data() + b * per_block, per_block, value);
      std::fill_n(v_[l].data() + b * per_block, per_block, value);
    }
  }
}

}  // namespace kvserve::engine
