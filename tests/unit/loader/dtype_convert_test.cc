#include "engine/loader/dtype_convert.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

// IEEE binary16 decoded from its definition, in double: (-1)^s * 2^(e-15) *
// 1.m for normals, 2^-14 * 0.m for subnormals.
double HalfReference(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<double>(1024 + mantissa), exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

TEST(DTypeConvertTest, EveryHalfConvertsExactly) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float got = F16ToF32(static_cast<uint16_t>(h));
    const double want = HalfReference(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      // Sign and payload survive: the f32 payload is the f16 payload << 13.
      ASSERT_EQ(std::bit_cast<uint32_t>(got),
                ((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x3ffu) << 13))
          << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << std::hex << h;
      ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << std::hex << h;  // -0 too
    }
  }
}

TEST(DTypeConvertTest, BulkConversionMatchesScalar) {
  // Odd count and an odd source address: no alignment or tail assumptions.
  std::vector<uint8_t> buffer(1 + 2 * 0x10001);
  for (size_t i = 0; i <= 0x10000; ++i) {
    const uint16_t h = static_cast<uint16_t>(i * 40503u);
    std::memcpy(buffer.data() + 1 + 2 * i, &h, 2);
  }
  const size_t count = 0x10001;
  std::vector<float> f16(count), bf16(count);
  ConvertToF32(DType::kF16, buffer.data() + 1, count, f16.data());
  ConvertToF32(DType::kBF16, buffer.data() + 1, count, bf16.data());
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, buffer.data() + 1 + 2 * i, 2);
    ASSERT_EQ(std::bit_cast<uint32_t>(f16[i]), std::bit_cast<uint32_t>(F16ToF32(h))) << i;
    ASSERT_EQ(std::bit_cast<uint32_t>(bf16[i]), static_cast<uint32_t>(h) << 16) << i;
  }
}

TEST(DTypeConvertTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_STREQ(DTypeName(DType::kF32), "F32");
  EXPECT_STREQ(DTypeName(DType::kF16), "F16");
  EXPECT_STREQ(DTypeName(DType::kBF16), "BF16");
}

}  // namespace
}  // namespace kvserve::engine
