// The 16-bit and int8 weight formats of kernels/cpu/gemm.h on every ISA path
// (the AVX-512 body's loops also run emulated in gemm_tiling_test.cc):
//   - bf16 / fp16: y is bit for bit the fp32 GEMM of the exactly widened
//     weights (subnormals included);
//   - int8: y is bit for bit (fp32 GEMM over the codes) * scale + bias, and
//     within rounding of the double product on the dequantized weights;
//   - rows are bit-identical alone and inside any batch, at any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/half_float.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/thread_pool.h"
#include "tests/unit/kernels/gemm_test_util.h"

namespace kvserve::kernels {
namespace {

// Random 16-bit patterns: finite, a tenth of them subnormal (or zero), the
// rest with exponents near 1 so that products stay finite.
std::vector<uint16_t> Random16(int64_t count, WeightFormat format, std::mt19937& rng) {
  std::vector<uint16_t> v(static_cast<size_t>(count));
  const bool bf16 = format == WeightFormat::kBF16;
  const int mantissa_bits = bf16 ? 7 : 10, bias = bf16 ? 127 : 15;
  std::uniform_int_distribution<int> mant(0, (1 << mantissa_bits) - 1), sign(0, 1),
      exponent(bias - 6, bias + 2), pick(0, 9);
  for (uint16_t& h : v) {
    const int e = pick(rng) == 0 ? 0 : exponent(rng);
    h = static_cast<uint16_t>((sign(rng) << 15) | (e << mantissa_bits) | mant(rng));
  }
  return v;
}

float Widen(WeightFormat format, uint16_t h) {
  return format == WeightFormat::kBF16 ? BF16ToF32(h) : F16ToF32(h);
}

TEST(GemmFormatsTest, PackedLayoutAndReadRow) {
  std::mt19937 rng(3);
  const int64_t n = 19, k = 7;
  const std::vector<float> w = Random(n * k, rng);
  for (WeightFormat format :
       {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kInt8}) {
    const PackedMatrix p = PackWeights(w.data(), n, k, format);
    EXPECT_EQ(p.format, format);
    EXPECT_EQ(p.StorageBytes(), 2 * k * 16 * WeightFormatBytes(format) +
                                    (format == WeightFormat::kInt8 ? 32 * 4 : 0));
    std::vector<float> row(k);
    for (int64_t r = 0; r < n; ++r) {
      p.ReadRow(r, row.data());
      for (int64_t kk = 0; kk < k; ++kk) {
        const float v = w[r * k + kk];
        switch (format) {
          case WeightFormat::kF32:
            ASSERT_EQ(row[kk], v);
            break;
          case WeightFormat::kBF16:
            ASSERT_EQ(row[kk], BF16ToF32(FloatToBf16(v)));
            break;
          case WeightFormat::kF16:
            ASSERT_EQ(row[kk], F16ToF32(FloatToHalf(v)));
            break;
          case WeightFormat::kInt8:
          case WeightFormat::kW8A8:  // (gemm_dot_test.cc)
          case WeightFormat::kBF16Dot:
            // Rounded to the nearest code: within half a step of the weight.
            ASSERT_LE(std::fabs(row[kk] - v), 0.5001f * p.scales[r]);
            break;
        }
      }
    }
    // Panel padding (rows 19..31) is zero.
    if (format == WeightFormat::kInt8) {
      EXPECT_EQ(p.scales[25], 0.0f);
    }
    const auto* bytes = reinterpret_cast<const uint8_t*>(p.data.data());
    const int64_t elem = WeightFormatBytes(format);
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int64_t j = n - 16; j < 16; ++j) {
        for (int64_t b = 0; b < elem; ++b) {
          ASSERT_EQ(bytes[((k + kk) * 16 + j) * elem + b], 0);
        }
      }
    }
  }
}

// A 16-bit matrix packed from raw bits equals the fp32 matrix of its exact
// widening, product for product, on every ISA, with and without bias.
TEST(GemmFormatsTest, SixteenBitIsBitIdenticalToWidenedFp32) {
  ThreadPool pool(2);
  std::mt19937 rng(11);
  const int64_t kn[][2] = {{54, 33}, {97, 200}, {600, 40}, {1536, 17}};
  for (WeightFormat format : {WeightFormat::kBF16, WeightFormat::kF16}) {
    for (const auto& [k, n] : kn) {
      const std::vector<uint16_t> bits = Random16(n * k, format, rng);
      std::vector<float> widened(bits.size());
      for (size_t i = 0; i < bits.size(); ++i) widened[i] = Widen(format, bits[i]);
      const PackedMatrix half = PackWeights16(bits.data(), n, k, format);
      const PackedMatrix full = PackWeights(widened.data(), n, k);
      ASSERT_EQ(half.StorageBytes() * 2, full.StorageBytes());
      // Packing the (exactly representable) widened values re-rounds to the same bits.
      const PackedMatrix repacked = PackWeights(widened.data(), n, k, format);
      ASSERT_EQ(std::memcmp(repacked.data.data(), half.data.data(), half.data.size() * 4), 0);
      const std::vector<float> bias = Random(n, rng);
      for (int64_t m : {1, 3, 6, 7, 13, 29}) {
        const std::vector<float> x = Random(m * k, rng);
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          const std::vector<float> want = RunGemm(full, x, m, b, CpuIsa::kScalar, nullptr);
          for (CpuIsa isa : AvailableIsas()) {
            ASSERT_TRUE(SameBits(RunGemm(half, x, m, b, isa, &pool), want))
                << WeightFormatName(format) << " " << IsaName(isa) << " m=" << m << " k=" << k
                << " n=" << n;
          }
        }
      }
    }
  }
}

