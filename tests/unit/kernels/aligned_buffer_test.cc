#include "kernels/cpu/aligned_buffer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

namespace kvserve::kernels {
namespace {

using Pages = AlignedBuffer::Pages;
constexpr size_t kHuge = AlignedBuffer::kHugePageBytes;

uintptr_t Address(const AlignedBuffer& b) { return reinterpret_cast<uintptr_t>(b.data()); }

// The [start, end) of the mapping in /proc/self/maps that holds `address`,
// or {0, 0} when none does.
std::pair<uintptr_t, uintptr_t> MappingOf(uintptr_t address) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &start, &end) != 2) continue;
    if (start <= address && address < end) return {start, end};
  }
  return {0, 0};
}

void ExpectZeroedAndWritable(AlignedBuffer& b) {
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], 0.0f) << i;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i);
  EXPECT_EQ(b[b.size() - 1], static_cast<float>(b.size() - 1));
}

TEST(AlignedBufferTest, DefaultPagesAreCacheLineAlignedAndZeroed) {
  AlignedBuffer b(1000);
  ASSERT_EQ(b.size(), 1000u);
  EXPECT_EQ(Address(b) % AlignedBuffer::kAlignment, 0u);
  ExpectZeroedAndWritable(b);
}

TEST(AlignedBufferTest, HugeBufferStartsOnAHugePageAndItsMappingEndsAtItsLastPage) {
  // Neither a whole number of huge pages nor of base pages.
  const size_t count = kHuge / sizeof(float) * 3 + 123;
  AlignedBuffer b(count, Pages::kHuge);
  ASSERT_EQ(b.size(), count);
  EXPECT_EQ(Address(b) % kHuge, 0u);
  ExpectZeroedAndWritable(b);
  // The mapping stops at the buffer's last base page: no slack after it
  // that the kernel could back with a whole huge page.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = (count * sizeof(float) + page - 1) / page * page;
  EXPECT_EQ(MappingOf(Address(b)).second, Address(b) + bytes);
}

TEST(AlignedBufferTest, HugeRequestBelowOneHugePageIsAnOrdinaryBuffer) {
  AlignedBuffer b(1000, Pages::kHuge);
  EXPECT_EQ(Address(b) % AlignedBuffer::kAlignment, 0u);
  ExpectZeroedAndWritable(b);
}

TEST(AlignedBufferTest, MovesHandOverTheStorageOfEitherKind) {
  for (Pages pages : {Pages::kDefault, Pages::kHuge}) {
    const size_t count = kHuge / sizeof(float) + 7;
    AlignedBuffer a(count, pages);
    a[5] = 3.0f;
    const float* storage = a.data();
    AlignedBuffer b(std::move(a));
    EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(b.data(), storage);
    EXPECT_EQ(b[5], 3.0f);
    // Assigning over a buffer releases what it held (the sanitizers' leak
    // check and the huge mapping's unmap), then takes the other's.
    AlignedBuffer c(count, Pages::kHuge);
    const uintptr_t old_huge = Address(c);
    c = std::move(b);
    EXPECT_EQ(c.data(), storage);
    EXPECT_EQ(c[5], 3.0f);
    EXPECT_EQ(MappingOf(old_huge).first, 0u) << "the huge buffer assigned over is still mapped";
  }
}

}  // namespace
}  // namespace kvserve::kernels
