// The scalar bf16 dot-product body and the bf16 row rounding (gemm_dot.h,
// kBF16Dot); the vector bodies are in gemm_bf16dot_avx2.cc (emulated) and
// gemm_bf16dot_avx512.cc (vdpbf16ps).
#include <algorithm>
#include <bit>
#include <cstdint>

#include "kernels/cpu/gemm_dot.h"
#include "kernels/cpu/half_float.h"

namespace kvserve::kernels::internal {

uint16_t RoundToBf16FlushSubnormal(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  const uint32_t magnitude = bits & 0x7fffffffu, high = bits >> 16;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(high | 0x40);    // a quiet NaN
  if (magnitude < 0x00800000u) return static_cast<uint16_t>(high & 0x8000);  // signed zero
  return static_cast<uint16_t>((bits + 0x7fffu + (high & 1)) >> 16);
}

void RoundRowsBf16(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* out) {
  const int64_t depth = Bf16DotDepth(k);
  for (int64_t row = 0; row < m; ++row) {
    for (int64_t kk = 0; kk < k; ++kk) {
      out[row * depth + kk] = RoundToBf16FlushSubnormal(x[row * ldx + kk]);
    }
    for (int64_t kk = k; kk < depth; ++kk) out[row * depth + kk] = 0;
  }
}

void GemmBf16DotPanelsScalar(const GemmParams& p, const DotRows& x, int64_t panel_begin,
                             int64_t panel_end) {
  const PackedMatrix& w = *p.w;
  const int64_t depth = Bf16DotDepth(w.k);
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    const int64_t col0 = panel * kGemmPanelWidth;
    const int64_t cols = std::min(kGemmPanelWidth, w.n - col0);
    for (int64_t row = 0; row < p.m; ++row) {
      const auto* xr = reinterpret_cast<const uint16_t*>(x.codes + row * x.ld);
      float* y = p.y + row * p.ldy + col0;
      for (int64_t j = 0; j < cols; ++j) {
        // volatile: GCC 12 at -O3 vectorizes this loop by reassociating the
        // two additions per step (seen: wrong sums, even with
        // -ffp-contract=off); a volatile accumulator keeps them in order.
        volatile float acc = 0.0f;
        for (int64_t kk = 0; kk < depth; kk += 2) {
          const uint16_t* wj = w.As<uint16_t>() + DotElementIndex(col0 + j, kk, depth, 2);
          acc = acc + BF16ToF32(xr[kk + 1]) * BF16ToF32(wj[1]);  // odd first
          acc = acc + BF16ToF32(xr[kk]) * BF16ToF32(wj[0]);
        }
        y[j] = p.bias != nullptr ? acc + p.bias[col0 + j] : acc;
      }
    }
  }
}

}  // namespace kvserve::kernels::internal