// int8: the scale is applied once, after the whole k loop, then the bias.
TEST(GemmFormatsTest, Int8IsCodesProductTimesScalePlusBias) {
  ThreadPool pool(2);
  std::mt19937 rng(12);
  const int64_t kn[][2] = {{54, 33}, {97, 200}, {1536, 40}};
  for (const auto& [k, n] : kn) {
    std::vector<float> w = Random(n * k, rng);
    for (int64_t kk = 0; kk < k; ++kk) w[kk] = 0.0f;  // an all-zero row: scale 0
    const PackedMatrix q = PackWeights(w.data(), n, k, WeightFormat::kInt8);
    // The codes as an fp32 matrix.
    std::vector<float> codes(n * k), deq(n * k);
    for (int64_t r = 0; r < n; ++r) {
      q.ReadRow(r, deq.data() + r * k);
      for (int64_t kk = 0; kk < k; ++kk) {
        const int64_t i = (r / 16) * k * 16 + kk * 16 + r % 16;
        codes[r * k + kk] = static_cast<float>(q.As<int8_t>()[i]);
        ASSERT_LE(std::fabs(codes[r * k + kk]), 127.0f);
      }
    }
    const PackedMatrix code_matrix = PackWeights(codes.data(), n, k);
    const std::vector<float> bias = Random(n, rng);
    for (int64_t m : {1, 2, 6, 13, 25}) {
      const std::vector<float> x = Random(m * k, rng);
      std::vector<float> want = RunGemm(code_matrix, x, m, nullptr, CpuIsa::kScalar, nullptr);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < n; ++c) {
          float& v = want[r * n + c];
          v = v * q.scales[c];
          v = v + bias[c];
        }
      }
      for (CpuIsa isa : AvailableIsas()) {
        const std::vector<float> got = RunGemm(q, x, m, bias.data(), isa, &pool);
        ASSERT_TRUE(SameBits(got, want)) << IsaName(isa) << " m=" << m << " k=" << k;
        // And the product of the dequantized weights, within fp32 rounding.
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            double ref = bias[c], mag = std::fabs(bias[c]);
            for (int64_t kk = 0; kk < k; ++kk) {
              const double t = static_cast<double>(x[r * k + kk]) * deq[c * k + kk];
              ref += t;
              mag += std::fabs(t);
            }
            ASSERT_NEAR(got[r * n + c], ref, 2e-6 * mag + 1e-6) << "r=" << r << " c=" << c;
          }
        }
      }
    }
  }
}

// Batch invariance per format: a row alone, or at any offset of a batch, at
// any thread count, gives the same bits. n is large enough that a few rows
// on three threads take the decode split (shrinking chunks).
TEST(GemmFormatsTest, RowsAreBitIdenticalAcrossBatchesAndThreads) {
  ThreadPool one(1), three(3);
  std::mt19937 rng(13);
  const int64_t n = 1000, k = 300, m = 41;
  const std::vector<float> w = Random(n * k, rng), bias = Random(n, rng), x = Random(m * k, rng);
  for (WeightFormat format : {WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kInt8,
                              WeightFormat::kW8A8, WeightFormat::kBF16Dot}) {
    const PackedMatrix p = PackWeights(w.data(), n, k, format);
    for (CpuIsa isa : AvailableIsas()) {
      const std::vector<float> all = RunGemm(p, x, m, bias.data(), isa, &three);
      for (int64_t start : {0, 7, 40}) {
        for (int64_t rows : {1, 5}) {
          if (start + rows > m) continue;
          const std::vector<float> part(x.begin() + start * k, x.begin() + (start + rows) * k);
          for (ThreadPool* pool : {&one, &three}) {
            const std::vector<float> got = RunGemm(p, part, rows, bias.data(), isa, pool);
            ASSERT_TRUE(SameBits(
                got, std::vector<float>(all.begin() + start * n, all.begin() + (start + rows) * n)))
                << WeightFormatName(format) << " " << IsaName(isa) << " start=" << start
                << " threads=" << pool->num_threads();
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::kernels
