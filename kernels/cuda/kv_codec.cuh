// Device-side KV cache codecs: the encodings of kernels/cpu/kv_quant.h,
// written so that a row encoded here has exactly the bytes and scale the CPU
// encoder (QuantizeKvRow) gives for the same fp32 values, and a decoded value
// is exactly the CPU decoder's (code value times scale, one fp32 product).
//
// Exactness rules mirrored from kv_quant.cc (each one is a test in
// tests/gpu/kv_formats_test.cc, KvWriteBytes.*):
//  * scale s = max|row| / code_max, one correctly rounded fp32 division
//    (__fdiv_rn: independent of -use_fast_math); NaN if the row holds NaN.
//  * a code is taken from x / s (again __fdiv_rn); the row is all code 0
//    when s is 0, infinite or NaN.
//  * int8 / int4: rint (ties to even, as std::nearbyint in the default
//    rounding mode), clamped to [-127, 127] / [-8, 7].
//  * fp8 e4m3fn and fp4 e2m1: nearest value, ties to the even code, beyond
//    the largest finite value: the largest (448 / 6); NaN: 0x7f / 0.
//  * bf16 / fp16: the CPU's bit formulas (ties to even; bf16 NaN keeps its
//    payload with the quiet bit set; fp16 overflow to inf at >= 65520).
//  * 4-bit: element 2i is the low nibble of byte i, 2i + 1 the high one.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/cpu/kv_quant.h"

