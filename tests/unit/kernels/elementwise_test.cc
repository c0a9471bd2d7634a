#include "kernels/cpu/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::kernels {
namespace {

std::vector<float> Random(int64_t count, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& f : v) f = dist(rng);
  return v;
}

std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> isas = {CpuIsa::kScalar};
  if (DetectedIsa() >= CpuIsa::kAvx2) isas.push_back(CpuIsa::kAvx2);
  return isas;
}

const int64_t kDims[] = {1, 7, 33, 576, 1000};

// The normalized Walsh-Hadamard matrix of size n (a power of two), entry (i, j)
// = (-1)^popcount(i & j) / sqrt(n), in double.
double HadamardEntry(int64_t n, int64_t i, int64_t j) {
  return (__builtin_popcountll(static_cast<uint64_t>(i & j)) % 2 == 0 ? 1.0 : -1.0) /
         std::sqrt(static_cast<double>(n));
}

TEST(RotateHeadsTest, HadamardBlockIsTheLargestPowerOfTwoDividingTheHeadDim) {
  EXPECT_EQ(HadamardBlock(64), 64);
  EXPECT_EQ(HadamardBlock(256), 256);
  EXPECT_EQ(HadamardBlock(512), 256);
  EXPECT_EQ(HadamardBlock(96), 32);
  EXPECT_EQ(HadamardBlock(80), 16);
  EXPECT_EQ(HadamardBlock(6), 2);
}

// Against the matrix product (block diagonal over the head), on odd token
// and head counts, with a token stride wider than the heads (the fused qkv
// row): the elements past the heads stay as they were.
TEST(RotateHeadsTest, MatchesTheHadamardMatrixPerBlockAndLeavesTheRestAlone) {
  ThreadPool pool(3);
  for (int64_t dim : {64, 96, 256}) {
    SCOPED_TRACE(dim);
    const int64_t tokens = 7, heads = 3, stride = heads * dim + 5;
    const int64_t block = HadamardBlock(dim);
    std::mt19937 rng(static_cast<uint32_t>(dim));
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(tokens * stride);
    for (float& v : x) v = dist(rng);
    x[3] = 40.0f;  // an outlier channel
    std::vector<float> y = x;
    RotateHeads(y.data(), stride, tokens, heads, dim, &pool);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        const float* in = x.data() + t * stride + h * dim;
        const float* out = y.data() + t * stride + h * dim;
        for (int64_t i = 0; i < dim; ++i) {
          const int64_t b = i / block * block;
          double want = 0;
          for (int64_t j = 0; j < block; ++j) want += HadamardEntry(block, i - b, j) * in[b + j];
          EXPECT_NEAR(out[i], want, 1e-5 * (1 + std::fabs(want))) << t << " " << h << " " << i;
        }
      }
      for (int64_t e = heads * dim; e < stride; ++e) {
        EXPECT_EQ(y[t * stride + e], x[t * stride + e]);
      }
    }
  }
}

// H is its own inverse and keeps dot products (q . k = Hq . Hk), and a
// token's result does not depend on the others' or on the pool.
TEST(RotateHeadsTest, IsAnInvolutionThatKeepsDotProductsPerToken) {
  const int64_t dim = 128, tokens = 5;
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(tokens * dim), k(tokens * dim);
  for (float& v : q) v = dist(rng);
  for (float& v : k) v = dist(rng);
  std::vector<float> hq = q, hk = k;
  ThreadPool pool(2);
  RotateHeads(hq.data(), dim, tokens, 1, dim, &pool);
  RotateHeads(hk.data(), dim, tokens, 1, dim, nullptr);
  for (int64_t t = 0; t < tokens; ++t) {
    double dot = 0, hdot = 0;
    for (int64_t i = 0; i < dim; ++i) {
      dot += double{q[t * dim + i]} * k[t * dim + i];
      hdot += double{hq[t * dim + i]} * hk[t * dim + i];
    }
    EXPECT_NEAR(hdot, dot, 1e-4 * (1 + std::fabs(dot)));
    std::vector<float> alone(q.begin() + t * dim, q.begin() + (t + 1) * dim);
    RotateHeads(alone.data(), dim, 1, 1, dim, nullptr);
    for (int64_t i = 0; i < dim; ++i) EXPECT_EQ(alone[i], hq[t * dim + i]);
  }
  RotateHeads(hq.data(), dim, tokens, 1, dim, &pool);
  for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(hq[i], q[i], 1e-5);
}

