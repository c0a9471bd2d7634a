// The dot-product formats (kernels/cpu/gemm_dot.h).
// kW8A8: int8 weights times int8 activations quantized per row.
//   - Every ISA path (scalar, AVX2 with vpmaddubsw, AVX-512 VNNI) gives, bit
//     for bit, the contract computed here independently: codes by
//     nearbyint, an int64 dot product, float(dot) * (x_scale * w_scale) + bias.
//   - Odd k (padding to the 4-deep step), partial panels, every tile shape,
//     threads; all-zero, Inf and NaN rows.
//   - The result is within the quantization error of the double product.
// kBF16Dot: bf16 weights times x rounded to bf16, vdpbf16ps's order.
//   - Every path (scalar, AVX2 emulation, AVX512-BF16 where the CPU has it)
//     gives the contract bit for bit; the weights from a bf16 checkpoint's
//     bits equal those rounded from fp32; within bf16 rounding of the double
//     product.
#include "kernels/cpu/gemm_dot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/unit/kernels/gemm_test_util.h"

namespace kvserve::kernels {
namespace {

// The activation codes and scale of one row, as gemm_dot.h defines them.
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

// The contract, from the int8 weight codes of the plain int8 format, of W
// and x rotated along k (gemm.h).
std::vector<float> Reference(std::vector<float> w, int64_t n, int64_t k, std::vector<float> x,
                             int64_t m, const float* bias) {
  RotateHeads(w.data(), k, n, 1, k, nullptr);
  RotateHeads(x.data(), k, m, 1, k, nullptr);
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

TEST(GemmDotTest, W8A8EveryPathIsTheContractBitForBit) {
  ThreadPool pool(3);
  std::mt19937 rng(21);
  // The last k: x's quantization is split across the pool's threads by rows
  // from m * k >= 64K elements (gemm.cc).
  const int64_t kn[][2] = {{1, 5},    {3, 16},   {7, 33},    {64, 17},
                           {97, 200}, {578, 40}, {1536, 24}, {2048, 20}};
  for (const auto& [k, n] : kn) {
    std::vector<float> w = Random(n * k, rng);
    for (int64_t kk = 0; kk < k; ++kk) w[kk] = 0.0f;  // an all-zero weight row: scale 0
    const PackedMatrix p = PackWeights(w.data(), n, k, WeightFormat::kW8A8);
    const std::vector<float> bias = Random(n, rng);
    for (int64_t m : {1, 2, 3, 5, 6, 11, 12, 13, 25, 40}) {
      std::vector<float> x = Random(m * k, rng);
      for (int64_t kk = 0; kk < k; ++kk) x[kk] *= 100.0f;            // a row of another magnitude
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

TEST(GemmDotTest, W8A8NonFiniteRowsGiveNaNAndLeaveOtherRowsAlone) {
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
// The vector quantizers this CPU can run.
std::vector<std::pair<const char*, decltype(&internal::QuantizeRowsW8A8)>> VectorQuantizers() {
  std::vector<std::pair<const char*, decltype(&internal::QuantizeRowsW8A8)>> q;
  if (DetectedIsa() >= CpuIsa::kAvx2) q.push_back({"avx2", internal::QuantizeRowsW8A8Avx2});
  if (DetectedIsa() >= CpuIsa::kAvx512) q.push_back({"avx512", internal::QuantizeRowsW8A8Avx512});
  return q;
}

TEST(GemmDotTest, W8A8VectorQuantizerMatchesScalarByteForByte) {
  if (VectorQuantizers().empty()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(23);
  for (int64_t k : {1, 15, 16, 17, 33, 64, 577}) {
    const int64_t m = 5, depth = internal::W8A8Depth(k);
    std::vector<float> x = Random(m * k, rng);
    x[2 * k] = std::numeric_limits<float>::quiet_NaN();
    std::fill(x.begin() + 3 * k, x.begin() + 4 * k, 0.0f);
    for (int64_t i = 0; i < k; ++i) x[4 * k + i] = (i % 7 - 3) * 0.5f;  // exact ties
    for (bool shifted : {false, true}) {
      std::vector<int8_t> a(m * depth, 1);
      std::vector<float> sa(m);
      internal::QuantizeRowsW8A8(x.data(), k, m, k, shifted, a.data(), sa.data());
      for (const auto& [name, quantize] : VectorQuantizers()) {
        std::vector<int8_t> b(m * depth, 2);
        std::vector<float> sb(m);
        quantize(x.data(), k, m, k, shifted, b.data(), sb.data());
        EXPECT_EQ(a, b) << name << " k=" << k << " shifted=" << shifted;
        EXPECT_TRUE(SameBits(sa, sb)) << name << " k=" << k;
      }
    }
  }
}

// y of `format` within rel * sum_k |x * w| (+ abs) of the double product.
void ExpectNearDoubleProduct(WeightFormat format, uint32_t seed, double rel, double abs) {
  std::mt19937 rng(seed);
  const int64_t n = 48, k = 333, m = 9;
  const std::vector<float> w = Random(n * k, rng), x = Random(m * k, rng);
  const PackedMatrix p = PackWeights(w.data(), n, k, format);
  const std::vector<float> y = RunGemm(p, x, m, nullptr, ActiveIsa(), nullptr);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double ref = 0.0, mag = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) {
        ref += static_cast<double>(x[r * k + kk]) * w[c * k + kk];
        mag += std::fabs(static_cast<double>(x[r * k + kk]) * w[c * k + kk]);
      }
      ASSERT_NEAR(y[r * n + c], ref, rel * mag + abs) << r << " " << c;
    }
  }
}

// Within the rounding of both quantizations of the exact product: each
// product's error is at most |x| * w_scale / 2 + |w| * x_scale / 2 (+ their
// product), so the sum's is bounded by a few hundredths of sum |x * w|.
TEST(GemmDotTest, W8A8CloseToTheDoubleProduct) {
  ExpectNearDoubleProduct(WeightFormat::kW8A8, 24, 0.02, 0.0);
}

// ReadRow gives W back: the int8 format's row of W H, rotated back by H.
TEST(GemmDotTest, W8A8ReadRowIsTheInt8RowOfTheRotatedMatrixRotatedBack) {
  std::mt19937 rng(25);
  const int64_t n = 21, k = 24;  // rotated in blocks of 8
  const std::vector<float> w = Random(n * k, rng);
  std::vector<float> rotated = w;
  RotateHeads(rotated.data(), k, n, 1, k, nullptr);
  const PackedMatrix a = PackWeights(rotated.data(), n, k, WeightFormat::kInt8);
  const PackedMatrix b = PackWeights(w.data(), n, k, WeightFormat::kW8A8);
  // codes (k padded to the 4-deep step) + scales + sums
  EXPECT_EQ(b.StorageBytes(), 2 * internal::W8A8Depth(k) * 16 + 2 * 32 * 4);
  std::vector<float> ra(k), rb(k);
  for (int64_t r = 0; r < n; ++r) {
    a.ReadRow(r, ra.data());
    RotateHeads(ra.data(), k, 1, 1, k, nullptr);
    b.ReadRow(r, rb.data());
    ASSERT_TRUE(SameBits(ra, rb)) << r;
    for (int64_t kk = 0; kk < k; ++kk) ASSERT_NEAR(rb[kk], w[r * k + kk], 0.02) << r << " " << kk;
  }
}

// bf16 of v as gemm_dot.h defines it, from kv_quant's rounding: an fp32
// subnormal becomes a signed zero.
float Bf16Reference(float v) {
  if (std::fpclassify(v) == FP_SUBNORMAL) return std::copysign(0.0f, v);
  return Bf16ToFloat(FloatToBf16(v));
}

std::vector<float> Bf16DotReference(const std::vector<float>& w, int64_t n, int64_t k,
                                    const std::vector<float>& x, int64_t m, const float* bias) {
  std::vector<float> y(static_cast<size_t>(m * n));
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      volatile float acc = 0.0f;  // in order (see gemm_bf16dot.cc)
      for (int64_t kk = 0; kk < k; kk += 2) {
        // The odd element first; past k, x and w are zero.
        const float odd =
            kk + 1 < k ? Bf16Reference(x[r * k + kk + 1]) * Bf16Reference(w[c * k + kk + 1]) : 0.0f;
        acc = acc + odd;
        acc = acc + Bf16Reference(x[r * k + kk]) * Bf16Reference(w[c * k + kk]);
      }
      y[r * n + c] = bias != nullptr ? acc + bias[c] : acc;
    }
  }
  return y;
}

TEST(GemmDotTest, Bf16EveryPathIsTheContractBitForBit) {
  ThreadPool pool(3);
  std::mt19937 rng(31);
  // The last k: x's rounding is split across the pool's threads by rows from
  // m * k >= 64K elements (gemm.cc).
  const int64_t kn[][2] = {{1, 5}, {2, 16}, {7, 33}, {64, 17}, {97, 200}, {577, 40}, {2305, 18}};
  for (const auto& [k, n] : kn) {
    std::vector<float> w = Random(n * k, rng);
    w[0] = 1e-39f;   // subnormal: flushed to +0
    w[k] = -1e-39f;  // (row 1) to -0
    const PackedMatrix p = PackWeights(w.data(), n, k, WeightFormat::kBF16Dot);
    const std::vector<float> bias = Random(n, rng);
    for (int64_t m : {1, 2, 5, 6, 7, 12, 13, 30}) {
      std::vector<float> x = Random(m * k, rng);
      x[0] = 3e-39f;
      for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
        const std::vector<float> want = Bf16DotReference(w, n, k, x, m, b);
        for (CpuIsa isa : AvailableIsas()) {
          for (ThreadPool* threads : {static_cast<ThreadPool*>(nullptr), &pool}) {
            const std::vector<float> got = RunGemm(p, x, m, b, isa, threads);
            ASSERT_TRUE(SameBits(got, want)) << IsaName(isa) << " k=" << k << " n=" << n
                                             << " m=" << m << " avx512bf16=" << HasAvx512Bf16();
          }
        }
      }
    }
  }
}

TEST(GemmDotTest, Bf16FromCheckpointBitsEqualsRoundedFp32) {
  std::mt19937 rng(32);
  const int64_t n = 37, k = 45;
  std::vector<float> w = Random(n * k, rng);
  w[3] = 1e-39f;
  std::vector<uint16_t> bits(w.size());
  for (size_t i = 0; i < w.size(); ++i) bits[i] = FloatToBf16(w[i]);
  std::vector<float> rounded(w.size());
  for (size_t i = 0; i < w.size(); ++i) rounded[i] = Bf16ToFloat(bits[i]);
  const PackedMatrix a = PackWeights16(bits.data(), n, k, WeightFormat::kBF16Dot);
  const PackedMatrix b = PackWeights(rounded.data(), n, k, WeightFormat::kBF16Dot);
  ASSERT_EQ(a.data.size(), b.data.size());
  EXPECT_EQ(std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)), 0);
  std::vector<float> row(k);
  for (int64_t r = 0; r < n; ++r) {
    a.ReadRow(r, row.data());
    for (int64_t kk = 0; kk < k; ++kk) ASSERT_EQ(row[kk], Bf16Reference(rounded[r * k + kk]));
  }
}

