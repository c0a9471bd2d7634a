// AVX2+FMA GEMM body (tile shapes in gemm_internal.h: Avx2Tiling).
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/gemm_internal.h"

// clang has no `#pragma GCC target`; its attribute push does the same.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace kvserve::kernels::internal {
namespace {

struct Ops : Avx2Tiling {
  using V = __m256;
  static constexpr int kLanes = 8;
  static V Zero() { return _mm256_setzero_ps(); }
  static V Load(const float* p) { return _mm256_load_ps(p); }
  static V LoadU(const float* p) { return _mm256_loadu_ps(p); }
  static V Broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm256_add_ps(a, b); }
  static void StoreU(float* p, V v) { _mm256_storeu_ps(p, v); }
};

#include "kernels/cpu/gemm_microkernel_inl.h"

}  // namespace

void GemmPanelsAvx2(const GemmParams& p, int64_t panel_begin, int64_t panel_end) {
  GemmPanels<Ops>(p, panel_begin, panel_end);
}

}  // namespace kvserve::kernels::internal

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
