#include "kernels/cpu/kv_quant.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/half_float.h"

namespace kvserve::kernels {
namespace {

struct Fp8Table {
  std::array<float, 256> value;  // every code, NaN for 0x7f / 0xff
  Fp8Table() {
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 15, m = c & 7;
      float v = e == 0 ? std::ldexp(static_cast<float>(m), -9)
                       : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
      if ((c & 0x7f) == 0x7f) v = std::nanf("");
      value[c] = (c & 0x80) != 0 ? -v : v;
    }
  }
};
const Fp8Table& Fp8() {
  static const Fp8Table table;
  return table;
}

constexpr std::array<float, 16> kFp4Values = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,
                                              4.0f,  6.0f,  -0.0f, -0.5f, -1.0f, -1.5f,
                                              -2.0f, -3.0f, -4.0f, -6.0f};

// The nearest e4m3 code to a >= 0 (not NaN), ties to the even code, by the
// arithmetic of its bits: below 2^-6 the codes step by 2^-9 (and 8 is 2^-6,
// so rounding up into the normals is right); above, rounding the fp32
// mantissa to 3 bits to nearest even carries into the exponent as it should.
// At or above 448 (the largest finite code, 126): 126.
uint8_t Fp8Magnitude(float a) {
  if (a >= 448.0f) return 0x7e;
  if (a < 0x1p-6f) return static_cast<uint8_t>(std::nearbyint(a * 0x1p9f));
  uint32_t b = std::bit_cast<uint32_t>(a);
  b += 0x7ffff + ((b >> 20) & 1);
  return static_cast<uint8_t>((b >> 20) - ((127 - 7) << 3));  // rebias 127 -> 7
}

// The same for E2M1 (codes 0..7: 0, .5, 1, 1.5, 2, 3, 4, 6): steps of .5 below
// 1, then a 1-bit mantissa; at or above 6: 7.
uint8_t Fp4Magnitude(float a) {
  if (a >= 6.0f) return 7;
  if (a < 1.0f) return static_cast<uint8_t>(std::nearbyint(a * 2.0f));
  uint32_t b = std::bit_cast<uint32_t>(a);
  b += 0x1fffff + ((b >> 22) & 1);
  return static_cast<uint8_t>((b >> 22) - ((127 - 1) << 1));  // rebias 127 -> 1
}

// max|x| over the row; NaN if any element is NaN.
float AbsMax(const float* x, int dim) {
  float m = 0.0f;
  for (int d = 0; d < dim; ++d) {
    const float a = std::fabs(x[d]);
    if (std::isnan(a)) return a;
    m = std::max(m, a);
  }
  return m;
}

// Symmetric integer codes round(x / s) clamped to [lo, hi]; all 0 when s is
// 0, infinite or NaN (the decoder then yields 0 * s).
template <typename Store>
void IntCodes(const float* x, int dim, float s, int lo, int hi, Store store) {
  const bool usable = s > 0.0f && std::isfinite(s);
  for (int d = 0; d < dim; ++d) {
    int q = 0;
    if (usable) q = static_cast<int>(std::clamp(std::nearbyint(x[d] / s), float(lo), float(hi)));
    store(d, q);
  }
}

}  // namespace

std::string_view KvDtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFloat32:
      return "auto";
    case KvDtype::kBfloat16:
      return "bfloat16";
    case KvDtype::kFloat16:
      return "float16";
    case KvDtype::kFp8E4m3:
      return "fp8_e4m3";
    case KvDtype::kInt8:
      return "int8";
    case KvDtype::kInt4:
      return "int4";
    case KvDtype::kFp4E2m1:
      return "fp4_e2m1";
  }
  return "?";
}

std::optional<KvDtype> ParseKvDtype(std::string_view name) {
  for (KvDtype d : kAllKvDtypes) {
    if (KvDtypeName(d) == name) return d;
  }
  return std::nullopt;
}

int64_t KvRowBytes(KvDtype dtype, int64_t dim) {
  switch (dtype) {
    case KvDtype::kFloat32:
      return 4 * dim;
    case KvDtype::kBfloat16:
    case KvDtype::kFloat16:
      return 2 * dim;
    case KvDtype::kFp8E4m3:
    case KvDtype::kInt8:
      return dim;
    case KvDtype::kInt4:
    case KvDtype::kFp4E2m1:
      return (dim + 1) / 2;
  }
  return 0;
}

bool KvHasScale(KvDtype dtype) { return KvCodeMax(dtype) > 0.0f; }

float KvCodeMax(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFp8E4m3:
      return 448.0f;
    case KvDtype::kInt8:
      return 127.0f;
    case KvDtype::kInt4:
      return 8.0f;  // the largest |x| maps to -8 or, clamped, +7 (kv_quant.h)
    case KvDtype::kFp4E2m1:
      return 6.0f;
    default:
      return 0.0f;
  }
}

