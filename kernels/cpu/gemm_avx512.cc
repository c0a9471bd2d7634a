// AVX-512F GEMM body (tile shapes in gemm_internal.h: Avx512Tiling); one zmm
// holds one k-step of a panel.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/gemm_internal.h"

// clang has no `#pragma GCC target`; its attribute push does the same.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif

namespace kvserve::kernels::internal {
namespace {

struct Ops : Avx512Tiling {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V Zero() { return _mm512_setzero_ps(); }
  static V Load(const float* p) { return _mm512_load_ps(p); }
  static V LoadU(const float* p) { return _mm512_loadu_ps(p); }
  static V Broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V Add(V a, V b) { return _mm512_add_ps(a, b); }
  static void StoreU(float* p, V v) { _mm512_storeu_ps(p, v); }
};

#include "kernels/cpu/gemm_microkernel_inl.h"

}  // namespace

void GemmPanelsAvx512(const GemmParams& p, int64_t panel_begin, int64_t panel_end) {
  GemmPanels<Ops>(p, panel_begin, panel_end);
}

}  // namespace kvserve::kernels::internal

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
