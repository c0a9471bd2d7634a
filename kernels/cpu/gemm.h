// Matrix products y = x · Wᵀ (+ bias) for linear layers.
//
// W is stored as Hugging Face nn.Linear does, [n, k] row-major, and packed
// once at load time into panels of kGemmPanelWidth output columns:
//   packed[panel][kk][j] = W[panel * 16 + j][kk]      (zero for j past n)
// so one k-step of one panel is one contiguous 64-byte line.
//
// Batch invariance (docs/architecture.md): every y[m][n] is accumulated as
//   acc = 0; for kk in 0..k-1: acc = fma(x[m][kk], W[n][kk], acc); y = acc + bias[n]
// in exactly this order, whatever m, the row tiling, the ISA path or the thread
// count. Work is split across threads by column panels, never across k.
#pragma once

#include <cstdint>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::kernels {

inline constexpr int64_t kGemmPanelWidth = 16;

struct PackedMatrix {
  int64_t n = 0;       // output features (rows of W)
  int64_t k = 0;       // input features
  AlignedBuffer data;  // ceil(n / 16) * k * 16 floats
};

// Packs row-major w[n][k].
PackedMatrix PackWeights(const float* w, int64_t n, int64_t k);

struct GemmParams {
  const float* x = nullptr;  // [m, k], row stride ldx
  int64_t ldx = 0;
  const PackedMatrix* w = nullptr;
  const float* bias = nullptr;  // [n] or nullptr
  float* y = nullptr;           // [m, n], row stride ldy
  int64_t ldy = 0;
  int64_t m = 0;
};

// Runs on ActiveIsa(). pool == nullptr runs on the calling thread alone.
// (The scalar path, for CPUs without AVX2, is correct but slow.)
void Gemm(const GemmParams& p, ThreadPool* pool);

// Gemm on an explicit ISA path (tests compare paths bit for bit; benchmarks).
// An isa the CPU lacks falls back to DetectedIsa().
void GemmWithIsa(const GemmParams& p, CpuIsa isa, ThreadPool* pool);

}  // namespace kvserve::kernels
