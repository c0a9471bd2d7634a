#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/gemm_internal.h"

namespace kvserve::kernels {
namespace {

// A thread's share should be worth waking it for.
constexpr int64_t kMinFmasPerChunk = int64_t{64} * 1024;

}  // namespace

PackedMatrix PackWeights(const float* w, int64_t n, int64_t k) {
  PackedMatrix packed;
  packed.n = n;
  packed.k = k;
  if (n == 0 || k == 0) return packed;  // nothing to pack (and no storage to point into)
  const int64_t panels = (n + kGemmPanelWidth - 1) / kGemmPanelWidth;
  packed.data = AlignedBuffer(static_cast<size_t>(panels * k * kGemmPanelWidth));
  float* out = packed.data.data();
  for (int64_t panel = 0; panel < panels; ++panel) {
    for (int64_t j = 0; j < kGemmPanelWidth; ++j) {
      int64_t row = panel * kGemmPanelWidth + j;
      if (row >= n) break;  // AlignedBuffer is zeroed: padding stays 0.
      const float* src = w + row * k;
      float* dst = out + panel * k * kGemmPanelWidth + j;
      for (int64_t kk = 0; kk < k; ++kk) dst[kk * kGemmPanelWidth] = src[kk];
    }
  }
  return packed;
}

namespace internal {

void GemmPanelsScalar(const GemmParams& p, int64_t panel_begin, int64_t panel_end) {
  const int64_t k = p.w->k, n = p.w->n;
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    const float* w = p.w->data.data() + panel * k * kGemmPanelWidth;
    const int64_t col0 = panel * kGemmPanelWidth;
    const int64_t cols = std::min(kGemmPanelWidth, n - col0);
    for (int64_t row = 0; row < p.m; ++row) {
      const float* x = p.x + row * p.ldx;
      float acc[kGemmPanelWidth] = {};
      for (int64_t kk = 0; kk < k; ++kk) {
        for (int64_t j = 0; j < kGemmPanelWidth; ++j) {
          acc[j] = std::fma(x[kk], w[kk * kGemmPanelWidth + j], acc[j]);
        }
      }
      float* y = p.y + row * p.ldy + col0;
      for (int64_t j = 0; j < cols; ++j) {
        y[j] = p.bias != nullptr ? acc[j] + p.bias[col0 + j] : acc[j];
      }
    }
  }
}

}  // namespace internal

void GemmWithIsa(const GemmParams& p, CpuIsa isa, ThreadPool* pool) {
  if (p.m <= 0 || p.w->n <= 0) return;
  if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) isa = DetectedIsa();
  void (*body)(const GemmParams&, int64_t, int64_t) = internal::GemmPanelsScalar;
  if (isa == CpuIsa::kAvx512) body = internal::GemmPanelsAvx512;
  if (isa == CpuIsa::kAvx2) body = internal::GemmPanelsAvx2;

  const int64_t panels = (p.w->n + kGemmPanelWidth - 1) / kGemmPanelWidth;
  if (pool == nullptr || pool->num_threads() == 1) {
    body(p, 0, panels);
    return;
  }
  // Threads own disjoint column panels; k is never split (gemm.h). About two
  // chunks per thread: few enough that each re-reads x rarely, enough to
  // rebalance when a core is busy with something else.
  const int64_t fmas_per_panel = std::max<int64_t>(1, p.m * p.w->k * kGemmPanelWidth);
  const int64_t grain = std::max(
      {int64_t{1}, kMinFmasPerChunk / fmas_per_panel, panels / (int64_t{2} * pool->num_threads())});
  pool->ParallelFor(panels, grain, [&](int64_t begin, int64_t end) { body(p, begin, end); });
}

void Gemm(const GemmParams& p, ThreadPool* pool) { GemmWithIsa(p, ActiveIsa(), pool); }

}  // namespace kvserve::kernels