TEST(RmsNormTest, MatchesReferenceAndIsRowInvariant) {
  ThreadPool one(1), two(2);
  for (CpuIsa isa : AvailableIsas()) {
    ScopedIsaOverride force(isa);
    for (int64_t dim : kDims) {
      const int64_t rows = 17;
      const float eps = 1e-5f;
      std::vector<float> x = Random(rows * dim, 1, -3.0f, 3.0f), w = Random(dim, 2);
      std::vector<float> y(rows * dim);
      RmsNorm(x.data(), w.data(), y.data(), rows, dim, eps, &two);
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t d = 0; d < dim; ++d) {
          ss += static_cast<double>(x[r * dim + d]) * x[r * dim + d];
        }
        const double inv = 1.0 / std::sqrt(ss / dim + eps);
        for (int64_t d = 0; d < dim; ++d) {
          double ref = x[r * dim + d] * inv * w[d];
          ASSERT_NEAR(y[r * dim + d], ref, 2e-6 * (1 + std::fabs(ref))) << IsaName(isa) << dim;
        }
      }
      // One row alone, and with one thread: the same bits.
      std::vector<float> single(dim);
      RmsNorm(x.data() + 5 * dim, w.data(), single.data(), 1, dim, eps, nullptr);
      EXPECT_EQ(single, std::vector<float>(y.begin() + 5 * dim, y.begin() + 6 * dim));
      std::vector<float> y1(rows * dim);
      RmsNorm(x.data(), w.data(), y1.data(), rows, dim, eps, &one);
      EXPECT_EQ(y1, y);
    }
  }
}

TEST(AddRmsNormTest, UpdatesResidualThenNormalises) {
  ThreadPool pool(2);
  for (CpuIsa isa : AvailableIsas()) {
    ScopedIsaOverride force(isa);
    for (int64_t dim : kDims) {
      const int64_t rows = 9;
      std::vector<float> res = Random(rows * dim, 3), x = Random(rows * dim, 4), w = Random(dim, 5);
      std::vector<float> expected_res(rows * dim), expected_y(rows * dim), y(rows * dim);
      for (size_t i = 0; i < res.size(); ++i) expected_res[i] = res[i] + x[i];
      RmsNorm(expected_res.data(), w.data(), expected_y.data(), rows, dim, 1e-6f, &pool);
      AddRmsNorm(res.data(), x.data(), w.data(), y.data(), rows, dim, 1e-6f, &pool);
      EXPECT_EQ(res, expected_res);
      EXPECT_EQ(y, expected_y);
    }
  }
}

// inv_freq as transformers builds it for default rope: 1 / base^(2i / d) in fp32.
std::vector<float> InvFreq(int head_dim, float base) {
  std::vector<float> f(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    f[i] = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  }
  return f;
}

TEST(ApplyRopeTest, RotateHalfMatchesReference) {
  ThreadPool pool(2);
  for (int head_dim : {2, 8, 64}) {
    for (float scaling : {1.0f, 0.75f}) {
      const int tokens = 17, heads = 3, kv_heads = 1;
      const int64_t hd = head_dim;
      const int64_t q_stride = (heads + 2 * kv_heads) * hd;  // fused qkv rows
      std::vector<float> qkv = Random(tokens * q_stride, 6);
      std::vector<float> orig = qkv;
      std::vector<int32_t> pos(tokens);
      for (int t = 0; t < tokens; ++t) pos[t] = t * 257 + (t % 3);  // up to ~4100
      std::vector<float> inv_freq = InvFreq(head_dim, 10000.0f);
      RopeParams p;
      p.q = qkv.data();
      p.k = qkv.data() + heads * hd;
      p.q_stride = q_stride;
      p.k_stride = q_stride;
      p.positions = pos.data();
      p.inv_freq = inv_freq.data();
      p.attention_scaling = scaling;
      p.num_tokens = tokens;
      p.num_heads = heads;
      p.num_kv_heads = kv_heads;
      p.head_dim = head_dim;
      ApplyRope(p, &pool);
      const int half = head_dim / 2;
      for (int t = 0; t < tokens; ++t) {
        for (int h = 0; h < heads + kv_heads; ++h) {
          const int64_t base = t * q_stride + h * hd;
          for (int i = 0; i < half; ++i) {
            const float angle = static_cast<float>(pos[t]) * inv_freq[i];
            const double c = std::cos(static_cast<double>(angle)) * scaling;
            const double s = std::sin(static_cast<double>(angle)) * scaling;
            const double a = orig[base + i], b = orig[base + i + half];
            ASSERT_NEAR(qkv[base + i], a * c - b * s, 2e-6);
            ASSERT_NEAR(qkv[base + i + half], b * c + a * s, 2e-6);
          }
        }
        // The V part of the fused row is untouched.
        for (int64_t j = (heads + kv_heads) * hd; j < q_stride; ++j) {
          ASSERT_EQ(qkv[t * q_stride + j], orig[t * q_stride + j]);
        }
      }
    }
  }
}