uint16_t FloatToBf16(float x) {
  uint32_t b = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((b >> 16) | 0x40);  // stays a quiet NaN
  b += 0x7fff + ((b >> 16) & 1);
  return static_cast<uint16_t>(b >> 16);
}

uint16_t FloatToHalf(float x) {
  uint32_t b = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  b &= 0x7fffffff;
  if (b > 0x7f800000) return sign | 0x7e00;   // NaN
  if (b >= 0x477ff000) return sign | 0x7c00;  // >= 65520 (or inf): inf
  if (b < 0x38800000) {                       // below 2^-14: subnormal, step 2^-24
    // Exact scaling by a power of two, then round to nearest even; 1024 is
    // the smallest normal's encoding, so carrying into it is right.
    return sign | static_cast<uint16_t>(std::nearbyint(std::bit_cast<float>(b) * 0x1p24f));
  }
  // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits
  // to nearest even; a carry moves into the exponent as it should.
  b += 0xc8000fffu + ((b >> 13) & 1);
  return sign | static_cast<uint16_t>(b >> 13);
}

uint8_t FloatToFp8E4m3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  return sign | Fp8Magnitude(std::fabs(x));
}

float Fp8E4m3ToFloat(uint8_t code) { return Fp8().value[code]; }

uint8_t FloatToFp4E2m1(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  return sign | Fp4Magnitude(std::fabs(x));
}

float Fp4E2m1ToFloat(uint8_t code) { return kFp4Values[code & 15]; }

float QuantizeKvRow(KvDtype dtype, const float* x, int dim, uint8_t* dst) {
  switch (dtype) {
    case KvDtype::kFloat32:
      std::memcpy(dst, x, sizeof(float) * dim);
      return 1.0f;
    case KvDtype::kBfloat16:
    case KvDtype::kFloat16:
      for (int d = 0; d < dim; ++d) {
        const uint16_t h = dtype == KvDtype::kBfloat16 ? FloatToBf16(x[d]) : FloatToHalf(x[d]);
        std::memcpy(dst + 2 * d, &h, 2);
      }
      return 1.0f;
    default:
      break;
  }
  const float s = AbsMax(x, dim) / KvCodeMax(dtype);
  const bool usable = s > 0.0f && std::isfinite(s);
  switch (dtype) {
    case KvDtype::kFp8E4m3:
      for (int d = 0; d < dim; ++d) dst[d] = usable ? FloatToFp8E4m3(x[d] / s) : 0;
      break;
    case KvDtype::kInt8:
      IntCodes(x, dim, s, -127, 127,
               [&](int d, int q) { dst[d] = static_cast<uint8_t>(static_cast<int8_t>(q)); });
      break;
    case KvDtype::kInt4:
      std::memset(dst, 0, KvRowBytes(dtype, dim));
      IntCodes(x, dim, s, -8, 7, [&](int d, int q) {
        dst[d / 2] |= static_cast<uint8_t>((q & 15) << (4 * (d & 1)));
      });
      break;
    case KvDtype::kFp4E2m1:
      std::memset(dst, 0, KvRowBytes(dtype, dim));
      for (int d = 0; d < dim; ++d) {
        const uint8_t c = usable ? FloatToFp4E2m1(x[d] / s) : 0;
        dst[d / 2] |= static_cast<uint8_t>(c << (4 * (d & 1)));
      }
      break;
    default:
      break;
  }
  return s;
}

namespace {

// Decodes elements [begin, dim) of a row; begin is even for the 4-bit formats.
void DequantizeTail(KvDtype dtype, const uint8_t* src, float s, int begin, int dim, float* dst) {
  switch (dtype) {
    case KvDtype::kFloat32:
      std::memcpy(dst + begin, src + 4 * begin, sizeof(float) * (dim - begin));
      return;
    case KvDtype::kBfloat16:
    case KvDtype::kFloat16:
      for (int d = begin; d < dim; ++d) {
        uint16_t h;
        std::memcpy(&h, src + 2 * d, 2);
        dst[d] = dtype == KvDtype::kBfloat16 ? BF16ToF32(h) : F16ToF32(h);
      }
      return;
    case KvDtype::kFp8E4m3: {
      const float* table = Fp8().value.data();
      for (int d = begin; d < dim; ++d) dst[d] = table[src[d]] * s;
      return;
    }
    case KvDtype::kInt8:
      for (int d = begin; d < dim; ++d) {
        dst[d] = static_cast<float>(static_cast<int8_t>(src[d])) * s;
      }
      return;
    case KvDtype::kInt4:
      for (int d = begin; d < dim; ++d) {
        const int q = (src[d / 2] >> (4 * (d & 1))) & 15;
        dst[d] = static_cast<float>((q ^ 8) - 8) * s;  // sign-extend the nibble
      }
      return;
    case KvDtype::kFp4E2m1:
      for (int d = begin; d < dim; ++d) dst[d] = kFp4Values[(src[d / 2] >> (4 * (d & 1))) & 15] * s;
      return;
  }
}

// The 8 nibbles of a little-endian 32-bit word, element e = bits [4e, 4e + 4).
__attribute__((target("avx2"))) inline __m256i Nibbles(const uint8_t* src) {
  uint32_t word;
  std::memcpy(&word, src, 4);
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts),
                          _mm256_set1_epi32(15));
}

