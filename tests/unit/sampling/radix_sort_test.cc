// RadixSort against std::sort on keys shaped like the sampler's rank keys
// and on arbitrary ones.
#include "engine/sampling/radix_sort.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

void ExpectSortsLikeStdSort(std::vector<uint64_t> keys, std::vector<uint64_t>& buffer) {
  std::vector<uint64_t> expected = keys;
  std::sort(expected.begin(), expected.end());
  RadixSort(keys, buffer);
  EXPECT_EQ(keys, expected);
}

TEST(RadixSortTest, SortsLikeStdSort) {
  std::mt19937_64 rng(5);
  std::vector<uint64_t> buffer;  // reused across calls, as the sampler does
  for (size_t n : {0, 1, 2, 3, 255, 256, 4097, 20000}) {
    std::vector<uint64_t> arbitrary(n), rank_like(n), equal_high(n), descending(n);
    for (size_t i = 0; i < n; ++i) {
      arbitrary[i] = rng();
      // Rank keys: a few distinct high halves (logit bits), ids below 2^18.
      rank_like[i] = (uint64_t{0xBF800000u + static_cast<uint32_t>(rng() % 97) * 4099} << 32) |
                     static_cast<uint32_t>(rng() % 151936);
      equal_high[i] = (uint64_t{0x3F80} << 48) | (rng() & 0xFFFF'FFFFu);  // only low bytes differ
      descending[i] = n - i;  // every byte but the lowest two shared
    }
    ExpectSortsLikeStdSort(arbitrary, buffer);
    ExpectSortsLikeStdSort(rank_like, buffer);
    ExpectSortsLikeStdSort(equal_high, buffer);
    ExpectSortsLikeStdSort(descending, buffer);
  }
}

TEST(RadixSortTest, AllEqualAndSortedInputsStayPut) {
  std::vector<uint64_t> buffer;
  std::vector<uint64_t> equal(5000, 0x1234'5678'9ABC'DEF0u), sorted(5000);
  for (size_t i = 0; i < sorted.size(); ++i) sorted[i] = i * 0x0101'0101'0101u;
  ExpectSortsLikeStdSort(equal, buffer);
  ExpectSortsLikeStdSort(sorted, buffer);
}

}  // namespace
}  // namespace kvserve::engine
