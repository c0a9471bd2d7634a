// Helpers of the GEMM format tests (gemm_formats_test.cc, gemm_dot_test.cc).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::kernels {

// Every ISA path this CPU can run, scalar first.
inline std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> isas = {CpuIsa::kScalar};
  if (DetectedIsa() >= CpuIsa::kAvx2) isas.push_back(CpuIsa::kAvx2);
  if (DetectedIsa() >= CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  return isas;
}

// Uniform in [-1, 1).
inline std::vector<float> Random(int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& f : v) f = dist(rng);
  return v;
}

// y = x . wᵀ (+ bias) for m rows of x on one ISA path; y starts poisoned.
inline std::vector<float> RunGemm(const PackedMatrix& w, const std::vector<float>& x, int64_t m,
                                  const float* bias, CpuIsa isa, ThreadPool* pool) {
  std::vector<float> y(static_cast<size_t>(m * w.n), -7.0f);
  GemmWithIsa({.x = x.data(), .ldx = w.k, .w = &w, .bias = bias, .y = y.data(), .ldy = w.n, .m = m},
              isa, pool);
  return y;
}

// Bitwise equality (NaN-safe, -0 distinct from +0).
inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace kvserve::kernels
