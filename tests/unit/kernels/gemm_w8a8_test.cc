// WeightFormat::kW8A8 (kernels/cpu/gemm_w8a8.h): int8 weights times int8
// activations quantized per row.
//   - Every ISA path (scalar, AVX2 with vpmaddubsw, AVX-512 VNNI) gives, bit
//     for bit, the contract computed here independently: codes by
//     nearbyint, an int64 dot product, float(dot) * (x_scale * w_scale) + bias.
//   - Odd k (padding to the 4-deep step), partial panels, every tile shape,
//     threads; all-zero, Inf and NaN rows.
//   - The result is within the quantization error of the double product.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_w8a8.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/unit/kernels/gemm_test_util.h"

namespace kvserve::kernels {
namespace {

// The activation codes and scale of one row, as gemm_w8a8.h defines them.
struct RowCodes {
  std::vector<int32_t> codes;
  float scale = 0.0f;
};

RowCodes QuantizeRowReference(const float* x, int64_t k) {
  RowCodes out{std::vector<int32_t>(static_cast<size_t>(k), 0), 0.0f};
  float amax = 0.0f;
  bool finite = true;
  for (int64_t kk = 0; kk < k; ++kk) {
    finite = finite && std::isfinite(x[kk]);
    amax = std::max(amax, std::fabs(x[kk]));
  }
  if (!finite) {
    out.scale = std::numeric_limits<float>::quiet_NaN();
    return out;
  }
  if (amax == 0.0f) return out;
  out.scale = amax / 127.0f;
  const float inv = 127.0f / amax;
  for (int64_t kk = 0; kk < k; ++kk) {
    out.codes[kk] = static_cast<int32_t>(std::clamp(std::nearbyint(x[kk] * inv), -127.0f, 127.0f));
  }
  return out;
}

// The contract, from the int8 weight codes of the plain int8 format.
std::vector<float> Reference(const std::vector<float>& w, int64_t n, int64_t k,
                             const std::vector<float>& x, int64_t m, const float* bias) {
  const PackedMatrix q = PackWeights(w.data(), n, k, WeightFormat::kInt8);
  std::vector<float> y(static_cast<size_t>(m * n));
  for (int64_t r = 0; r < m; ++r) {
    const RowCodes xr = QuantizeRowReference(x.data() + r * k, k);
    for (int64_t c = 0; c < n; ++c) {
      int64_t dot = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        dot += int64_t{xr.codes[kk]} * q.As<int8_t>()[(c / 16) * k * 16 + kk * 16 + c % 16];
      }
      float v = static_cast<float>(dot) * (xr.scale * q.scales[c]);
      if (bias != nullptr) v = v + bias[c];
      y[r * n + c] = v;
    }
  }
  return y;
}

TEST(GemmW8A8Test, EveryPathIsTheContractBitForBit) {
  ThreadPool pool(3);
  std::mt19937 rng(21);
  const int64_t kn[][2] = {{1, 5}, {3, 16}, {7, 33}, {64, 17}, {97, 200}, {578, 40}, {1536, 24}};
  for (const auto& [k, n] : kn) {
    std::vector<float> w = Random(n * k, rng);
    for (int64_t kk = 0; kk < k; ++kk) w[kk] = 0.0f;  // an all-zero weight row: scale 0
    const PackedMatrix p = PackWeights(w.data(), n, k, WeightFormat::kW8A8);
    const std::vector<float> bias = Random(n, rng);
    for (int64_t m : {1, 2, 3, 5, 6, 11, 12, 13, 25, 40}) {
      std::vector<float> x = Random(m * k, rng);
      for (int64_t kk = 0; kk < k; ++kk) x[kk] *= 100.0f;  // a row of another magnitude
      if (m > 2) std::fill(x.begin() + k, x.begin() + 2 * k, 0.0f);  // an all-zero row
      for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
        const std::vector<float> want = Reference(w, n, k, x, m, b);
        for (CpuIsa isa : AvailableIsas()) {
          for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
            ASSERT_TRUE(SameBits(RunGemm(p, x, m, b, isa, threads), want))
                << IsaName(isa) << " k=" << k << " n=" << n << " m=" << m
                << " bias=" << (b != nullptr) << " vnni=" << HasAvx512Vnni();
          }
        }
      }
    }
  }
}