TEST(SiluMulTest, MatchesReferenceIncludingLargeInputs) {
  ThreadPool pool(2);
  for (CpuIsa isa : AvailableIsas()) {
    ScopedIsaOverride force(isa);
    for (int64_t inter : kDims) {
      const int64_t rows = 5;
      std::vector<float> gu = Random(rows * 2 * inter, 7, -12.0f, 12.0f);
      gu[0] = 100.0f;                  // exp(-g) underflows
      if (inter > 1) gu[1] = -100.0f;  // exp(-g) overflows
      std::vector<float> out(rows * inter);
      SiluMul(gu.data(), out.data(), rows, inter, &pool);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < inter; ++i) {
          const double g = gu[r * 2 * inter + i], u = gu[r * 2 * inter + inter + i];
          const double ref = g / (1.0 + std::exp(-g)) * u;
          ASSERT_NEAR(out[r * inter + i], ref, 1e-6 * (1 + std::fabs(ref)))
              << IsaName(isa) << " g=" << g;
        }
      }
      std::vector<float> single(inter);
      SiluMul(gu.data() + 6 * inter, single.data(), 1, inter, nullptr);
      EXPECT_EQ(single, std::vector<float>(out.begin() + 3 * inter, out.begin() + 4 * inter));
    }
  }
}

TEST(HeadRmsNormTest, NormsEachHeadInPlaceAndLeavesTheRestAlone) {
  ThreadPool two(2);
  for (CpuIsa isa : AvailableIsas()) {
    ScopedIsaOverride force(isa);
    for (int64_t head_dim : {8, 20, 128}) {
      const int64_t tokens = 17, heads = 3, stride = 5 * head_dim + 3;  // q heads inside a qkv row
      const float eps = 1e-6f;
      std::vector<float> x = Random(tokens * stride, 31, -4.0f, 4.0f), w = Random(head_dim, 32);
      const std::vector<float> orig = x;
      HeadRmsNorm(x.data(), stride, tokens, heads, w.data(), head_dim, eps, &two);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          const float* in = orig.data() + t * stride + h * head_dim;
          double ss = 0;
          for (int64_t d = 0; d < head_dim; ++d) ss += static_cast<double>(in[d]) * in[d];
          const double inv = 1.0 / std::sqrt(ss / head_dim + eps);
          for (int64_t d = 0; d < head_dim; ++d) {
            const double ref = in[d] * inv * w[d];
            ASSERT_NEAR(x[t * stride + h * head_dim + d], ref, 2e-6 * (1 + std::fabs(ref)))
                << IsaName(isa) << " head_dim " << head_dim;
          }
        }
        for (int64_t j = heads * head_dim; j < stride; ++j) {
          ASSERT_EQ(x[t * stride + j], orig[t * stride + j]);  // k, v untouched
        }
      }
      // Same bits as RmsNorm of the head alone (one row, no pool).
      std::vector<float> alone(head_dim);
      RmsNorm(orig.data() + 4 * stride + head_dim, w.data(), alone.data(), 1, head_dim, eps,
              nullptr);
      EXPECT_EQ(alone, std::vector<float>(x.begin() + 4 * stride + head_dim,
                                          x.begin() + 4 * stride + 2 * head_dim));
    }
  }
}

TEST(ApplyRopeTest, PartialRotaryRotatesOnlyTheFirstRotaryDims) {
  const int tokens = 9, heads = 2, kv_heads = 1, head_dim = 16, rotary_dim = 12;
  const int64_t stride = (heads + kv_heads) * head_dim;
  std::vector<float> qk = Random(tokens * stride, 33);
  const std::vector<float> orig = qk;
  std::vector<int32_t> pos(tokens);
  for (int t = 0; t < tokens; ++t) pos[t] = 3 * t + 1;
  std::vector<float> inv_freq = InvFreq(rotary_dim, 10000.0f);
  RopeParams p;
  p.q = qk.data();
  p.k = qk.data() + heads * head_dim;
  p.q_stride = p.k_stride = stride;
  p.positions = pos.data();
  p.inv_freq = inv_freq.data();
  p.attention_scaling = 1.2f;
  p.num_tokens = tokens;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.rotary_dim = rotary_dim;
  ApplyRope(p, nullptr);
  const int half = rotary_dim / 2;
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads + kv_heads; ++h) {
      const int64_t base = t * stride + h * head_dim;
      for (int i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos[t]) * inv_freq[i];
        const double c = std::cos(static_cast<double>(angle)) * 1.2;
        const double s = std::sin(static_cast<double>(angle)) * 1.2;
        const double a = orig[base + i], b = orig[base + i + half];
        ASSERT_NEAR(qk[base + i], a * c - b * s, 3e-6);
        ASSERT_NEAR(qk[base + i + half], b * c + a * s, 3e-6);
      }
      for (int i = rotary_dim; i < head_dim; ++i) ASSERT_EQ(qk[base + i], orig[base + i]);
    }
  }
}

