// Safetensors checkpoints: memory-mapped, single file or sharded through
// model.safetensors.index.json. Every failure (missing file, truncated file,
// bad header, offsets out of range, unknown dtype, missing tensor, wrong shape)
// is a Status whose message names the file and, where there is one, the tensor.
//
// Ownership: the checkpoint owns its mappings; TensorInfo::data points into
// them and lives as long as the checkpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvserve::engine {

enum class DType { kF32, kF16, kBF16 };
const char* DTypeName(DType dtype);

struct TensorInfo {
  std::string name;
  std::string file;  // path of the shard that holds it
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t num_bytes = 0;
};

class SafetensorsCheckpoint {
 public:
  // `path` is a directory holding model.safetensors.index.json or
  // model.safetensors (the index wins), or the path of one .safetensors file.
  static absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& path);

  virtual ~SafetensorsCheckpoint() = default;

  // NotFound naming the tensor and where it was looked for.
  virtual absl::StatusOr<const TensorInfo*> Find(std::string_view name) const = 0;
  virtual bool Contains(std::string_view name) const = 0;
  virtual std::vector<std::string> TensorNames() const = 0;

  // Converts the tensor to fp32 into out (product(expected_shape) floats) after
  // checking its shape equals expected_shape.
  absl::Status ReadF32(std::string_view name, std::span<const int64_t> expected_shape,
                       float* out) const;
};

}  // namespace kvserve::engine
