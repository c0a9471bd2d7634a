// A small GGUF encoder for the parser tests, written from the format
// description (gguf_file.h's layout comment and llama.cpp's GGUF spec page),
// so the parser is checked against an encoder it does not share code with.
// Hostile files are made by editing the fields it exposes (counts, offsets)
// or the bytes it returns.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace kvserve::engine::testing {

class GgufBytes {
 public:
  template <typename T>
  GgufBytes& Put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    bytes_.append(b, sizeof(T));
    return *this;
  }
  GgufBytes& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    bytes_ += s;
    return *this;
  }
  GgufBytes& Raw(const std::string& s) {
    bytes_ += s;
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// One metadata entry: key, value type id, and the encoded value.
struct GgufKv {
  std::string key;
  uint32_t type;
  std::string value;
};

template <typename T>
GgufKv ScalarKv(const std::string& key, uint32_t type, T v) {
  return {key, type, GgufBytes().Put(v).bytes()};
}
inline GgufKv StringKv(const std::string& key, const std::string& s) {
  return {key, 8, GgufBytes().Str(s).bytes()};
}
inline GgufKv StringArrayKv(const std::string& key, const std::vector<std::string>& items) {
  GgufBytes b;
  b.Put<uint32_t>(8).Put<uint64_t>(items.size());
  for (const std::string& s : items) b.Str(s);
  return {key, 9, b.bytes()};
}
template <typename T>
GgufKv ArrayKv(const std::string& key, uint32_t element_type, const std::vector<T>& items) {
  GgufBytes b;
  b.Put<uint32_t>(element_type).Put<uint64_t>(items.size());
  for (T v : items) b.Put(v);
  return {key, 9, b.bytes()};
}

struct GgufTensorSpec {
  std::string name;
  std::vector<uint64_t> ne;        // ne[0] first
  uint32_t type = 0;               // F32
  std::string data;                // the tensor's bytes
  std::optional<uint64_t> offset;  // default: packed, each aligned
};

struct GgufSpec {
  uint32_t version = 3;
  std::vector<GgufKv> kvs;
  std::vector<GgufTensorSpec> tensors;
  uint64_t alignment = 32;                         // must match general.alignment when a kv sets it
  std::optional<uint64_t> kv_count, tensor_count;  // override the true counts
};

inline uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

inline std::string EncodeGguf(const GgufSpec& spec) {
  GgufBytes b;
  b.Put<uint32_t>(0x46554747).Put<uint32_t>(spec.version);
  b.Put<uint64_t>(spec.tensor_count.value_or(spec.tensors.size()));
  b.Put<uint64_t>(spec.kv_count.value_or(spec.kvs.size()));
  for (const GgufKv& kv : spec.kvs) b.Str(kv.key).Put<uint32_t>(kv.type).Raw(kv.value);
  std::vector<uint64_t> offsets;
  uint64_t next = 0;
  for (const GgufTensorSpec& t : spec.tensors) {
    const uint64_t offset = t.offset.value_or(AlignUp(next, spec.alignment));
    offsets.push_back(offset);
    next = std::max(next, offset + t.data.size());
    b.Str(t.name).Put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) b.Put<uint64_t>(d);
    b.Put<uint32_t>(t.type).Put<uint64_t>(offset);
  }
  std::string out = b.bytes();
  out.resize(AlignUp(out.size(), spec.alignment), '\0');
  const size_t data_start = out.size();
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const std::string& data = spec.tensors[i].data;
    if (data.empty()) continue;  // nothing to write (a claimed offset may be far away)
    if (out.size() < data_start + offsets[i] + data.size()) {
      out.resize(data_start + offsets[i] + data.size(), '\0');
    }
    std::memcpy(out.data() + data_start + offsets[i], data.data(), data.size());
  }
  return out;
}

inline std::string F32Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

}  // namespace kvserve::engine::testing
