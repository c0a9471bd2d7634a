#include "engine/loader/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvserve::engine {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 3;        // arrays of arrays of arrays
// A tensor larger than this is a broken file (and the arithmetic below stays
// far from overflow: elements * bytes per element < 2^63).
constexpr int64_t kMaxElements = int64_t{1} << 48;

// Bytes one element of a fixed-size type takes; 0 for string and array.
size_t ScalarSize(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

bool KnownValueType(uint32_t id) { return id <= static_cast<uint32_t>(GgufValueType::kFloat64); }

// A bounds-checked little-endian reader over [data, data + size). Every read
// fails (rather than reading past the end) when fewer bytes remain.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t position() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  bool Read(T* out) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(out, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  // A GGUF string: u64 length, then that many bytes, all inside the buffer.
  bool ReadString(std::string_view* out) {
    uint64_t length = 0;
    if (!Read(&length) || length > remaining()) return false;
    *out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), length);
    pos_ += length;
    return true;
  }
  // Skips `bytes` bytes, returning where they start.
  const uint8_t* Take(uint64_t bytes) {
    if (bytes > remaining()) return nullptr;
    const uint8_t* at = data_ + pos_;
    pos_ += bytes;
    return at;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

absl::Status Malformed(const std::string& source, const std::string& field,
                       const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": GGUF ", field, ": ", why));
}

absl::Status ReadScalar(Cursor& in, GgufValueType type, GgufValue* value) {
  bool ok = false;
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kBool: {
      uint8_t v;
      ok = in.Read(&v);
      value->uint_value = v;
      if (ok && type == GgufValueType::kBool && v > 1) {
        return absl::InvalidArgumentError(absl::StrCat("bool value ", v, " is neither 0 nor 1"));
      }
      break;
    }
    case GgufValueType::kInt8: {
      int8_t v;
      ok = in.Read(&v);
      value->int_value = v;
      break;
    }
    case GgufValueType::kUint16: {
      uint16_t v;
      ok = in.Read(&v);
      value->uint_value = v;
      break;
    }
    case GgufValueType::kInt16: {
      int16_t v;
      ok = in.Read(&v);
      value->int_value = v;
      break;
    }
    case GgufValueType::kUint32: {
      uint32_t v;
      ok = in.Read(&v);
      value->uint_value = v;
      break;
    }
    case GgufValueType::kInt32: {
      int32_t v;
      ok = in.Read(&v);
      value->int_value = v;
      break;
    }
    case GgufValueType::kUint64:
      ok = in.Read(&value->uint_value);
      break;
    case GgufValueType::kInt64:
      ok = in.Read(&value->int_value);
      break;
    case GgufValueType::kFloat32: {
      float v;
      ok = in.Read(&v);
      value->float_value = v;
      break;
    }
    case GgufValueType::kFloat64:
      ok = in.Read(&value->float_value);
      break;
    case GgufValueType::kString:
      ok = in.ReadString(&value->string_value);
      break;
    case GgufValueType::kArray:
      return absl::InternalError("ReadScalar on an array");
  }
  if (!ok) return absl::InvalidArgumentError("value runs past the end of the file");
  return absl::OkStatus();
}

absl::Status ReadValue(Cursor& in, GgufValueType type, int depth, GgufValue* value) {
  value->type = type;
  if (type != GgufValueType::kArray) return ReadScalar(in, type, value);
  if (depth >= kMaxArrayDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("arrays nested deeper than ", kMaxArrayDepth, " levels"));
  }
  uint32_t element_id = 0;
  if (!in.Read(&element_id) || !in.Read(&value->count)) {
    return absl::InvalidArgumentError("array header runs past the end of the file");
  }
  if (!KnownValueType(element_id)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown array element type ", element_id));
  }
  value->element_type = static_cast<GgufValueType>(element_id);
  if (const size_t size = ScalarSize(value->element_type); size > 0) {
    if (value->count > in.remaining() / size) {
      return absl::InvalidArgumentError(absl::StrCat("array of ", value->count, " ",
                                                     GgufValueTypeName(value->element_type),
                                                     " runs past the end of the file"));
    }
    value->raw = in.Take(value->count * size);
    if (value->element_type == GgufValueType::kBool) {
      for (uint64_t i = 0; i < value->count; ++i) {
        if (value->raw[i] > 1) return absl::InvalidArgumentError("bool element neither 0 nor 1");
      }
    }
    return absl::OkStatus();
  }
  // Strings take at least 8 bytes each, nested arrays 12: a count the rest of
  // the file cannot hold is refused before anything is reserved.
  const size_t min_size = value->element_type == GgufValueType::kString ? 8 : 12;
  if (value->count > in.remaining() / min_size) {
    return absl::InvalidArgumentError(absl::StrCat("array of ", value->count, " ",
                                                   GgufValueTypeName(value->element_type),
                                                   " cannot fit in the rest of the file"));
  }
  if (value->element_type == GgufValueType::kString) {
    value->strings.resize(value->count);
    for (uint64_t i = 0; i < value->count; ++i) {
      if (!in.ReadString(&value->strings[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat("string element ", i, " runs past the end of the file"));
      }
    }
    return absl::OkStatus();
  }
  value->arrays.resize(value->count);
  for (uint64_t i = 0; i < value->count; ++i) {
    KVSERVE_RETURN_IF_ERROR(ReadValue(in, GgufValueType::kArray, depth + 1, &value->arrays[i]));
  }
  return absl::OkStatus();
}

