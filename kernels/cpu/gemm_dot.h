// Internal to kernels/cpu: the products whose x is converted too, so that
// the kernels can use dot-product instructions (two formats of gemm.h).
// Both store the matrix as panels of 16 columns whose k-steps are 4 bytes
// per column (packed[panel][step][j][4 bytes]), and convert each row of x
// into the same 4-byte steps: one loop body (gemm_dot_inl.h) serves both.
//
// kW8A8: a step is 4 int8 codes (k rounded up to a multiple of 4).
//   Gemm() quantizes each row of x on its own (so a row's codes never depend
//   on the batch):
//     amax = max_kk |x[kk]|,  x_scale = amax / 127,
//     code[kk] = clamp(nearbyint(x[kk] * (127 / amax)), -127, 127)   (0 if amax == 0)
//   A row holding Inf or NaN gets x_scale = NaN and zero codes, so its
//   outputs are NaN as the fp32 product's would be. Every ISA path computes
//     dot = sum_kk code[kk] * wcode[n][kk]          (exact in int32)
//     y   = float(dot) * (x_scale * scale[n]) + bias[n]
//   with these IEEE operations in this order, so the paths agree bit for bit.
//   |dot| <= 255 * 127 * k stays inside int32 for k < 66,000. The AVX-512
//   VNNI path multiplies unsigned by signed bytes (vpdpbusd), so it takes the
//   codes shifted by +128 and subtracts 128 * code_sums[n] after the loop; the
//   AVX2 path multiplies |code| by the weight with code's sign.
//
// kBF16Dot: a step is 2 bf16 values (k rounded up to even). x and w are
//   rounded to bf16 (nearest even; an fp32 subnormal becomes a signed zero,
//   NaN stays NaN) and, per output, from acc = 0, for each step i in order
//     acc = acc + x[2i+1] * w[2i+1];  acc = acc + x[2i] * w[2i];
//     y = acc + bias[n]
//   (each product is exact in fp32: two 8-bit significands). That is what
//   vdpbf16ps (AVX512-BF16) computes per lane, odd element first; the other
//   paths do the same two rounded additions. With no subnormal inputs its
//   DAZ never applies. Measured equal on Zen 4; Intel documents FTZ on the
//   result, which would differ only where a sum is an fp32 subnormal.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.h"

namespace kvserve::kernels::internal {

// x's rows converted for one of these products.
struct DotRows {
  const int8_t* codes = nullptr;  // [m, ld] bytes; past k: code 0 / bf16 0
  int64_t ld = 0;                 // bytes per row: a multiple of 4
  const float* scales = nullptr;  // kW8A8: [m] x_scale; kBF16Dot: unused
  bool shifted = false;           // kW8A8: codes stored as uint8 code + 128 (VNNI)
};

// k rounded up to a whole number of 4-byte steps, in elements.
inline int64_t W8A8Depth(int64_t k) { return (k + 3) / 4 * 4; }
inline int64_t Bf16DotDepth(int64_t k) { return (k + 1) / 2 * 2; }

// Where W[row][kk] lies in a dot format's packed elements:
// packed[panel][kk / per_step][j][kk % per_step], per_step elements (4 int8
// or 2 bf16) filling each column's 4-byte step; depth is k rounded as above.
inline int64_t DotElementIndex(int64_t row, int64_t kk, int64_t depth, int64_t per_step) {
  return (row / kGemmPanelWidth) * depth * kGemmPanelWidth +
         (kk / per_step) * per_step * kGemmPanelWidth + (row % kGemmPanelWidth) * per_step +
         kk % per_step;
}

// kW8A8: quantizes rows [0, m) of x as above into codes [m, W8A8Depth(k)]
// and scales [m]; shifted stores code + 128 as a byte. The Avx2 and Avx512
// ones are the same, byte for byte.
void QuantizeRowsW8A8(const float* x, int64_t ldx, int64_t m, int64_t k, bool shifted,
                      int8_t* codes, float* scales);
void QuantizeRowsW8A8Avx2(const float* x, int64_t ldx, int64_t m, int64_t k, bool shifted,
                          int8_t* codes, float* scales);
void QuantizeRowsW8A8Avx512(const float* x, int64_t ldx, int64_t m, int64_t k, bool shifted,
                            int8_t* codes, float* scales);
// The vector quantizers' start of one row xr, from the integer max of its
// |x| bit patterns: a row of zeros, or one holding Inf or NaN, is quantized
// whole by the scalar quantizer (returns 0); otherwise stores the row's scale
// and its padding codes out[k, W8A8Depth(k)), and returns 127 / max|x|, the
// factor its codes are rounded from.
float StartW8A8Row(int32_t amax_bits, const float* xr, int64_t k, bool shifted, int8_t* out,
                   float* scale);

// kBF16Dot: the bf16 rounding above, one value.
uint16_t RoundToBf16FlushSubnormal(float v);
// Rounds rows [0, m) of x into out [m, Bf16DotDepth(k)] bf16 values; the
// Avx2 and Avx512 ones are the same, bit for bit.
void RoundRowsBf16(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* out);
void RoundRowsBf16Avx2(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* out);
void RoundRowsBf16Avx512(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* out);

// y for all rows and the column panels [panel_begin, panel_end) of p.w.
void GemmW8A8PanelsScalar(const GemmParams& p, const DotRows& x, int64_t panel_begin,
                          int64_t panel_end);
void GemmW8A8PanelsAvx2(const GemmParams& p, const DotRows& x, int64_t panel_begin,
                        int64_t panel_end);
void GemmW8A8PanelsAvx512Vnni(const GemmParams& p, const DotRows& x, int64_t panel_begin,
                              int64_t panel_end);
void GemmBf16DotPanelsScalar(const GemmParams& p, const DotRows& x, int64_t panel_begin,
                             int64_t panel_end);
void GemmBf16DotPanelsAvx2(const GemmParams& p, const DotRows& x, int64_t panel_begin,
                           int64_t panel_end);
void GemmBf16DotPanelsAvx512Bf16(const GemmParams& p, const DotRows& x, int64_t panel_begin,
                                 int64_t panel_end);

}  // namespace kvserve::kernels::internal
