// KV cache row formats (kernels/cpu/kv_quant.h): each scalar codec against a
// brute-force nearest-value search, and each format's row round trip within
// the bound its rounding gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::kernels {
namespace {

// The code among `codes` whose value is nearest x; of two equally near
// values, the one with the even code.
template <typename Decode>
int BruteNearest(double x, int codes, Decode decode) {
  int best = -1;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c < codes; ++c) {
    const double v = decode(c);
    if (std::isnan(v)) continue;
    const double err = std::fabs(v - x);
    if (err < best_err || (err == best_err && v != decode(best) && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

TEST(KvCodecTest, Fp8E4m3KnownValuesAndNearest) {
  EXPECT_EQ(Fp8E4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(Fp8E4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(Fp8E4m3ToFloat(0x08), 0x1p-6f);  // smallest normal
  EXPECT_EQ(Fp8E4m3ToFloat(0x01), 0x1p-9f);  // smallest subnormal
  EXPECT_EQ(Fp8E4m3ToFloat(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(Fp8E4m3ToFloat(0x7f)));
  EXPECT_EQ(FloatToFp8E4m3(1.0625f), 0x38);  // tie between 1 and 1.125: even
  EXPECT_EQ(FloatToFp8E4m3(1.1875f), 0x3a);  // tie between 1.125 and 1.25: even
  EXPECT_EQ(FloatToFp8E4m3(1e6f), 0x7e);     // saturates
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(FloatToFp8E4m3(Fp8E4m3ToFloat(static_cast<uint8_t>(c))), c) << c;
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> mag(-12.0f, 9.0f);
  for (int i = 0; i < 3000; ++i) {
    const float x = std::exp2(mag(rng)) * (i % 2 == 0 ? 1.0f : -1.0f);
    const int want = BruteNearest(x, 256, [](int c) { return Fp8E4m3ToFloat(c); });
    EXPECT_EQ(Fp8E4m3ToFloat(FloatToFp8E4m3(x)), Fp8E4m3ToFloat(want)) << x;
  }
}

TEST(KvCodecTest, Fp4E2m1Nearest) {
  const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(Fp4E2m1ToFloat(c), c < 8 ? values[c] : -values[c - 8]) << c;
  }
  EXPECT_EQ(FloatToFp4E2m1(2.5f), 4);  // tie between 2 (code 4) and 3 (code 5): even
  EXPECT_EQ(FloatToFp4E2m1(5.0f), 6);  // tie between 4 and 6: even
  EXPECT_EQ(FloatToFp4E2m1(-0.25f), 8);
  EXPECT_EQ(FloatToFp4E2m1(9.0f), 7);
  for (float x = -7.0f; x <= 7.0f; x += 0.03125f) {
    const int want = BruteNearest(x, 16, [](int c) { return Fp4E2m1ToFloat(c); });
    EXPECT_EQ(Fp4E2m1ToFloat(FloatToFp4E2m1(x)), Fp4E2m1ToFloat(want)) << x;
  }
}

// The nearest code to a >= 0 by binary search of a format's sorted
// non-negative values (the encoders' definition, kv_quant.h), ties to the
// even code; above the last value, the last code.
int TableNearest(float a, const std::vector<float>& values) {
  const int n = static_cast<int>(values.size());
  const int c =
      static_cast<int>(std::upper_bound(values.begin(), values.end(), a) - values.begin()) - 1;
  if (c >= n - 1) return n - 1;
  const double mid = 0.5 * (static_cast<double>(values[c]) + values[c + 1]);
  if (a > mid) return c + 1;
  if (a < mid) return c;
  return (c & 1) == 0 ? c : c + 1;
}

// The encoder (by the bits of its input) against TableNearest on every
// float in [0, top) at a stride, on each code's value, on each midpoint
// between neighbouring codes and on the floats either side of them, and on
// +-0, infinity and the largest float; negative inputs get the sign bit.
template <typename Enc>
void CheckAgainstTable(Enc enc, const std::vector<float>& values, float top, uint32_t stride,
                       uint8_t sign_bit) {
  auto check = [&](float a) {
    const int want = TableNearest(a, values);
    ASSERT_EQ(enc(a), want) << a;
    ASSERT_EQ(enc(-a), want | sign_bit) << -a;
  };
  for (uint32_t b = 0; b < std::bit_cast<uint32_t>(top); b += stride) {
    check(std::bit_cast<float>(b));
  }
  for (size_t c = 0; c + 1 < values.size(); ++c) {
    const float mid = 0.5f * (values[c] + values[c + 1]);  // exact: short dyadics
    for (float a : {values[c], mid, std::nextafter(mid, 0.0f), std::nextafter(mid, top)}) check(a);
  }
  for (float a : {0.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min()}) {
    check(a);
  }
}

TEST(KvCodecTest, Fp8E4m3EncoderMatchesTableSearch) {
  std::vector<float> values;
  for (int c = 0; c < 127; ++c) values.push_back(Fp8E4m3ToFloat(static_cast<uint8_t>(c)));
  CheckAgainstTable(FloatToFp8E4m3, values, 1024.0f, 97, 0x80);
}

TEST(KvCodecTest, Fp4E2m1EncoderMatchesTableSearch) {
  std::vector<float> values;
  for (int c = 0; c < 8; ++c) values.push_back(Fp4E2m1ToFloat(static_cast<uint8_t>(c)));
  CheckAgainstTable(FloatToFp4E2m1, values, 16.0f, 61, 8);
}

// Nearest-even rounding for the 16-bit formats: no neighbouring code is
// nearer, and a tie goes to the even code.
template <typename Enc, typename Dec>
void CheckSixteenBit(Enc enc, Dec dec, float lo_exp, float hi_exp) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> mag(lo_exp, hi_exp);
  for (int i = 0; i < 20000; ++i) {
    // Half of the samples are exact midpoints between two codes.
    float x = std::exp2(mag(rng)) * (i % 3 == 0 ? -1.0f : 1.0f);
    if (i % 2 == 1) {
      const uint16_t h = enc(x) & 0x7ffe;
      x = std::copysign(0.5f * (std::fabs(dec(h)) + std::fabs(dec(h + 1))), x);
    }
    const uint16_t h = enc(x);
    const double err = std::fabs(static_cast<double>(dec(h)) - x);
    for (int step : {-1, 1}) {
      const uint16_t n = static_cast<uint16_t>(h + step);
      if (((n ^ h) & 0x8000) != 0 || std::isinf(dec(n)) || std::isnan(dec(n))) continue;
      const double n_err = std::fabs(static_cast<double>(dec(n)) - x);
      ASSERT_LE(err, n_err) << x;
      if (err == n_err) {
        ASSERT_EQ(h & 1, 0) << "tie not to even at " << x;
      }
    }
  }
  EXPECT_TRUE(std::isnan(dec(enc(std::nanf("")))));
}

TEST(KvCodecTest, Float16RoundsToNearestEven) {
  CheckSixteenBit(FloatToHalf, HalfToFloat, -26.0f, 15.9f);  // subnormals to near max
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
}

TEST(KvCodecTest, Bfloat16RoundsToNearestEven) {
  CheckSixteenBit(FloatToBf16, Bf16ToFloat, -30.0f, 30.0f);
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
}

TEST(KvCodecTest, ParseNames) {
  for (KvDtype d : kAllKvDtypes) EXPECT_EQ(ParseKvDtype(KvDtypeName(d)), d);
  EXPECT_FALSE(ParseKvDtype("fp8").has_value());
  EXPECT_FALSE(ParseKvDtype("float32").has_value());
}

// Largest |x - decoded| allowed for element x of a row with max|row| = amax:
// half the largest gap between neighbouring codes near x, times the scale,
// plus the fp32 rounding of x / s and of code * s (a few ulps of amax).
double RoundTripBound(KvDtype dtype, double x, double amax) {
  const double s = KvHasScale(dtype) ? amax / KvCodeMax(dtype) : 1.0;
  const double fp32 = 4 * 0x1p-24 * amax;
  switch (dtype) {
    case KvDtype::kFloat32:
      return 0.0;
    case KvDtype::kBfloat16:
      return std::fabs(x) * 0x1p-8;
    case KvDtype::kFloat16:
      return std::max(std::fabs(x) * 0x1p-11, 0x1p-25);
    case KvDtype::kFp8E4m3:
      return std::max(std::fabs(x) * 0x1p-4, 0x1p-10 * s) + fp32;
    case KvDtype::kInt8:
      return 0.5 * s + fp32;
    case KvDtype::kInt4:  // above 7.5 s, clamped to 7 s
      return (x > 7.5 * s ? 1.0 : 0.5) * s + fp32;
    case KvDtype::kFp4E2m1:
      return 1.0 * s + fp32;  // the widest gap: 4 .. 6
  }
  return 0.0;
}

class KvRowRoundTripTest : public ::testing::TestWithParam<KvDtype> {};

TEST_P(KvRowRoundTripTest, WithinFormatBound) {
  const KvDtype dtype = GetParam();
  std::mt19937 rng(3);
  for (int dim : {1, 7, 37, 64, 128}) {
    std::vector<uint8_t> bytes(KvRowBytes(dtype, dim) + 1, 0xa5);  // +1: no overrun
    std::vector<float> x(dim), y(dim);
    for (float range : {1e-3f, 1.0f, 37.0f}) {
      std::uniform_real_distribution<float> dist(-range, range);
      for (int trial = 0; trial < 20; ++trial) {
        double amax = 0;
        for (float& f : x) amax = std::max(amax, std::fabs(static_cast<double>(f = dist(rng))));
        const float s = QuantizeKvRow(dtype, x.data(), dim, bytes.data());
        ASSERT_EQ(bytes.back(), 0xa5) << "wrote past the row";
        if (KvHasScale(dtype)) {
          ASSERT_FLOAT_EQ(s, static_cast<float>(amax / KvCodeMax(dtype)));
        }
        DequantizeKvRow(dtype, bytes.data(), s, dim, y.data());
        for (int d = 0; d < dim; ++d) {
          ASSERT_LE(std::fabs(static_cast<double>(y[d]) - x[d]), RoundTripBound(dtype, x[d], amax))
              << KvDtypeName(dtype) << " dim " << dim << " d " << d << " x " << x[d];
        }
      }
    }
  }
}

TEST_P(KvRowRoundTripTest, ZeroRowAndNaNRow) {
  const KvDtype dtype = GetParam();
  const int dim = 9;
  std::vector<uint8_t> bytes(KvRowBytes(dtype, dim));
  std::vector<float> x(dim, 0.0f), y(dim, 1.0f);
  DequantizeKvRow(dtype, bytes.data(), QuantizeKvRow(dtype, x.data(), dim, bytes.data()), dim,
                  y.data());
  for (float f : y) EXPECT_EQ(f, 0.0f);
  x.assign(dim, std::nanf(""));
  DequantizeKvRow(dtype, bytes.data(), QuantizeKvRow(dtype, x.data(), dim, bytes.data()), dim,
                  y.data());
  for (float f : y) EXPECT_TRUE(std::isnan(f)) << KvDtypeName(dtype);
}

// The AVX2 decoder is the scalar one, bit for bit, on arbitrary bytes (NaN
// for NaN: payloads may differ), at sizes with and without a tail.
TEST_P(KvRowRoundTripTest, Avx2DecodeEqualsScalar) {
  if (DetectedIsa() < CpuIsa::kAvx2) GTEST_SKIP() << "no AVX2 on this machine";
  const KvDtype dtype = GetParam();
  std::mt19937 rng(4);
  for (int dim : {1, 8, 15, 37, 64, 128}) {
    std::vector<uint8_t> bytes(KvRowBytes(dtype, dim));
    std::vector<float> a(dim), b(dim);
    for (int trial = 0; trial < 50; ++trial) {
      for (uint8_t& x : bytes) x = static_cast<uint8_t>(rng());
      const float s =
          std::ldexp(1.0f + (rng() % 1000) / 1000.0f, static_cast<int>(rng() % 20) - 10);
      DequantizeKvRow(dtype, bytes.data(), s, dim, a.data());
      DequantizeKvRowAvx2(dtype, bytes.data(), s, dim, b.data());
      for (int d = 0; d < dim; ++d) {
        if (std::isnan(a[d]) && std::isnan(b[d])) continue;
        ASSERT_EQ(std::memcmp(&a[d], &b[d], sizeof(float)), 0)
            << KvDtypeName(dtype) << " dim " << dim << " d " << d << ": " << a[d] << " vs " << b[d];
      }
    }
  }
}

// The AVX-512 decoder of a run of rows is the scalar one, bit for bit, row
// by row with each row's scale (NaN for NaN: payloads may differ).
TEST_P(KvRowRoundTripTest, Avx512RowsDecodeEqualsScalar) {
  if (DetectedIsa() < CpuIsa::kAvx512) GTEST_SKIP() << "no AVX-512 on this machine";
  const KvDtype dtype = GetParam();
  std::mt19937 rng(5);
  for (int dim : {16, 48, 64, 80, 256}) {
    for (int rows : {1, 3, 16}) {
      const int64_t row_bytes = KvRowBytes(dtype, dim);
      std::vector<uint8_t> bytes(row_bytes * rows);
      std::vector<float> scales(rows), a(dim), b(static_cast<size_t>(dim) * rows);
      for (uint8_t& x : bytes) x = static_cast<uint8_t>(rng());
      if (dtype == KvDtype::kFp8E4m3 && rows > 1) {
        // fp8 tests rows for NaN codes (0x7f, 0xff) once per row: row 1 has
        // none, row 2 only its last code (the 16-byte tail past 64s at dim
        // 80), the others are random (a NaN in 2 of 256 codes).
        for (int r = 1; r < 3; ++r) {
          for (int64_t i = r * row_bytes; i < (r + 1) * row_bytes; ++i) {
            if ((bytes[i] & 0x7f) == 0x7f) bytes[i] ^= 1;
          }
        }
        bytes[3 * row_bytes - 1] = 0xff;
      }
      for (float& s : scales) {
        s = std::ldexp(1.0f + (rng() % 1000) / 1000.0f, static_cast<int>(rng() % 20) - 10);
      }
      DequantizeKvRowsAvx512(dtype, bytes.data(), scales.data(), rows, dim, b.data());
      for (int r = 0; r < rows; ++r) {
        const float s = KvHasScale(dtype) ? scales[r] : 1.0f;
        DequantizeKvRow(dtype, bytes.data() + r * row_bytes, s, dim, a.data());
        for (int d = 0; d < dim; ++d) {
          const float got = b[static_cast<size_t>(r) * dim + d];
          if (std::isnan(a[d]) && std::isnan(got)) continue;
          ASSERT_EQ(std::memcmp(&a[d], &got, sizeof(float)), 0)
              << KvDtypeName(dtype) << " dim " << dim << " row " << r << " d " << d << ": " << a[d]
              << " vs " << got;
        }
      }
    }
  }
}

// QuantizeKvRowAvx512 writes QuantizeKvRow's bytes and scale: random rows
// over 40 binades, rows whose values divide by the scale into exact ties
// between codes (the scale a power of two), rows with -0, subnormals, a NaN,
// an infinity or nothing but zeros, and a dim the vector path leaves alone.
TEST_P(KvRowRoundTripTest, Avx512EncodeEqualsScalar) {
  if (DetectedIsa() < CpuIsa::kAvx512) GTEST_SKIP() << "no AVX-512 on this machine";
  const KvDtype dtype = GetParam();
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float code_max = KvHasScale(dtype) ? KvCodeMax(dtype) : 1.0f;
  std::vector<float> values;  // the format's non-negative code values
  for (int c = 0; c <= 126; ++c) {
    if (dtype == KvDtype::kFp8E4m3) values.push_back(Fp8E4m3ToFloat(static_cast<uint8_t>(c)));
    if (dtype == KvDtype::kFp4E2m1 && c < 8)
      values.push_back(Fp4E2m1ToFloat(static_cast<uint8_t>(c)));
    if (KvHasScale(dtype) && (dtype == KvDtype::kInt8 || dtype == KvDtype::kInt4) &&
        c <= code_max) {
      values.push_back(static_cast<float>(c));
    }
  }
  std::vector<float> ties{0.0f};  // midpoints between neighbouring code values
  for (size_t c = 0; c + 1 < values.size(); ++c) ties.push_back(0.5f * (values[c] + values[c + 1]));
  for (int dim : {16, 20, 48, 64, 128, 256}) {
    for (int trial = 0; trial < 400; ++trial) {
      std::vector<float> row(dim);
      const float magnitude = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);
      for (float& x : row) x = normal(rng) * magnitude;
      const int kind = trial % 8;
      if (kind == 1) {  // the scale is 2^-3 exactly; every value a tie or near one
        for (float& x : row) x = ties[rng() % ties.size()] * 0x1p-3f * (rng() % 2 ? 1.0f : -1.0f);
        row[0] = code_max * 0x1p-3f;
      } else if (kind == 2) {
        row[rng() % dim] = -0.0f;
        row[rng() % dim] = 1e-40f;
        row[rng() % dim] = -std::numeric_limits<float>::denorm_min();
      } else if (kind == 3) {
        row[rng() % dim] = std::nanf("");
      } else if (kind == 4) {
        row[rng() % dim] = -std::numeric_limits<float>::infinity();
      } else if (kind == 5) {
        std::fill(row.begin(), row.end(), trial % 16 == 5 ? 0.0f : -0.0f);
      } else if (kind == 6) {
        row[rng() % dim] = std::numeric_limits<float>::max();
      }
      const int64_t bytes = KvRowBytes(dtype, dim);
      std::vector<uint8_t> want(bytes, 0xa5), got(bytes, 0x5a);
      const float want_s = QuantizeKvRow(dtype, row.data(), dim, want.data());
      const float got_s = QuantizeKvRowAvx512(dtype, row.data(), dim, got.data());
      ASSERT_EQ(want, got) << KvDtypeName(dtype) << " dim " << dim << " trial " << trial;
      ASSERT_TRUE(std::memcmp(&want_s, &got_s, sizeof(float)) == 0 ||
                  (std::isnan(want_s) && std::isnan(got_s)))
          << KvDtypeName(dtype) << " dim " << dim << " trial " << trial << ": scale " << want_s
          << " vs " << got_s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, KvRowRoundTripTest, ::testing::ValuesIn(kAllKvDtypes),
                         [](const auto& info) { return std::string(KvDtypeName(info.param)); });

}  // namespace
}  // namespace kvserve::kernels
