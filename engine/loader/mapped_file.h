// MappedFile: one file mapped read-only (POSIX mmap, PROT_READ, MAP_PRIVATE)
// for the lifetime of the object. Private to engine/loader/.
//
// Ownership: the object owns the mapping; data() is valid until it is
// destroyed. Not copyable or movable (pointers into it are handed out).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kvserve::engine {

class MappedFile {
 public:
  // NotFound when the file does not exist; other failures name the file and
  // the system error. An empty file maps to data() == nullptr, size() == 0.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  const std::string path_;
  const uint8_t* const data_;
  const size_t size_;
};

}  // namespace kvserve::engine