TEST(GeluTanhMulTest, MatchesReference) {
  ThreadPool pool(2);
  for (int64_t inter : kDims) {
    const int64_t rows = 5;
    std::vector<float> gu = Random(rows * 2 * inter, 34, -8.0f, 8.0f);
    gu[0] = 50.0f;                  // tanh saturates at +1
    if (inter > 1) gu[1] = -50.0f;  // and at -1
    std::vector<float> out(rows * inter);
    GeluTanhMul(gu.data(), out.data(), rows, inter, &pool);
    const double beta = std::sqrt(2.0 / M_PI);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < inter; ++i) {
        const double g = gu[r * 2 * inter + i], u = gu[r * 2 * inter + inter + i];
        const double ref = 0.5 * g * (1.0 + std::tanh(beta * (g + 0.044715 * g * g * g))) * u;
        ASSERT_NEAR(out[r * inter + i], ref, 2e-6 * (1 + std::fabs(ref))) << " g=" << g;
      }
    }
    std::vector<float> single(inter);
    GeluTanhMul(gu.data() + 6 * inter, single.data(), 1, inter, nullptr);
    EXPECT_EQ(single, std::vector<float>(out.begin() + 3 * inter, out.begin() + 4 * inter));
  }
}

TEST(SoftCapTest, MatchesReferenceAndBoundsValues) {
  std::vector<float> x = Random(1000, 35, -200.0f, 200.0f);
  const std::vector<float> orig = x;
  SoftCap(x.data(), static_cast<int64_t>(x.size()), 30.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = 30.0 * std::tanh(orig[i] / 30.0);
    ASSERT_NEAR(x[i], ref, 2e-6 * (1 + std::fabs(ref)));
    ASSERT_LE(std::fabs(x[i]), 30.0f);
  }
}

TEST(ScaleTest, MultipliesEveryElement) {
  std::vector<float> x = Random(37, 36);
  const std::vector<float> orig = x;
  Scale(x.data(), 37, 8.0f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], orig[i] * 8.0f);
}

TEST(EmbeddingLookupTest, CopiesRows) {
  const int64_t dim = 7, vocab = 11;
  std::vector<float> table = Random(vocab * dim, 8);
  std::vector<int32_t> ids = {3, 0, 10, 3};
  std::vector<float> out(ids.size() * dim);
  EmbeddingLookup(table.data(), dim, ids.data(), static_cast<int64_t>(ids.size()), out.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t d = 0; d < dim; ++d) EXPECT_EQ(out[i * dim + d], table[ids[i] * dim + d]);
  }
}

// From a packed table: the rows as the GEMM sees them (exact for fp32 and
// 16-bit; int8 codes times the row's scale).
TEST(EmbeddingLookupTest, PackedTableRowsPerFormat) {
  const int64_t dim = 7, vocab = 37;
  const std::vector<float> table = Random(vocab * dim, 9);
  const std::vector<int32_t> ids = {3, 0, 36, 17, 3};
  for (WeightFormat f :
       {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kInt8}) {
    const PackedMatrix packed = PackWeights(table.data(), vocab, dim, f);
    std::vector<float> out(ids.size() * dim);
    EmbeddingLookup(packed, ids.data(), static_cast<int64_t>(ids.size()), out.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t d = 0; d < dim; ++d) {
        const float v = table[ids[i] * dim + d];
        const float got = out[i * dim + d];
        if (f == WeightFormat::kF32) {
          ASSERT_EQ(got, v);
        } else if (f == WeightFormat::kBF16) {
          ASSERT_EQ(got, BF16ToF32(FloatToBf16(v)));
        } else if (f == WeightFormat::kF16) {
          ASSERT_EQ(got, F16ToF32(FloatToHalf(v)));
        } else {
          ASSERT_NEAR(got, v, 0.5001f * packed.scales[ids[i]]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::kernels