bool IsInteger(GgufValueType t) {
  return t == GgufValueType::kUint8 || t == GgufValueType::kInt8 || t == GgufValueType::kUint16 ||
         t == GgufValueType::kInt16 || t == GgufValueType::kUint32 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kUint64 || t == GgufValueType::kInt64;
}
bool IsSigned(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kInt64;
}

// Element i of a numeric array, as a signed integer or a double.
int64_t IntElement(const GgufValue& v, uint64_t i) {
  const uint8_t* p = v.raw + i * ScalarSize(v.element_type);
  switch (v.element_type) {
    case GgufValueType::kUint8:
      return *p;
    case GgufValueType::kInt8:
      return static_cast<int8_t>(*p);
    case GgufValueType::kUint16: {
      uint16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    case GgufValueType::kInt16: {
      int16_t x;
      std::memcpy(&x, p, 2);
      return x;
    }
    case GgufValueType::kUint32: {
      uint32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case GgufValueType::kInt32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case GgufValueType::kUint64: {
      uint64_t x;
      std::memcpy(&x, p, 8);
      return x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? std::numeric_limits<int64_t>::max()
                 : static_cast<int64_t>(x);
    }
    case GgufValueType::kInt64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return x;
    }
    default:
      return 0;
  }
}

}  // namespace

const char* GgufValueTypeName(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
      return "UINT8";
    case GgufValueType::kInt8:
      return "INT8";
    case GgufValueType::kUint16:
      return "UINT16";
    case GgufValueType::kInt16:
      return "INT16";
    case GgufValueType::kUint32:
      return "UINT32";
    case GgufValueType::kInt32:
      return "INT32";
    case GgufValueType::kFloat32:
      return "FLOAT32";
    case GgufValueType::kBool:
      return "BOOL";
    case GgufValueType::kString:
      return "STRING";
    case GgufValueType::kArray:
      return "ARRAY";
    case GgufValueType::kUint64:
      return "UINT64";
    case GgufValueType::kInt64:
      return "INT64";
    case GgufValueType::kFloat64:
      return "FLOAT64";
  }
  return "?";
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  KVSERVE_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapping, MappedFile::Open(path));
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->source_ = path;
  KVSERVE_RETURN_IF_ERROR(file->ParseAll(mapping->data(), mapping->size()));
  file->mapping_ = std::move(mapping);
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(const uint8_t* data, size_t size,
                                                          std::string source) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->source_ = std::move(source);
  KVSERVE_RETURN_IF_ERROR(file->ParseAll(data, size));
  return file;
}

