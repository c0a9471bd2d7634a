#include "engine/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvserve::engine {

absl::StatusOr<KvCacheDtype> ParseKvCacheDtype(const std::string& name) {
  if (auto d = kernels::ParseKvDtype(name)) return *d;
  return absl::InvalidArgumentError(
      absl::StrCat("must be one of ", KvCacheDtypeChoices(), ", got \"", name, "\""));
}

std::string KvCacheDtypeName(KvCacheDtype dtype) {
  return std::string(kernels::KvDtypeName(dtype));
}

std::string KvCacheDtypeChoices() {
  std::string s;
  for (KvCacheDtype d : kernels::kAllKvDtypes) {
    absl::StrAppend(&s, s.empty() ? "" : ", ", KvCacheDtypeName(d));
  }
  return s;
}

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape) {
  const int64_t rows = shape.num_blocks * shape.rows_per_block();
  const size_t floats = static_cast<size_t>((rows * shape.row_bytes() + 3) / 4);
  for (int64_t l = 0; l < shape.num_layers; ++l) {
    k_.emplace_back(floats, kernels::AlignedBuffer::Pages::kHuge);
    v_.emplace_back(floats, kernels::AlignedBuffer::Pages::kHuge);
    if (has_scales()) {
      k_scales_.emplace_back(static_cast<size_t>(rows));
      v_scales_.emplace_back(static_cast<size_t>(rows));
    }
  }
}

void KvCache::FillBlocks(const std::vector<int32_t>& block_ids, float value) {
  const int64_t row_bytes = shape_.row_bytes();
  const int64_t rows = shape_.rows_per_block();
  const std::vector<float> values(shape_.head_dim, value);
  std::vector<uint8_t> row(row_bytes);
  const float scale = kernels::QuantizeKvRow(shape_.dtype, values.data(),
                                             static_cast<int>(shape_.head_dim), row.data());
  for (int64_t l = 0; l < shape_.num_layers; ++l) {
    for (int32_t b : block_ids) {
      for (int64_t r = b * rows; r < (b + 1) * rows; ++r) {
        std::memcpy(reinterpret_cast<uint8_t*>(k(l)) + r * row_bytes, row.data(), row_bytes);
        std::memcpy(reinterpret_cast<uint8_t*>(v(l)) + r * row_bytes, row.data(), row_bytes);
        if (has_scales()) k_scales_[l][r] = v_scales_[l][r] = scale;
      }
    }
  }
}

}  // namespace kvserve::engine
