// AlignedBuffer: an owning, 64-byte aligned float array (one cache line, one
// AVX-512 register). Used for packed weights and KV storage so that vector
// loads never straddle a cache line.
//
// A buffer made with Pages::kHuge, of kHugePageBytes or more, is aligned to
// it and asked to be backed by transparent huge pages (madvise; the kernel
// may decline) before it is first touched. The KV cache uses it: paged
// attention reads blocks scattered over the pool, and with 4 KiB pages
// nearly every block read is a TLB miss. Weights do not: they stream in
// order, and huge pages would round every large matrix up to 2 MiB of RSS.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace kvserve::kernels {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugePageBytes = size_t{2} << 20;
  enum class Pages { kDefault, kHuge };

  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t count, Pages pages = Pages::kDefault) : count_(count) {
    if (count == 0) return;
    const bool huge = pages == Pages::kHuge && count * sizeof(float) >= kHugePageBytes;
    // Only the start is aligned to a huge page: the size is not rounded up
    // to one (a partial last one stays in 4 KiB pages), so RSS is the size.
    const size_t bytes = (count * sizeof(float) + kAlignment - 1) / kAlignment * kAlignment;
    void* p = nullptr;
    if (posix_memalign(&p, huge ? kHugePageBytes : kAlignment, bytes) != 0) throw std::bad_alloc();
    data_ = static_cast<float*>(p);
    if (huge) madvise(data_, bytes, MADV_HUGEPAGE);  // advice only: failure is harmless
    std::memset(data_, 0, bytes);
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  ~AlignedBuffer() { std::free(data_); }

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return count_; }
  float& operator[](size_t i) { return data_[i]; }
  const float& operator[](size_t i) const { return data_[i]; }

 private:
  float* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace kvserve::kernels
