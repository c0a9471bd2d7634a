// Test helpers for the loader: a self-deleting temporary directory and a small
// safetensors writer (written from the format description, so the reader is
// checked against an independent encoder).
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvserve::engine::testing {

// A fresh directory under the system temp dir, removed with its contents on
// destruction.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("kvserve_loader_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) +
             "_" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path() const { return path_.string(); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

template <typename T>
std::string Bytes(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Lays tensors out end to end in insertion order, as the official writer does.
class SafetensorsWriter {
 public:
  // `bytes` is the raw little-endian data; its size is not checked, so tests
  // can write inconsistent files on purpose.
  SafetensorsWriter& Add(const std::string& name, const std::string& dtype,
                         std::vector<int64_t> shape, std::string bytes) {
    tensors_.push_back({name, dtype, std::move(shape), std::move(bytes)});
    return *this;
  }
  SafetensorsWriter& AddF32(const std::string& name, std::vector<int64_t> shape,
                            const std::vector<float>& values) {
    return Add(name, "F32", std::move(shape), Bytes(values));
  }
  SafetensorsWriter& AddU16(const std::string& name, const std::string& dtype,
                            std::vector<int64_t> shape, const std::vector<uint16_t>& bits) {
    return Add(name, dtype, std::move(shape), Bytes(bits));
  }
  // Pad the header with spaces to a multiple of 8 (the official writer does);
  // off, the data section starts at an odd address.
  SafetensorsWriter& PadHeader(bool pad) {
    pad_ = pad;
    return *this;
  }

  nlohmann::json Header() const {
    nlohmann::json header = nlohmann::json::object();
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
      header[t.name] = {{"dtype", t.dtype},
                        {"shape", t.shape},
                        {"data_offsets", {offset, offset + t.bytes.size()}}};
      offset += t.bytes.size();
    }
    return header;
  }

  std::string Data() const {
    std::string data;
    for (const Tensor& t : tensors_) data += t.bytes;
    return data;
  }

  // The whole file for an arbitrary header text (for corrupt headers).
  static std::string Assemble(std::string header_text, const std::string& data, bool pad) {
    if (pad) {
      while (header_text.size() % 8 != 0) header_text += ' ';
    }
    const uint64_t n = header_text.size();
    std::string out(8, '\0');
    std::memcpy(out.data(), &n, 8);  // little-endian host
    return out + header_text + data;
  }

  std::string Serialize() const { return Assemble(Header().dump(), Data(), pad_); }
  void Write(const std::string& path) const { WriteFile(path, Serialize()); }

 private:
  struct Tensor {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  std::vector<Tensor> tensors_;
  bool pad_ = true;
};

}  // namespace kvserve::engine::testing