namespace kvserve::kernels::cuda {

// ---- Encoders (one fp32 value -> its code). ----

__device__ __forceinline__ uint16_t KvEncodeBf16(float x) {
  uint32_t b = __float_as_uint(x);
  if (x != x) return static_cast<uint16_t>((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

__device__ __forceinline__ uint16_t KvEncodeHalf(float x) {
  uint32_t b = __float_as_uint(x);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  b &= 0x7fffffffu;
  if (b > 0x7f800000u) return sign | 0x7e00;
  if (b >= 0x477ff000u) return sign | 0x7c00;
  if (b < 0x38800000u) {  // subnormal: exact scaling by 2^24, then ties to even
    return sign | static_cast<uint16_t>(rintf(__fmul_rn(__uint_as_float(b), 0x1p24f)));
  }
  b += 0xc8000fffu + ((b >> 13) & 1u);
  return sign | static_cast<uint16_t>(b >> 13);
}

// e4m3fn, saturating to +-448 (code 0x7e) as the CPU's nearest-code search.
__device__ __forceinline__ uint8_t KvEncodeFp8(float x) {
  if (x != x) return 0x7f;
  const uint8_t sign = (__float_as_uint(x) >> 24) & 0x80;
  const float a = fabsf(x);
  uint32_t code;
  if (a >= 448.0f) {
    code = 126;
  } else if (a < 0x1p-6f) {
    // Subnormals m * 2^-9 (m = 0..7) and 2^-6 (code 8): the scaling is exact.
    code = static_cast<uint32_t>(rintf(__fmul_rn(a, 512.0f)));
  } else {
    // Round the 20 dropped mantissa bits to nearest even; a carry moves into
    // the exponent. Rebias 127 -> 7: (e + 127) << 3 minus 120 << 3.
    uint32_t b = __float_as_uint(a);
    b += 0x7ffffu + ((b >> 20) & 1u);
    code = (b >> 20) - (120u << 3);
    if (code > 126) code = 126;  // [448, 464) rounded up to 480 (NaN): 448
  }
  return sign | static_cast<uint8_t>(code);
}

// E2M1 nibble: 0, .5, 1, 1.5, 2, 3, 4, 6; midpoints decide, ties to even.
__device__ __forceinline__ uint8_t KvEncodeFp4(float x) {
  if (x != x) return 0;
  const uint8_t sign = (__float_as_uint(x) >> 28) & 8;
  const float a = fabsf(x);
  constexpr float kMid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint8_t c = 0;
#pragma unroll
  for (int i = 0; i < 7; ++i) {
    // Above the midpoint of codes i and i + 1: i + 1; at it: the even one.
    if (a > kMid[i] || (a == kMid[i] && (i & 1) == 1)) c = static_cast<uint8_t>(i + 1);
  }
  return sign | c;
}

// ---- Decoders. ----

// How the attention kernels read rows of format F: in chunks of kVec
// consecutive elements (Chunk, kVec * bits / 8 bytes), each decoded to fp32
// by Decode(chunk, out). For the scaled formats Decode gives the code values
// (exact) and the kernel applies the row's scale once per key: to the score
// q.k (q . (c s) = (q . c) s) and to the softmax weight of v (p (c s) =
// (p s) c), which is exact algebra and costs two products per key instead of
// one per element; the rounding differs from decoding c * s first by a few
// ulp (the CPU decodes c * s; tests compare within a bound).
template <KvDtype F>
struct KvChunk;

template <>
struct KvChunk<KvDtype::kFloat32> {
  using Chunk = uint4;
  static constexpr int kVec = 4;
  static constexpr bool kScaled = false;
  __device__ __forceinline__ static void Decode(const Chunk& c, float* f) {
    f[0] = __uint_as_float(c.x);
    f[1] = __uint_as_float(c.y);
    f[2] = __uint_as_float(c.z);
    f[3] = __uint_as_float(c.w);
  }
};

template <>
struct KvChunk<KvDtype::kBfloat16> {
  using Chunk = uint4;
  static constexpr int kVec = 8;
  static constexpr bool kScaled = false;
  __device__ __forceinline__ static void Decode(const Chunk& c, float* f) {
    const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  }
};

template <>
struct KvChunk<KvDtype::kFloat16> {
  using Chunk = uint4;
  static constexpr int kVec = 8;
  static constexpr bool kScaled = false;
  __device__ __forceinline__ static void Decode(const Chunk& c, float* f) {
    const uint32_t w[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 h;
      memcpy(&h, &w[i], 4);
      const float2 v = __half22float2(h);
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  }
};

// The scaled formats read 8 elements per chunk too (8 or 4 bytes), so a
// lane holds as many decoded values as with a 16-bit cache.
template <>
struct KvChunk<KvDtype::kFp8E4m3> {
  using Chunk = uint2;
  static constexpr int kVec = 8;
  static constexpr bool kScaled = true;
  __device__ __forceinline__ static void Decode(const Chunk& c, float* f) {
    const uint32_t w[2] = {c.x, c.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        // Hardware e4m3x2 -> f16x2 (exact: every e4m3 value is an fp16 value).
        const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(
            static_cast<__nv_fp8x2_storage_t>(w[i] >> (16 * j)), __NV_E4M3);
        const float2 v = __half22float2(__half2(r));
        f[4 * i + 2 * j] = v.x;
        f[4 * i + 2 * j + 1] = v.y;
      }
    }
  }
};

template <>
struct KvChunk<KvDtype::kInt8> {
  using Chunk = uint2;
  static constexpr int kVec = 8;
  static constexpr bool kScaled = true;
  // Code q as (2^23 + (q + 128)) - (2^23 + 128): the biased byte goes into the
  // low mantissa bits of 2^23 with one byte permute, then one fp32 add,
  // exactly; full-rate instructions instead of integer-to-float conversions.
  __device__ __forceinline__ static void Decode(const Chunk& c, float* f) {
    const uint32_t w[2] = {c.x ^ 0x80808080u, c.y ^ 0x80808080u};  // q + 128 per byte
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        // Bytes (low to high): byte j of w, 0x00, 0x00, 0x4B.
        const uint32_t bits = __byte_perm(w[i], 0x4B000000u, 0x7540u + j);
        f[4 * i + j] = __uint_as_float(bits) - 8388736.0f;  // 2^23 + 128
      }
    }
  }
};

template <>
struct KvChunk<KvDtype::kInt4> {
  using Chunk = uint32_t;
  static constexpr int kVec = 8;
  static constexpr bool kScaled = true;
  // Code q as (2^23 + (q + 8)) - (2^23 + 8), exactly, as for int8.
  __device__ __forceinline__ static void Decode(const Chunk& c, float* f) {
    const uint32_t w = c ^ 0x88888888u;  // q + 8 per nibble
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      f[j] = __uint_as_float(((w >> (4 * j)) & 15u) | 0x4B000000u) - 8388616.0f;  // 2^23 + 8
    }
  }
};

template <>
struct KvChunk<KvDtype::kFp4E2m1> {
  using Chunk = uint32_t;
  static constexpr int kVec = 8;
  static constexpr bool kScaled = true;
  __device__ __forceinline__ static void Decode(const Chunk& c, float* f) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      // Twice the magnitude of code n & 7 (0, 1, 2, 3, 4, 6, 8, 12) is nibble
      // n & 7 of 0xC8643210; halving is exact; the sign bit goes on last.
      const uint32_t n = (c >> (4 * j)) & 15u;
      const float mag = static_cast<float>((0xC8643210u >> (4 * (n & 7u))) & 15u) * 0.5f;
      f[j] = __uint_as_float(__float_as_uint(mag) | ((n & 8u) << 28));
    }
  }
};

}  // namespace kvserve::kernels::cuda
