// Header parsing of one safetensors file. Private to engine/loader/.
//
// Layout (all little-endian):
//
//   [0, 8)          u64 N: header length
//   [8, 8 + N)      JSON {"name": {"dtype", "shape", "data_offsets": [b, e]}, ...,
//                         "__metadata__": {...}} (may be padded with spaces)
//   [8 + N, size)   data section; tensor bytes are [8 + N + b, 8 + N + e)
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/loader/mapped_file.h"
#include "engine/loader/safetensors.h"

namespace kvserve::engine {

struct RawTensor {
  std::string name;
  std::string dtype_name;      // as the header spells it ("F16", "I64", ...)
  std::optional<DType> dtype;  // nullopt: a dtype kvserve does not read
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping
  size_t num_bytes = 0;
};

// Validates the header against the file: header length within the file, JSON
// object, well-formed entries, offsets inside the data section, byte counts
// equal to product(shape) * element size (for dtypes of known size), no two
// tensors overlapping. Tensors of unsupported dtypes are returned with
// dtype == nullopt, so a checkpoint fails only when one of them is read.
absl::StatusOr<std::vector<RawTensor>> ParseSafetensorsHeader(const MappedFile& file);

}  // namespace kvserve::engine
