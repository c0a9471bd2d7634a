// CounterUniform: a pure function of (seed, index) into [0, 1), uniform, and
// different across positions and seeds.
#include <cstdint>
#include <set>
#include <vector>

#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

TEST(CounterUniformTest, PureFunctionOfSeedAndIndex) {
  std::vector<double> first;
  for (uint64_t i = 0; i < 100; ++i) first.push_back(CounterUniform(42, i));
  // Any call order, interleaved with other seeds, gives the same values.
  for (uint64_t i = 100; i-- > 0;) {
    CounterUniform(7, i);
    EXPECT_EQ(CounterUniform(42, i), first[i]) << i;
  }
}

TEST(CounterUniformTest, InUnitIntervalWith53BitResolution) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
    for (uint64_t i : {uint64_t{0}, uint64_t{1}, uint64_t{1} << 40, ~uint64_t{0}}) {
      const double u = CounterUniform(seed, i);
      EXPECT_GE(u, 0.0);
      EXPECT_LT(u, 1.0);
      EXPECT_EQ(u * 0x1.0p53, static_cast<double>(static_cast<uint64_t>(u * 0x1.0p53)));
    }
  }
}

TEST(CounterUniformTest, DistinctAcrossPositionsAndSeeds) {
  std::set<double> seen;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    for (uint64_t i = 0; i < 200; ++i) seen.insert(CounterUniform(seed, i));
  }
  EXPECT_EQ(seen.size(), 50u * 200u);
}

TEST(CounterUniformTest, UniformBuckets) {
  // 10 buckets, 100k draws over several seeds: chi-square with 9 degrees of
  // freedom stays below 27.9 (p = 0.001); deterministic, so never flaky.
  constexpr int kBuckets = 10;
  constexpr int kDraws = 100000;
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{12345}}) {
    std::vector<int> counts(kBuckets, 0);
    double sum = 0.0;
    for (uint64_t i = 0; i < kDraws; ++i) {
      const double u = CounterUniform(seed, i);
      ++counts[static_cast<int>(u * kBuckets)];
      sum += u;
    }
    double chi2 = 0.0;
    const double expected = static_cast<double>(kDraws) / kBuckets;
    for (int c : counts) chi2 += (c - expected) * (c - expected) / expected;
    EXPECT_LT(chi2, 27.9) << "seed " << seed;
    EXPECT_NEAR(sum / kDraws, 0.5, 0.005);
  }
}

TEST(CounterUniformTest, NeighbouringSeedsAreUncorrelated) {
  // P(u(s, i) < u(s + 1, i)) is 1/2 for independent streams.
  constexpr int kDraws = 20000;
  for (uint64_t seed : {uint64_t{0}, uint64_t{1000}}) {
    int less = 0;
    for (uint64_t i = 0; i < kDraws; ++i) {
      less += CounterUniform(seed, i) < CounterUniform(seed + 1, i);
    }
    EXPECT_NEAR(static_cast<double>(less) / kDraws, 0.5, 0.02);
  }
  // Nor is a stream correlated with itself shifted by one position.
  int less = 0;
  for (uint64_t i = 0; i < kDraws; ++i) less += CounterUniform(9, i) < CounterUniform(9, i + 1);
  EXPECT_NEAR(static_cast<double>(less) / kDraws, 0.5, 0.02);
}

}  // namespace
}  // namespace kvserve::engine
