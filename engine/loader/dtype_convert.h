// Exact conversions of checkpoint element types to fp32. Private to
// engine/loader/ (tests include it too).
//
// Every F16 and BF16 value is exactly representable in fp32, so these are
// bit-exact: BF16 is the upper half of an fp32; F16 keeps sign, zero (incl.
// -0), subnormals, infinities and NaN payloads (a signalling NaN stays
// signalling: the payload is shifted, never quietened).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "engine/loader/safetensors.h"
#include "kernels/cpu/half_float.h"

namespace kvserve::engine {

// The element conversions live with the kernels (the KV cache decodes the
// same formats); the loader uses them under its own names.
using kernels::BF16ToF32;
using kernels::F16ToF32;

// Bytes per element of a supported dtype.
size_t DTypeSize(DType dtype);

// Converts `count` little-endian elements at `src` (any alignment) to fp32.
void ConvertToF32(DType dtype, const uint8_t* src, size_t count, float* out);

}  // namespace kvserve::engine
