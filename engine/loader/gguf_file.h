// GgufFile: one GGUF file (llama.cpp's format), parsed and checked against
// its bytes before anything is handed out. Layout (little-endian; GGUF v2 and
// v3 share it):
//
//   u32 magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x  { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type
//                    | u64 offset }
//   padding to `general.alignment` (u32, a power of two; 32 when absent)
//   data section: tensor i's bytes at data_start + offset_i
//
//   string = u64 length | bytes (not NUL-terminated)
//   value  = a scalar of the type, a string, or
//            array = u32 element_type | u64 count | count elements
//
// A GGUF is untrusted input. Every length, count and offset is checked
// against the bytes left before it is used (a count can never make the
// parser reserve more than the file could hold), tensor offsets are aligned,
// inside the file and non-overlapping, and a tensor's byte size is computed
// from its shape and type with overflow checks. A violation is an
// InvalidArgument naming the file and the field (key or tensor); nothing is
// read out of bounds.
//
// Ownership: a GgufFile opened from a path owns its mapping; one parsed from
// a buffer borrows it (the buffer must outlive the object). Every
// string_view and data pointer handed out points into those bytes.
// Thread safety: const methods may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/loader/gguf_types.h"
#include "engine/loader/mapped_file.h"

namespace kvserve::engine {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* GgufValueTypeName(GgufValueType type);

// One metadata value. Scalars: exactly one of the scalar fields is set, by
// `type`. Arrays: `element_type` and `count`; numeric and bool elements stay
// in the file (`raw`, count * element size bytes, any alignment), strings
// are in `strings`, nested arrays in `arrays`.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  uint64_t uint_value = 0;  // kUint*, kBool
  int64_t int_value = 0;    // kInt*
  double float_value = 0;   // kFloat*
  std::string_view string_value;
  GgufValueType element_type = GgufValueType::kUint8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;
  std::vector<std::string_view> strings;
  std::vector<GgufValue> arrays;
};

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  // ne[0] first: ne[0] is the row length (contiguous), as ggml orders them;
  // the row-major shape transformers reports is the reverse.
  std::vector<int64_t> ne;
  int64_t num_elements = 0;
  uint64_t offset = 0;  // from the data section's start
  const uint8_t* data = nullptr;
  size_t num_bytes = 0;
};

class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // `source` names the bytes in error messages.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const uint8_t* data, size_t size,
                                                         std::string source);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::string& source() const { return source_; }
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

  const GgufValue* Find(std::string_view key) const;
  const GgufTensor* FindTensor(std::string_view name) const;

  // Typed reads of a metadata key. NotFound when absent; InvalidArgument
  // naming the key when its type does not fit (GetUint accepts any integer
  // type holding a non-negative value; GetFloat any float or integer).
  absl::StatusOr<uint64_t> GetUint(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::string_view> GetString(std::string_view key) const;
  absl::StatusOr<std::span<const std::string_view>> GetStringArray(std::string_view key) const;
  // Numeric arrays, each element converted (an int element outside int32 or a
  // non-integer type is InvalidArgument naming the key).
  absl::StatusOr<std::vector<float>> GetFloatArray(std::string_view key) const;
  absl::StatusOr<std::vector<int32_t>> GetInt32Array(std::string_view key) const;

 private:
  GgufFile() = default;
  absl::Status ParseAll(const uint8_t* data, size_t size);

  std::unique_ptr<MappedFile> mapping_;
  std::string source_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace kvserve::engine
