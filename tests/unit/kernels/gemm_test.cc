#include "kernels/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::kernels {
namespace {

std::vector<float> Random(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& f : v) f = dist(rng);
  return v;
}

std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> isas = {CpuIsa::kScalar};
  if (DetectedIsa() >= CpuIsa::kAvx2) isas.push_back(CpuIsa::kAvx2);
  if (DetectedIsa() >= CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  return isas;
}

struct Problem {
  int64_t m, n, k;
  int64_t ldx, ldy;
  std::vector<float> x, w, bias;
  PackedMatrix packed;

  Problem(int64_t m_, int64_t n_, int64_t k_, bool with_bias, uint32_t seed, int64_t pad = 0)
      : m(m_), n(n_), k(k_), ldx(k_ + pad), ldy(n_ + pad) {
    x = Random(m * ldx, seed);
    w = Random(n * k, seed + 1);
    if (with_bias) bias = Random(n, seed + 2);
    packed = PackWeights(w.data(), n, k);
  }

  // y with the given ISA and pool; padding columns of y are poisoned with a
  // sentinel that must survive.
  std::vector<float> Run(CpuIsa isa, ThreadPool* pool) const {
    std::vector<float> y(static_cast<size_t>(m * ldy), -7.0f);
    GemmParams p;
    p.x = x.data();
    p.ldx = ldx;
    p.w = &packed;
    p.bias = bias.empty() ? nullptr : bias.data();
    p.y = y.data();
    p.ldy = ldy;
    p.m = m;
    GemmWithIsa(p, isa, pool);
    return y;
  }

  // The contract's order, literally: acc = fma(x, w, acc) for kk = 0..k-1, then + bias.
  float Exact(int64_t row, int64_t col) const {
    float acc = 0.0f;
    for (int64_t kk = 0; kk < k; ++kk) acc = std::fma(x[row * ldx + kk], w[col * k + kk], acc);
    return bias.empty() ? acc : acc + bias[col];
  }
  double Reference(int64_t row, int64_t col, double* abs_sum) const {
    double acc = 0.0, mag = 0.0;
    for (int64_t kk = 0; kk < k; ++kk) {
      double t = static_cast<double>(x[row * ldx + kk]) * w[col * k + kk];
      acc += t;
      mag += std::fabs(t);
    }
    if (!bias.empty()) {
      acc += bias[col];
      mag += std::fabs(bias[col]);
    }
    *abs_sum = mag;
    return acc;
  }
};

TEST(PackWeightsTest, LayoutAndZeroPadding) {
  const int64_t n = 19, k = 5;
  std::vector<float> w = Random(n * k, 1);
  PackedMatrix packed = PackWeights(w.data(), n, k);
  ASSERT_EQ(packed.data.size(), static_cast<size_t>(2 * k * 16));
  for (int64_t panel = 0; panel < 2; ++panel) {
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t j = 0; j < 16; ++j) {
        int64_t row = panel * 16 + j;
        float expected = row < n ? w[row * k + kk] : 0.0f;
        EXPECT_EQ(packed.data[(panel * k + kk) * 16 + j], expected);
      }
    }
  }
}

// Odd sizes on every ISA path: each element equals the contract's FMA chain
// exactly, and the double reference within rounding error.
TEST(GemmTest, OddSizesMatchExactOrderAndReference) {
  ThreadPool pool(2);
  std::vector<int64_t> ns;
  for (int64_t n = 1; n <= 33; ++n) ns.push_back(n);
  ns.push_back(200);
  uint32_t seed = 10;
  for (int64_t m : {1, 5, 17, 97}) {
    for (int64_t k : {54, 97}) {
      for (int64_t n : ns) {
        for (bool with_bias : {false, true}) {
          Problem pr(m, n, k, with_bias, seed++, /*pad=*/3);
          for (CpuIsa isa : AvailableIsas()) {
            std::vector<float> y = pr.Run(isa, &pool);
            for (int64_t row = 0; row < m; ++row) {
              for (int64_t col = 0; col < pr.ldy; ++col) {
                float got = y[row * pr.ldy + col];
                if (col >= n) {
                  ASSERT_EQ(got, -7.0f) << "wrote past n";
                  continue;
                }
                ASSERT_EQ(got, pr.Exact(row, col))
                    << IsaName(isa) << " m=" << m << " n=" << n << " k=" << k << " row=" << row
                    << " col=" << col;
                double mag;
                double ref = pr.Reference(row, col, &mag);
                ASSERT_NEAR(got, ref, 1e-6 * mag + 1e-7);
              }
            }
          }
        }
      }
    }
  }
}

