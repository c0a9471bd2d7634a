// Internal to kernels/cpu: the int8 x int8 product behind WeightFormat::kW8A8.
//
// Gemm() quantizes each row of x on its own (so a row's codes never depend on
// the batch):
//   amax = max_kk |x[kk]|,  x_scale = amax / 127,
//   code[kk] = clamp(nearbyint(x[kk] * (127 / amax)), -127, 127)   (0 if amax == 0)
// A row holding Inf or NaN gets x_scale = NaN and zero codes, so its outputs
// are NaN as the fp32 product's would be. Then every ISA path computes
//   dot = sum_kk code[kk] * wcode[n][kk]          (exact in int32)
//   y   = float(dot) * (x_scale * scale[n]) + bias[n]
// with these IEEE operations in this order, so the paths agree bit for bit.
// |dot| <= 255 * 127 * k stays inside int32 for k < 66,000.
//
// The AVX-512 VNNI path multiplies unsigned by signed bytes (vpdpbusd), so it
// takes the codes shifted by +128 and subtracts 128 * code_sums[n] after the
// loop; the AVX2 path multiplies |code| by the weight with code's sign.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.h"

namespace kvserve::kernels::internal {

struct QuantizedRows {
  const int8_t* codes = nullptr;  // [m, ld]; the columns past k are code 0
  int64_t ld = 0;                 // k rounded up to a multiple of 4
  const float* scales = nullptr;  // [m] x_scale
  bool shifted = false;           // codes stored as uint8 code + 128 (VNNI)
};

// k rounded up to the 4-deep VNNI step.
inline int64_t W8A8Depth(int64_t k) { return (k + 3) / 4 * 4; }

// Quantizes rows [0, m) of x as above into codes [m, W8A8Depth(k)] and
// scales [m]; shifted stores code + 128 as a byte.
void QuantizeRowsW8A8(const float* x, int64_t ldx, int64_t m, int64_t k, bool shifted,
                      int8_t* codes, float* scales);
// The same, byte for byte, with AVX-512F.
void QuantizeRowsW8A8Avx512(const float* x, int64_t ldx, int64_t m, int64_t k, bool shifted,
                            int8_t* codes, float* scales);

// y for all rows and the column panels [panel_begin, panel_end) of p.w
// (kW8A8), from x's codes.
void GemmW8A8PanelsScalar(const GemmParams& p, const QuantizedRows& x, int64_t panel_begin,
                          int64_t panel_end);
void GemmW8A8PanelsAvx2(const GemmParams& p, const QuantizedRows& x, int64_t panel_begin,
                        int64_t panel_end);
void GemmW8A8PanelsAvx512Vnni(const GemmParams& p, const QuantizedRows& x, int64_t panel_begin,
                              int64_t panel_end);

}  // namespace kvserve::kernels::internal