TEST(GemmDotTest, Bf16VectorRoundingMatchesScalar) {
  std::vector<std::pair<const char*, decltype(&internal::RoundRowsBf16)>> rounders;
  if (DetectedIsa() >= CpuIsa::kAvx2) rounders.push_back({"avx2", internal::RoundRowsBf16Avx2});
  if (DetectedIsa() >= CpuIsa::kAvx512)
    rounders.push_back({"avx512", internal::RoundRowsBf16Avx512});
  if (rounders.empty()) GTEST_SKIP() << "no AVX2";
  std::mt19937 rng(33);
  for (int64_t k : {1, 15, 16, 17, 64, 99}) {
    const int64_t m = 3, depth = internal::Bf16DotDepth(k);
    std::vector<float> x = Random(m * k, rng);
    x[0] = std::numeric_limits<float>::quiet_NaN();
    if (k > 2) {
      x[1] = -1e-40f;
      x[2] = std::numeric_limits<float>::infinity();
    }
    // Row 1: just below, at and just above a tie, under even and odd bf16s.
    for (int64_t i = 0; i < k; ++i) {
      const uint32_t low[] = {0x7fff, 0x8000, 0x8001};
      x[k + i] = std::bit_cast<float>(
          static_cast<uint32_t>(0x3f800000u + ((i / 3) % 2 << 16) + low[i % 3]));
    }
    for (int64_t i = 0; i < k; ++i) x[2 * k + i] = 1.0f + (i % 3) * 0x1p-8f;  // exact ties
    std::vector<uint16_t> a(m * depth, 1);
    internal::RoundRowsBf16(x.data(), k, m, k, a.data());
    for (const auto& [name, round] : rounders) {
      std::vector<uint16_t> b(m * depth, 2);
      round(x.data(), k, m, k, b.data());
      EXPECT_EQ(a, b) << name << " k=" << k;
    }
  }
}

// Each factor within 2^-9 relative: each product within ~2^-8.
TEST(GemmDotTest, Bf16CloseToTheDoubleProduct) {
  ExpectNearDoubleProduct(WeightFormat::kBF16Dot, 34, 0x1p-8, 1e-6);
}

}  // namespace
}  // namespace kvserve::kernels
