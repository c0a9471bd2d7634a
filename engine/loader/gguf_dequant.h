// Dequantization of ggml tensor blocks to fp32, value for value what the
// `gguf` Python package's gguf.quants.dequantize computes (the same fp32
// operations in the same order; this build never fuses a*b+c, see the
// top-level CMakeLists.txt), which tests/oracle/test_gguf_dequant.py checks
// bit for bit. Private to engine/loader/.
//
// Block layouts (little-endian; d, dmin, m are fp16 scales):
//   Q4_0  d | qs[16]                 x = d * (q - 8)
//   Q4_1  d | m | qs[16]             x = d * q + m
//   Q5_0  d | qh u32 | qs[16]        x = d * (q - 16), bit 4 of q from qh
//   Q5_1  d | m | qh u32 | qs[16]    x = d * q + m
//   Q8_0  d | qs int8[32]            x = q * d
//   (element j < 16 is the low nibble of qs[j], j >= 16 the high nibble of
//   qs[j - 16]; bit j of qh is bit 4 of element j)
//   Q2_K  scales[16] | qs[64] | d | dmin       16 groups of 16
//   Q3_K  hmask[32] | qs[64] | scales[12] | d  16 groups of 16
//   Q4_K  d | dmin | scales[12] | qs[128]      8 groups of 32, 6-bit scales
//   Q5_K  d | dmin | scales[12] | qh[32] | qs[128]
//   Q6_K  ql[128] | qh[64] | scales int8[16] | d
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "engine/loader/gguf_types.h"

namespace kvserve::engine {

// Converts `num_elements` values stored as `type` at `data` (any alignment,
// `num_bytes` long) into out[0, num_elements). InvalidArgument when
// num_elements is not a whole number of blocks or num_bytes does not match.
absl::Status DequantizeGgml(GgmlType type, const uint8_t* data, size_t num_bytes,
                            int64_t num_elements, float* out);

}  // namespace kvserve::engine