absl::Status GgufFile::ParseAll(const uint8_t* data, size_t size) {
  Cursor in(data, size);
  uint32_t magic = 0;
  if (!in.Read(&magic) || magic != kMagic) {
    return Malformed(source_, "magic", "the file does not start with \"GGUF\"");
  }
  if (!in.Read(&version_)) return Malformed(source_, "version", "file ends in the header");
  if (version_ != 2 && version_ != 3) {
    const bool big_endian = version_ == 0x02000000 || version_ == 0x03000000;
    return Malformed(source_, "version",
                     big_endian ? std::string("big-endian files are not supported")
                                : absl::StrCat(version_, " is not supported (2 or 3)"));
  }
  uint64_t tensor_count = 0, kv_count = 0;
  if (!in.Read(&tensor_count)) return Malformed(source_, "tensor_count", "file ends in the header");
  if (!in.Read(&kv_count)) return Malformed(source_, "kv_count", "file ends in the header");
  // A key-value pair takes at least 12 bytes (key length, value type), a
  // tensor info at least 24 (name length, n_dims, type, offset).
  if (kv_count > in.remaining() / 12) {
    return Malformed(source_, "kv_count",
                     absl::StrCat(kv_count, " entries cannot fit in a file of ", size, " bytes"));
  }
  if (tensor_count > in.remaining() / 24) {
    return Malformed(
        source_, "tensor_count",
        absl::StrCat(tensor_count, " tensors cannot fit in a file of ", size, " bytes"));
  }
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string_view key;
    if (!in.ReadString(&key)) {
      return Malformed(source_, absl::StrCat("metadata key ", i), "runs past the end of the file");
    }
    const std::string field = absl::StrCat("metadata \"", std::string(key), "\"");
    uint32_t type_id = 0;
    if (!in.Read(&type_id)) return Malformed(source_, field, "file ends before its type");
    if (!KnownValueType(type_id)) {
      return Malformed(source_, field, absl::StrCat("unknown value type ", type_id));
    }
    GgufValue value;
    if (absl::Status s = ReadValue(in, static_cast<GgufValueType>(type_id), 0, &value); !s.ok()) {
      return Malformed(source_, field, std::string(s.message()));
    }
    if (!metadata_.emplace(std::string(key), std::move(value)).second) {
      return Malformed(source_, field, "the key appears twice");
    }
  }
  if (const GgufValue* a = Find("general.alignment"); a != nullptr) {
    if (a->type != GgufValueType::kUint32) {
      return Malformed(source_, "metadata \"general.alignment\"",
                       absl::StrCat("type ", GgufValueTypeName(a->type), " (must be UINT32)"));
    }
    if (a->uint_value == 0 || (a->uint_value & (a->uint_value - 1)) != 0) {
      return Malformed(source_, "metadata \"general.alignment\"",
                       absl::StrCat(a->uint_value, " is not a power of two"));
    }
    alignment_ = a->uint_value;
  }
  tensors_.resize(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor& t = tensors_[i];
    std::string_view name;
    if (!in.ReadString(&name)) {
      return Malformed(source_, absl::StrCat("tensor info ", i), "name runs past the end");
    }
    t.name = std::string(name);
    const std::string field = absl::StrCat("tensor \"", t.name, "\"");
    uint32_t n_dims = 0;
    if (!in.Read(&n_dims)) return Malformed(source_, field, "file ends in its n_dims");
    if (n_dims == 0 || n_dims > kMaxDims) {
      return Malformed(source_, field, absl::StrCat("n_dims ", n_dims, " (must be 1..4)"));
    }
    t.ne.resize(n_dims);
    t.num_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      if (!in.Read(&ne)) return Malformed(source_, field, "file ends in its dimensions");
      if (ne == 0 || ne > static_cast<uint64_t>(kMaxElements) ||
          static_cast<int64_t>(ne) > kMaxElements / t.num_elements) {
        return Malformed(source_, field,
                         absl::StrCat("dimension ", d, " = ", ne, " (empty or too large)"));
      }
      t.ne[d] = static_cast<int64_t>(ne);
      t.num_elements *= t.ne[d];
    }
    uint32_t type_id = 0;
    if (!in.Read(&type_id)) return Malformed(source_, field, "file ends in its type");
    const std::optional<GgmlBlock> block = GgmlBlockOf(type_id);
    if (!block.has_value()) {
      return Malformed(source_, field,
                       absl::StrCat("ggml type ", type_id,
                                    " is not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, "
                                    "Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)"));
    }
    t.type = static_cast<GgmlType>(type_id);
    if (t.ne[0] % block->elements != 0) {
      return Malformed(source_, field,
                       absl::StrCat("row length ", t.ne[0], " is not a multiple of ",
                                    GgmlTypeName(t.type), "'s block of ", block->elements));
    }
    t.num_bytes = static_cast<size_t>(t.num_elements / block->elements * block->bytes);
    if (!in.Read(&t.offset)) return Malformed(source_, field, "file ends in its offset");
    if (t.offset % alignment_ != 0) {
      return Malformed(
          source_, field,
          absl::StrCat("offset ", t.offset, " is not a multiple of the alignment ", alignment_));
    }
    if (!tensor_index_.emplace(t.name, i).second) {
      return Malformed(source_, field, "the name appears twice");
    }
  }
  // The data section starts at the next multiple of the alignment.
  const uint64_t end_of_infos = in.position();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_size = data_offset_ <= size ? size - data_offset_ : 0;
  for (GgufTensor& t : tensors_) {
    if (data_offset_ > size || t.offset > data_size || t.num_bytes > data_size - t.offset) {
      return Malformed(
          source_, absl::StrCat("tensor \"", t.name, "\""),
          absl::StrCat("bytes [", t.offset, ", +", t.num_bytes,
                       ") run past the end of the data section (", data_size, " bytes)"));
    }
    t.data = data + data_offset_ + t.offset;
  }
  // No two tensors may share bytes.
  std::vector<const GgufTensor*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const GgufTensor& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i - 1]->offset + by_offset[i - 1]->num_bytes > by_offset[i]->offset) {
      return Malformed(source_, absl::StrCat("tensor \"", by_offset[i]->name, "\""),
                       absl::StrCat("overlaps tensor \"", by_offset[i - 1]->name, "\""));
    }
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

