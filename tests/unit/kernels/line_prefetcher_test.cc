// internal::LinePrefetcher, the list of the next key tile's cache lines that
// the AVX2 attention step asks for a few at a time: every line of every run
// comes out once, in order, however the asks are cut; the per-step share
// covers the list by the last step; runs past kMaxRuns are left out whole.
// (That the asks change no result is the attention tests' business: the
// 4,000-key contexts of kv_quant_attention_test.cc take this path.)
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/attention_internal.h"

namespace kvserve::kernels::internal {
namespace {

std::vector<uintptr_t> TakeAll(LinePrefetcher& lines, int per_take) {
  std::vector<uintptr_t> seen;
  for (int guard = 0; lines.Pending() && guard < 100000; ++guard) {
    lines.Take(per_take,
               [&](const void* line) { seen.push_back(reinterpret_cast<uintptr_t>(line)); });
  }
  return seen;
}

TEST(LinePrefetcherTest, EveryLineOfEveryRunOnceInOrder) {
  alignas(64) static uint8_t buffer[64 * 64];
  const uintptr_t base = reinterpret_cast<uintptr_t>(buffer);
  for (int per_take : {1, 3, 7, 1000}) {
    SCOPED_TRACE(per_take);
    LinePrefetcher lines;
    lines.Clear();
    lines.Add(buffer + 10, 100);        // bytes 10..109: lines 0, 1
    lines.Add(buffer + 64 * 5, 64);     // exactly line 5
    lines.Add(buffer + 64 * 9 - 1, 2);  // straddles lines 8 and 9
    lines.Add(buffer + 64 * 20, 0);     // empty: nothing
    lines.Add(buffer + 64 * 30, 256);   // lines 30..33
    EXPECT_TRUE(lines.Pending());
    const std::vector<uintptr_t> expected = {base,           base + 64,      base + 5 * 64,
                                             base + 8 * 64,  base + 9 * 64,  base + 30 * 64,
                                             base + 31 * 64, base + 32 * 64, base + 33 * 64};
    EXPECT_EQ(TakeAll(lines, per_take), expected);
    EXPECT_FALSE(lines.Pending());
    EXPECT_EQ(lines.LinesPerStep(4, 32), 0);  // nothing left to ask for
  }
}

TEST(LinePrefetcherTest, PerStepShareCoversTheListByTheLastStep) {
  alignas(64) static uint8_t buffer[64 * 300];
  for (int lines_total : {1, 5, 31, 32, 33, 256}) {
    for (int keys : {1, 4, 17, 32}) {
      SCOPED_TRACE(std::to_string(lines_total) + " lines over " + std::to_string(keys) + " keys");
      LinePrefetcher lines;
      lines.Clear();
      lines.Add(buffer, int64_t{64} * lines_total);
      const int share = lines.LinesPerStep(4, keys);
      int taken = 0;
      for (int j0 = 0; j0 < keys; j0 += 4) lines.Take(share, [&](const void*) { ++taken; });
      EXPECT_EQ(taken, lines_total);
      EXPECT_FALSE(lines.Pending());
    }
  }
}

TEST(LinePrefetcherTest, RunsPastTheCapacityAreLeftOutWhole) {
  alignas(64) static uint8_t buffer[64 * (LinePrefetcher::kMaxRuns + 8) * 2];
  LinePrefetcher lines;
  lines.Clear();
  for (int r = 0; r < LinePrefetcher::kMaxRuns + 8; ++r) lines.Add(buffer + 128 * r, 64);
  const std::vector<uintptr_t> seen = TakeAll(lines, 5);
  ASSERT_EQ(static_cast<int>(seen.size()), LinePrefetcher::kMaxRuns);
  EXPECT_EQ(seen.back(),
            reinterpret_cast<uintptr_t>(buffer) + 128 * (LinePrefetcher::kMaxRuns - 1));
  lines.Clear();  // reusable: the next tile's list
  EXPECT_FALSE(lines.Pending());
  lines.Add(buffer, 64);
  EXPECT_EQ(TakeAll(lines, 1).size(), 1u);
}

}  // namespace
}  // namespace kvserve::kernels::internal
