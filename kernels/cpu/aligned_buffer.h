// AlignedBuffer: an owning, 64-byte aligned float array (one cache line, one
// AVX-512 register). Used for packed weights and KV storage so that vector
// loads never straddle a cache line.
//
// A buffer made with Pages::kHuge, of kHugePageBytes or more, is aligned to
// it and asked to be backed by transparent huge pages (madvise; the kernel
// may decline) before it is first touched. The KV cache uses it: paged
// attention reads blocks scattered over the pool, and with 4 KiB pages
// nearly every block read is a TLB miss. Packed weights use it too: a
// decode step streams every matrix once, and on 4 KiB pages a stream pays a
// TLB miss at every page and the hardware prefetchers stop at its end (a
// plain memcpy read 13-17% slower on 4 KiB pages on a Zen 4 VM; see
// docs/benchmarks.md, "Packed weights on huge pages").
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
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
    const size_t bytes = (count * sizeof(float) + kAlignment - 1) / kAlignment * kAlignment;
    if (pages == Pages::kHuge && bytes >= kHugePageBytes) {
      MapHugeAligned(bytes);
    } else {
      void* p = nullptr;
      if (posix_memalign(&p, kAlignment, bytes) != 0) throw std::bad_alloc();
      data_ = static_cast<float*>(p);
    }
    std::memset(data_, 0, bytes);  // faults every page in now, as huge pages where granted
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        count_(std::exchange(o.count_, 0)),
        mapped_bytes_(std::exchange(o.mapped_bytes_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      Release();
      data_ = std::exchange(o.data_, nullptr);
      count_ = std::exchange(o.count_, 0);
      mapped_bytes_ = std::exchange(o.mapped_bytes_, 0);
    }
    return *this;
  }
  ~AlignedBuffer() { Release(); }

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return count_; }
  float& operator[](size_t i) { return data_[i]; }
  const float& operator[](size_t i) const { return data_[i]; }

 private:
  // A huge-page buffer is its own anonymous mapping, not malloc's: malloc
  // serves blocks below its (growing) mmap threshold from the brk heap,
  // where a 2 MiB-aligned block leaves up to 2 MiB of padding for later
  // small blocks, and where fewer pages came out huge (a Qwen2.5-shape int8
  // daemon had 23 MiB more RSS that way, and 288 MiB on huge pages against
  // 608 with own mappings). The mapping is over-allocated by one huge page
  // and trimmed so that it starts on one and ends at the buffer's last base
  // page: the kernel cannot back a partial last huge page with a whole one,
  // so RSS is the size. Advice only: a failed madvise leaves base pages.
  void MapHugeAligned(size_t bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t size = (bytes + page - 1) / page * page;
    const size_t span = size + kHugePageBytes;
    void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t base = reinterpret_cast<uintptr_t>(m);
    const uintptr_t start = (base + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    const size_t lead = start - base;
    if (lead > 0) munmap(m, lead);
    // lead < kHugePageBytes (base is page-aligned), so a tail is always left.
    munmap(reinterpret_cast<void*>(start + size), kHugePageBytes - lead);
    data_ = reinterpret_cast<float*>(start);
    mapped_bytes_ = size;
    madvise(data_, size, MADV_HUGEPAGE);
  }
  void Release() {
    if (mapped_bytes_ > 0) {
      munmap(data_, mapped_bytes_);
    } else {
      std::free(data_);
    }
    data_ = nullptr;
    mapped_bytes_ = 0;
  }

  float* data_ = nullptr;
  size_t count_ = 0;
  size_t mapped_bytes_ = 0;  // > 0: data_ is an own mapping of this size (huge pages)
};

}  // namespace kvserve::kernels
