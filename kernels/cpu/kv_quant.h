// KV cache element formats: how one row (one token, one kv head: head_dim
// values) of K or V is stored, and its encoder and decoder.
//
// Row layout per format (engine/kv_cache.h places the rows in blocks):
//
//   kFloat32   head_dim x fp32                                     no scale
//   kBfloat16  head_dim x bf16 (round to nearest even)             no scale
//   kFloat16   head_dim x IEEE fp16 (round to nearest even)        no scale
//   kFp8E4m3   head_dim x OCP e4m3fn byte of x / s, s = max|row| / 448
//   kInt8      head_dim x int8 round(x / s) in [-127, 127], s = max|row| / 127
//   kInt4      ceil(head_dim / 2) bytes, round(x / s) clamped to [-8, 7]
//              (two's complement nibbles), s = max|row| / 8: all 16 codes
//              are used, and a value above 7.5 s (only the positive side
//              has one) is off by at most s instead of s / 2. Measured on
//              real models (docs/engine.md) this beats s = max|row| / 7,
//              whose step is 8/7 as wide.
//   kFp4E2m1   ceil(head_dim / 2) bytes of E2M1 nibbles (sign, 2 exponent,
//              1 mantissa bit: 0, .5, 1, 1.5, 2, 3, 4, 6) of x / s, s = max|row| / 6
//
// 4-bit formats: element 2i is the low nibble of byte i, 2i + 1 the high
// nibble (0 when head_dim is odd). The scaled formats keep one fp32 scale s
// per row beside the data; a value decodes to code_value * s in fp32. Every
// rounding is to nearest, ties to even (even code for the minifloats).
//
// Invariant the engine's exactness rests on: a row's bytes and scale depend
// only on that row's values, never on other rows, the batch or the thread.
//
// A row holding NaN (the tests' poison) encodes to NaN for the float formats
// and to scale NaN (all codes 0) for the scaled ones, so it decodes to NaN.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "kernels/cpu/half_float.h"

namespace kvserve::kernels {

enum class KvDtype : uint8_t { kFloat32, kBfloat16, kFloat16, kFp8E4m3, kInt8, kInt4, kFp4E2m1 };

inline constexpr KvDtype kAllKvDtypes[] = {KvDtype::kFloat32, KvDtype::kBfloat16, KvDtype::kFloat16,
                                           KvDtype::kFp8E4m3, KvDtype::kInt8,     KvDtype::kInt4,
                                           KvDtype::kFp4E2m1};

// The --kv_cache_dtype spelling: auto (fp32), bfloat16, float16, fp8_e4m3,
// int8, int4, fp4_e2m1.
std::string_view KvDtypeName(KvDtype dtype);
std::optional<KvDtype> ParseKvDtype(std::string_view name);

// Bytes of one row of `dim` values.
int64_t KvRowBytes(KvDtype dtype, int64_t dim);
// True for the formats that store one fp32 scale per row.
bool KvHasScale(KvDtype dtype);
// True for the formats whose rows hold each head's K and V rotated
// (kernels::RotateHeads, engine/kv_cache.h): the integer ones and fp4, whose
// uniform or near-uniform codes a per-row scale set by an outlier channel
// wastes. fp8's codes are logarithmic; rotated, it measured better on one
// real model and worse on the other (docs/engine.md), so it stays as is.
inline bool KvRowsRotated(KvDtype dtype) {
  return dtype == KvDtype::kInt8 || dtype == KvDtype::kInt4 || dtype == KvDtype::kFp4E2m1;
}
// What max|row| maps to (448, 127, 8, 6) in a scaled format; 0 otherwise.
float KvCodeMax(KvDtype dtype);

// Encodes src[0, dim) into dst (KvRowBytes bytes); returns the row's scale
// (1 for the formats without one).
float QuantizeKvRow(KvDtype dtype, const float* src, int dim, uint8_t* dst);
// The same bytes and scale, 16 values at a time for the scaled formats when
// dim % 16 == 0 (else, and for the others, QuantizeKvRow). Needs AVX-512F.
float QuantizeKvRowAvx512(KvDtype dtype, const float* src, int dim, uint8_t* dst);
// dst[0, dim) = decoded row.
void DequantizeKvRow(KvDtype dtype, const uint8_t* src, float scale, int dim, float* dst);
// The same with AVX2 (8 values at a time); bit-identical to DequantizeKvRow
// (every decode is an exact conversion and one fp32 product). Needs AVX2.
void DequantizeKvRowAvx2(KvDtype dtype, const uint8_t* src, float scale, int dim, float* dst);
// `rows` rows stored back to back (KvRowBytes apart) into dst (dim floats
// apart), row r with scale scales[r] (nullptr: 1), 16 values at a time with
// AVX-512F; bit-identical to DequantizeKvRow. Needs dim % 16 == 0.
void DequantizeKvRowsAvx512(KvDtype dtype, const uint8_t* src, const float* scales, int rows,
                            int dim, float* dst);

// Scalar codecs, exposed for tests.
uint16_t FloatToBf16(float x);
inline float Bf16ToFloat(uint16_t h) { return BF16ToF32(h); }  // half_float.h
uint16_t FloatToHalf(float x);
inline float HalfToFloat(uint16_t h) { return F16ToF32(h); }
uint8_t FloatToFp8E4m3(float x);  // |x| beyond 448 saturates to 448; NaN -> 0x7f
float Fp8E4m3ToFloat(uint8_t code);
uint8_t FloatToFp4E2m1(float x);  // |x| beyond 6 saturates to 6; NaN -> 0
float Fp4E2m1ToFloat(uint8_t code);

}  // namespace kvserve::kernels
