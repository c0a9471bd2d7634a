// Safetensors checkpoints: memory-mapped, single file or sharded through
// model.safetensors.index.json. Every failure (missing file, truncated file,
// bad header, offsets out of range, unknown dtype, missing tensor, wrong shape)
// is a Status whose message names the file and, where there is one, the tensor.
//
// Codes: NotFound for a missing file or tensor; InvalidArgument for a malformed
// file (truncated, header length past the end, bad JSON, offsets outside the
// data section or not matching shape x dtype, overlapping tensors, a tensor
// stored in two shards, an index entry whose shard lacks the tensor).
//
// Dtypes: F32, F16 and BF16 are read (converted exactly to fp32). A tensor of
// any other dtype (I64, F64, F8_*, ...) does not fail Open, so an unused buffer
// cannot make a checkpoint unloadable: Contains() and TensorNames() list it,
// and Find() / ReadF32() on it return InvalidArgument naming tensor, dtype and
// file.
//
// Ownership: the checkpoint owns its mappings (mmap, read-only, MAP_PRIVATE);
// TensorInfo::data points into them and lives as long as the checkpoint.
// Thread safety: const methods may be called concurrently.
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
  // model.safetensors (the index wins), the path of an index (*.json), or the
  // path of one .safetensors file. With an index, each shard is mapped once
  // and every tensor the index names must be in the shard it names.
  static absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& path);

  virtual ~SafetensorsCheckpoint() = default;

  // NotFound naming the tensor and where it was looked for (the file or the
  // index); InvalidArgument for a tensor of an unsupported dtype.
  virtual absl::StatusOr<const TensorInfo*> Find(std::string_view name) const = 0;
  virtual bool Contains(std::string_view name) const = 0;
  virtual std::vector<std::string> TensorNames() const = 0;
  // A hint that the caller is done with the tensor: the TensorInfo (and its
  // data) Find returned for it may be freed. A file checkpoint ignores it
  // (its mapping is paged in and out by the kernel); a generated one
  // (builtin models) frees the tensor, and regenerates it if found again.
  virtual void Release(std::string_view name) const { (void)name; }

  // Find, after checking the tensor's shape equals expected_shape
  // (InvalidArgument naming tensor, file and both shapes otherwise). The
  // caller reads TensorInfo::data in its own dtype (16-bit weights).
  absl::StatusOr<const TensorInfo*> FindWithShape(std::string_view name,
                                                  std::span<const int64_t> expected_shape) const;

  // Converts the tensor to fp32 into out (product(expected_shape) floats) after
  // checking its shape equals expected_shape (InvalidArgument naming tensor,
  // file and both shapes otherwise). Single-threaded, memory-bound.
  absl::Status ReadF32(std::string_view name, std::span<const int64_t> expected_shape,
                       float* out) const;
};

}  // namespace kvserve::engine
