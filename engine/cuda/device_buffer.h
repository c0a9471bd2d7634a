// DeviceBuffer: one cudaMalloc'ed allocation, owned (freed on destruction).
// PinnedBuffer: page-locked host memory for asynchronous copies.
// Allocation failures are statuses, never exceptions.
#pragma once

#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"

namespace kvserve::engine::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes, const char* what);
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer();

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static absl::StatusOr<PinnedBuffer> Allocate(size_t bytes, const char* what);
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept { *this = std::move(o); }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~PinnedBuffer();

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Carves aligned sub-ranges out of one allocation, front to back.
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  // Without a base: only counts (size a buffer first, then carve it).
  Carver() = default;
  template <typename T>
  T* Take(size_t count) {
    offset_ = (offset_ + kAlign - 1) / kAlign * kAlign;
    T* p = base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + offset_);
    offset_ += count * sizeof(T);
    return p;
  }
  void* TakeBytes(size_t bytes) { return Take<char>(bytes); }
  size_t used() const { return offset_; }

 private:
  static constexpr size_t kAlign = 256;
  char* base_ = nullptr;
  size_t offset_ = 0;
};

}  // namespace kvserve::engine::cuda