absl::Status Absent(const std::string& source, std::string_view key_view) {
  const std::string key(key_view);
  return absl::NotFoundError(absl::StrCat(source, ": GGUF metadata \"", key, "\" is missing"));
}
absl::Status WrongType(const std::string& source, std::string_view key_view, const GgufValue& v,
                       const char* wanted) {
  const std::string key(key_view);
  return absl::InvalidArgumentError(absl::StrCat(source, ": GGUF metadata \"", key, "\" has type ",
                                                 GgufValueTypeName(v.type), " (", wanted,
                                                 " expected)"));
}

}  // namespace

absl::StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Absent(source_, key);
  if (!IsInteger(v->type)) return WrongType(source_, key, *v, "an integer");
  if (IsSigned(v->type)) {
    if (v->int_value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          source_, ": GGUF metadata \"", std::string(key), "\" is negative (", v->int_value, ")"));
    }
    return static_cast<uint64_t>(v->int_value);
  }
  return v->uint_value;
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Absent(source_, key);
  if (v->type == GgufValueType::kFloat32 || v->type == GgufValueType::kFloat64) {
    return v->float_value;
  }
  if (IsInteger(v->type)) {
    return IsSigned(v->type) ? static_cast<double>(v->int_value)
                             : static_cast<double>(v->uint_value);
  }
  return WrongType(source_, key, *v, "a number");
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Absent(source_, key);
  if (v->type != GgufValueType::kBool) return WrongType(source_, key, *v, "BOOL");
  return v->uint_value != 0;
}

absl::StatusOr<std::string_view> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Absent(source_, key);
  if (v->type != GgufValueType::kString) return WrongType(source_, key, *v, "STRING");
  return v->string_value;
}

absl::StatusOr<std::span<const std::string_view>> GgufFile::GetStringArray(
    std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Absent(source_, key);
  if (v->type != GgufValueType::kArray || v->element_type != GgufValueType::kString) {
    return WrongType(source_, key, *v, "ARRAY of STRING");
  }
  return std::span<const std::string_view>(v->strings);
}

absl::StatusOr<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Absent(source_, key);
  if (v->type != GgufValueType::kArray ||
      (v->element_type != GgufValueType::kFloat32 && v->element_type != GgufValueType::kFloat64)) {
    return WrongType(source_, key, *v, "ARRAY of FLOAT32");
  }
  std::vector<float> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i) {
    if (v->element_type == GgufValueType::kFloat32) {
      std::memcpy(&out[i], v->raw + 4 * i, 4);
    } else {
      double d;
      std::memcpy(&d, v->raw + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> GgufFile::GetInt32Array(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return Absent(source_, key);
  if (v->type != GgufValueType::kArray || !IsInteger(v->element_type)) {
    return WrongType(source_, key, *v, "ARRAY of integers");
  }
  std::vector<int32_t> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i) {
    const int64_t x = IntElement(*v, i);
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ": GGUF metadata \"",
                                                     std::string(key), "\" element ", i, " = ", x,
                                                     " is outside int32"));
    }
    out[i] = static_cast<int32_t>(x);
  }
  return out;
}

}  // namespace kvserve::engine
