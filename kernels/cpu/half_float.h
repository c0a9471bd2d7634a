// Exact widening of the 16-bit float formats to fp32, shared by the
// checkpoint loader (engine/loader/dtype_convert.h) and the KV cache codecs
// (kernels/cpu/kv_quant.cc).
//
// Every F16 and BF16 value is exactly representable in fp32, so these are
// bit-exact: BF16 is the upper half of an fp32; F16 keeps sign, zero (incl.
// -0), subnormals, infinities and NaN payloads (a signalling NaN stays
// signalling: the payload is shifted, never quietened).
#pragma once

#include <bit>
#include <cstdint>

namespace kvserve::kernels {

inline float BF16ToF32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Branch-free (bit masks, no selects), so the bulk loop vectorises.
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;  // exponent and mantissa
  // Normal: shift into place and rebias the exponent 15 -> 127.
  const uint32_t normal = (magnitude << 13) + ((127u - 15u) << 23);
  // inf / nan: all-ones exponent, mantissa (NaN payload) shifted.
  const uint32_t inf_nan = (magnitude << 13) | 0x7f800000u;
  // Zero / subnormal: mantissa * 2^-24, exact in fp32 (a normal there).
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(magnitude)) * 0x1p-24f);
  const uint32_t is_inf_nan = 0u - static_cast<uint32_t>(magnitude >= 0x7c00u);  // all ones or 0
  const uint32_t is_normal = (0u - static_cast<uint32_t>(magnitude >= 0x0400u)) & ~is_inf_nan;
  const uint32_t is_subnormal = ~(is_inf_nan | is_normal);
  const uint32_t bits = (inf_nan & is_inf_nan) | (normal & is_normal) | (subnormal & is_subnormal);
  return std::bit_cast<float>(sign | bits);
}

}  // namespace kvserve::kernels