// Batch invariance: a row computed alone equals the same row inside a batch.
TEST(GemmTest, RowIsBitIdenticalAcrossBatchSizes) {
  ThreadPool pool(2);
  for (CpuIsa isa : AvailableIsas()) {
    for (bool with_bias : {false, true}) {
      const int64_t n = 200, k = 97;
      Problem big(97, n, k, with_bias, 99);
      std::vector<float> y97 = big.Run(isa, &pool);
      for (int64_t rows : {1, 17}) {
        for (int64_t start : {int64_t{0}, int64_t{5}, int64_t{97} - rows}) {
          Problem part = Problem(0, n, k, with_bias, 99);
          part.m = rows;
          part.x.assign(big.x.begin() + start * k, big.x.begin() + (start + rows) * k);
          part.bias = big.bias;
          std::vector<float> y = part.Run(isa, &pool);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < n; ++c) {
              ASSERT_EQ(y[r * n + c], y97[(start + r) * n + c]) << IsaName(isa) << " rows=" << rows;
            }
          }
        }
      }
    }
  }
}

TEST(GemmTest, BitIdenticalAcrossThreadCountsAndIsas) {
  ThreadPool one(1), two(2), three(3);
  for (int64_t m : {1, 6, 13, 64}) {
    Problem pr(m, 576, 576, true, 7 + static_cast<uint32_t>(m));
    std::vector<float> baseline = pr.Run(CpuIsa::kScalar, &one);
    for (CpuIsa isa : AvailableIsas()) {
      for (ThreadPool* pool : {&one, &two, &three}) {
        EXPECT_EQ(pr.Run(isa, pool), baseline)
            << IsaName(isa) << " m=" << m << " threads=" << pool->num_threads();
      }
      EXPECT_EQ(pr.Run(isa, nullptr), baseline);
    }
  }
}

// k large enough for several k-blocks and row blocks; every row count around
// the tile heights (6 for AVX2, 12 for AVX-512), tail rows joining the last
// row block, and a partial last panel.
TEST(GemmTest, KBlockingRowBlockingAndTails) {
  ThreadPool pool(2);
  std::vector<int64_t> ms;
  for (int64_t m = 1; m <= 26; ++m) ms.push_back(m);
  for (int64_t m : {47, 53, 61, 65, 100}) ms.push_back(m);
  for (int64_t m : ms) {
    Problem pr(m, 40, 1536, /*with_bias=*/m % 2 == 0, 5 + static_cast<uint32_t>(m));
    std::vector<float> baseline = pr.Run(CpuIsa::kScalar, nullptr);
    for (int64_t row = 0; row < m; ++row) {
      for (int64_t col = 0; col < 40; ++col) {
        ASSERT_EQ(baseline[row * 40 + col], pr.Exact(row, col)) << "m=" << m;
      }
    }
    for (CpuIsa isa : AvailableIsas()) {
      EXPECT_EQ(pr.Run(isa, &pool), baseline) << IsaName(isa) << " m=" << m;
    }
  }
}

TEST(GemmTest, ZeroKGivesBias) {
  Problem pr(3, 20, 0, true, 3);
  std::vector<float> y = pr.Run(ActiveIsa(), nullptr);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 20; ++c) EXPECT_EQ(y[r * 20 + c], pr.bias[c]);
  }
}

TEST(GemmTest, PublicEntryUsesActiveIsa) {
  ThreadPool pool(2);
  Problem pr(9, 50, 33, true, 4);
  std::vector<float> y(size_t{9} * 50);
  GemmParams p;
  p.x = pr.x.data();
  p.ldx = pr.ldx;
  p.w = &pr.packed;
  p.bias = pr.bias.data();
  p.y = y.data();
  p.ldy = 50;
  p.m = 9;
  Gemm(p, &pool);
  EXPECT_EQ(y, pr.Run(ActiveIsa(), &pool));
  EXPECT_LE(static_cast<int>(ActiveIsa()), static_cast<int>(DetectedIsa()));
}

}  // namespace
}  // namespace kvserve::kernels