// e4m3fn codes (one per 32-bit lane) to fp32, as Fp8E4m3ToFloat: normal
// codes rebias the exponent (7 -> 127) and move the 3 mantissa bits up;
// subnormals are m * 2^-9 (exact); 0x7f / 0xff are NaN.
__attribute__((target("avx2"))) inline __m256 Fp8ToFloat8(__m256i c) {
  const __m256i e = _mm256_and_si256(_mm256_srli_epi32(c, 3), _mm256_set1_epi32(15));
  const __m256i m = _mm256_and_si256(c, _mm256_set1_epi32(7));
  const __m256 normal = _mm256_castsi256_ps(
      _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(120)), 23),
                      _mm256_slli_epi32(m, 20)));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(0x1p-9f));
  __m256 v = _mm256_blendv_ps(normal, sub,
                              _mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_setzero_si256())));
  const __m256i is_nan =
      _mm256_cmpeq_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x7f)), _mm256_set1_epi32(0x7f));
  v = _mm256_blendv_ps(v, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()),
                       _mm256_castsi256_ps(is_nan));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
  return _mm256_or_ps(v, _mm256_castsi256_ps(sign));
}

__attribute__((target("avx2,f16c"))) __m256 HalfToFloat8(const uint8_t* src) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
}

// CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports knows no "f16c").
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

}  // namespace

void DequantizeKvRow(KvDtype dtype, const uint8_t* src, float s, int dim, float* dst) {
  DequantizeTail(dtype, src, s, 0, dim, dst);
}

__attribute__((target("avx2"))) void DequantizeKvRowAvx2(KvDtype dtype, const uint8_t* src, float s,
                                                         int dim, float* dst) {
  static const bool f16c = HasF16c();
  const __m256 vs = _mm256_set1_ps(s);
  const __m256 fp4_table = _mm256_loadu_ps(kFp4Values.data());
  int d = 0;
  switch (dtype) {
    case KvDtype::kFloat32:
      break;
    case KvDtype::kBfloat16:
      for (; d + 8 <= dim; d += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * d));
        const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_ps(dst + d, _mm256_castsi256_ps(w));
      }
      break;
    case KvDtype::kFloat16:
      // Exact conversion, as F16ToF32 (NaN stays NaN; its payload may differ).
      for (; f16c && d + 8 <= dim; d += 8) _mm256_storeu_ps(dst + d, HalfToFloat8(src + 2 * d));
      break;
    case KvDtype::kFp8E4m3:
      for (; d + 8 <= dim; d += 8) {
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + d));
        _mm256_storeu_ps(dst + d, _mm256_mul_ps(Fp8ToFloat8(_mm256_cvtepu8_epi32(b)), vs));
      }
      break;
    case KvDtype::kInt8:
      for (; d + 8 <= dim; d += 8) {
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + d));
        const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
        _mm256_storeu_ps(dst + d, _mm256_mul_ps(v, vs));
      }
      break;
    case KvDtype::kInt4:
      for (; d + 8 <= dim; d += 8) {
        const __m256i eight = _mm256_set1_epi32(8);
        const __m256i q = _mm256_sub_epi32(_mm256_xor_si256(Nibbles(src + d / 2), eight), eight);
        _mm256_storeu_ps(dst + d, _mm256_mul_ps(_mm256_cvtepi32_ps(q), vs));
      }
      break;
    case KvDtype::kFp4E2m1:
      for (; d + 8 <= dim; d += 8) {
        // Magnitude from the 8-entry table in a register, then the sign bit.
        const __m256i n = Nibbles(src + d / 2);
        const __m256 mag = _mm256_permutevar8x32_ps(fp4_table, n);  // uses n & 7
        const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(n, _mm256_set1_epi32(8)), 28);
        const __m256 v = _mm256_or_ps(mag, _mm256_castsi256_ps(sign));
        _mm256_storeu_ps(dst + d, _mm256_mul_ps(v, vs));
      }
      break;
  }
  DequantizeTail(dtype, src, s, d, dim, dst);
}

}  // namespace kvserve::kernels
