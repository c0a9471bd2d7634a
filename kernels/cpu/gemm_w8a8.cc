// The scalar int8 x int8 product and the row quantizer (gemm_dot.h); the
// vector bodies are in gemm_w8a8_avx2.cc and gemm_w8a8_avx512.cc.
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/gemm_dot.h"

namespace kvserve::kernels::internal {
namespace {

// Bit pattern of |v|. For non-negative floats, integer order is float order,
// and every NaN sorts above +Inf, so an integer max finds the largest |x|
// and notices any NaN whatever the order of the reduction.
inline int32_t AbsBits(float v) {
  int32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits & 0x7fffffff;
}

constexpr int32_t kInfBits = 0x7f800000;

// Rounds to the nearest integer, ties to even, for |v| < 2^22: adding
// 1.5 * 2^23 leaves no fraction bits, so the FPU's default rounding does it.
// Equal to vcvtps2dq on the vector paths.
inline int32_t RoundToNearestEven(float v) {
  constexpr float kMagic = 12582912.0f;
  const float shifted = v + kMagic;  // no -ffast-math: not folded away
  return static_cast<int32_t>(shifted - kMagic);
}

}  // namespace

void QuantizeRowsW8A8(const float* x, int64_t ldx, int64_t m, int64_t k, bool shifted,
                      int8_t* codes, float* scales) {
  const int64_t depth = W8A8Depth(k);
  const int32_t offset = shifted ? 128 : 0;
  for (int64_t row = 0; row < m; ++row) {
    const float* xr = x + row * ldx;
    int8_t* out = codes + row * depth;
    int32_t amax_bits = 0;
    for (int64_t kk = 0; kk < k; ++kk) amax_bits = std::max(amax_bits, AbsBits(xr[kk]));
    float amax;
    std::memcpy(&amax, &amax_bits, sizeof(amax));
    if (amax_bits >= kInfBits || amax_bits == 0) {
      // All zero: scale 0. Inf or NaN: scale NaN, so every output is NaN.
      scales[row] = amax_bits == 0 ? 0.0f : std::numeric_limits<float>::quiet_NaN();
      std::memset(out, offset, static_cast<size_t>(depth));
      continue;
    }
    scales[row] = amax / 127.0f;
    const float inv = 127.0f / amax;
    for (int64_t kk = 0; kk < k; ++kk) {
      const int32_t q = std::clamp(RoundToNearestEven(xr[kk] * inv), -127, 127);
      out[kk] = static_cast<int8_t>(static_cast<uint8_t>(q + offset));
    }
    for (int64_t kk = k; kk < depth; ++kk) out[kk] = static_cast<int8_t>(offset);
  }
}

float StartW8A8Row(int32_t amax_bits, const float* xr, int64_t k, bool shifted, int8_t* out,
                   float* scale) {
  if (amax_bits >= kInfBits || amax_bits == 0) {
    QuantizeRowsW8A8(xr, k, 1, k, shifted, out, scale);
    return 0.0f;
  }
  float amax;
  std::memcpy(&amax, &amax_bits, sizeof(amax));
  *scale = amax / 127.0f;
  for (int64_t kk = k; kk < W8A8Depth(k); ++kk) out[kk] = static_cast<int8_t>(shifted ? 128 : 0);
  return 127.0f / amax;
}

void GemmW8A8PanelsScalar(const GemmParams& p, const DotRows& x, int64_t panel_begin,
                          int64_t panel_end) {
  const PackedMatrix& w = *p.w;
  const int64_t depth = W8A8Depth(w.k);
  const auto* sums = reinterpret_cast<const int32_t*>(w.code_sums.data());
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    const int64_t col0 = panel * kGemmPanelWidth;
    const int64_t cols = std::min(kGemmPanelWidth, w.n - col0);
    for (int64_t row = 0; row < p.m; ++row) {
      const int8_t* xr = x.codes + row * x.ld;
      float* y = p.y + row * p.ldy + col0;
      for (int64_t j = 0; j < cols; ++j) {
        int32_t dot = 0;
        for (int64_t kk = 0; kk < depth; ++kk) {
          const int32_t code = x.shifted ? static_cast<uint8_t>(xr[kk]) : xr[kk];
          dot += code * w.As<int8_t>()[DotElementIndex(col0 + j, kk, depth, 4)];
        }
        if (x.shifted) dot -= 128 * sums[col0 + j];
        const float v = static_cast<float>(dot) * (x.scales[row] * w.scales[col0 + j]);
        y[j] = p.bias != nullptr ? v + p.bias[col0 + j] : v;
      }
    }
  }
}

}  // namespace kvserve::kernels::internal