TEST(GemmW8A8Test, NonFiniteRowsGiveNaNAndLeaveOtherRowsAlone) {
  std::mt19937 rng(22);
  const int64_t n = 20, k = 37, m = 4;
  const std::vector<float> w = Random(n * k, rng);
  const PackedMatrix p = PackWeights(w.data(), n, k, WeightFormat::kW8A8);
  std::vector<float> x = Random(m * k, rng);
  x[1 * k + 5] = std::numeric_limits<float>::infinity();
  x[2 * k + 36] = std::numeric_limits<float>::quiet_NaN();
  for (CpuIsa isa : AvailableIsas()) {
    const std::vector<float> y = RunGemm(p, x, m, nullptr, isa, nullptr);
    for (int64_t c = 0; c < n; ++c) {
      EXPECT_FALSE(std::isnan(y[0 * n + c])) << IsaName(isa);
      EXPECT_TRUE(std::isnan(y[1 * n + c])) << IsaName(isa);
      EXPECT_TRUE(std::isnan(y[2 * n + c])) << IsaName(isa);
      EXPECT_FALSE(std::isnan(y[3 * n + c])) << IsaName(isa);
    }
    EXPECT_TRUE(SameBits(y, Reference(w, n, k, x, m, nullptr))) << IsaName(isa);
  }
}

// Both quantizers give the same bytes, shifted or not, on every tail length.
TEST(GemmW8A8Test, VectorQuantizerMatchesScalarByteForByte) {
  if (DetectedIsa() < CpuIsa::kAvx512) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(23);
  for (int64_t k : {1, 15, 16, 17, 33, 64, 577}) {
    const int64_t m = 5, depth = internal::W8A8Depth(k);
    std::vector<float> x = Random(m * k, rng);
    x[2 * k] = std::numeric_limits<float>::quiet_NaN();
    std::fill(x.begin() + 3 * k, x.begin() + 4 * k, 0.0f);
    for (int64_t i = 0; i < k; ++i) x[4 * k + i] = (i % 7 - 3) * 0.5f;  // exact ties
    for (bool shifted : {false, true}) {
      std::vector<int8_t> a(m * depth, 1), b(m * depth, 2);
      std::vector<float> sa(m), sb(m);
      internal::QuantizeRowsW8A8(x.data(), k, m, k, shifted, a.data(), sa.data());
      internal::QuantizeRowsW8A8Avx512(x.data(), k, m, k, shifted, b.data(), sb.data());
      EXPECT_EQ(a, b) << "k=" << k << " shifted=" << shifted;
      EXPECT_TRUE(SameBits(sa, sb)) << "k=" << k;
    }
  }
}

// Within the rounding of both quantizations of the exact product: each
// product's error is at most |x| * w_scale / 2 + |w| * x_scale / 2 (+ their
// product), so the sum's is bounded by a few hundredths of sum |x * w|.
TEST(GemmW8A8Test, CloseToTheDoubleProduct) {
  std::mt19937 rng(24);
  const int64_t n = 48, k = 333, m = 9;
  const std::vector<float> w = Random(n * k, rng), x = Random(m * k, rng);
  const PackedMatrix p = PackWeights(w.data(), n, k, WeightFormat::kW8A8);
  const std::vector<float> y = RunGemm(p, x, m, nullptr, ActiveIsa(), nullptr);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double ref = 0.0, mag = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        ref += static_cast<double>(x[r * k + kk]) * w[c * k + kk];
        mag += std::fabs(static_cast<double>(x[r * k + kk]) * w[c * k + kk]);
      }
      ASSERT_NEAR(y[r * n + c], ref, 0.02 * mag) << r << " " << c;
    }
  }
}

TEST(GemmW8A8Test, ReadRowIsTheInt8FormatsRow) {
  std::mt19937 rng(25);
  const int64_t n = 21, k = 13;
  const std::vector<float> w = Random(n * k, rng);
  const PackedMatrix a = PackWeights(w.data(), n, k, WeightFormat::kInt8);
  const PackedMatrix b = PackWeights(w.data(), n, k, WeightFormat::kW8A8);
  EXPECT_EQ(b.StorageBytes(), 2 * 16 * 16 + 2 * 32 * 4);  // codes (k padded to 16) + scales + sums
  std::vector<float> ra(k), rb(k);
  for (int64_t r = 0; r < n; ++r) {
    a.ReadRow(r, ra.data());
    b.ReadRow(r, rb.data());
    ASSERT_TRUE(SameBits(ra, rb)) << r;
  }
}

}  // namespace
}  // namespace kvserve::kernels
