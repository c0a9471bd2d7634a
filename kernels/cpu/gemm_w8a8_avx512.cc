// AVX-512 VNNI int8 x int8 body (gemm_dot.h): vpdpbusd multiplies the codes
// shifted to unsigned (code + 128) by the signed weight codes, four k per
// column per instruction, and Finish takes 128 * code_sums back out. Tile
// shapes as the fp32 body's (gemm_internal.h: Avx512Tiling).
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/gemm_dot.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx512f,avx512vnni")

namespace kvserve::kernels::internal {
namespace {

struct Ops : Avx512Tiling {
  using VI = __m512i;
  using VW = __m512i;
  using VF = __m512;
  using X = __m512i;
  static constexpr int kLanes = 16;
  static VI Zero() { return _mm512_setzero_si512(); }
  static VI LoadW(const int8_t* p) { return _mm512_load_si512(p); }
  static X BroadcastX(const int8_t* p) {
    int32_t four;
    std::memcpy(&four, p, sizeof(four));
    return _mm512_set1_epi32(four);
  }
  static VI Dot(VI acc, X x, VI w) { return _mm512_dpbusd_epi32(acc, x, w); }
  static VF Finish(VI acc, const int32_t* sums, float x_scale, const float* w_scales) {
    const VI dot = _mm512_sub_epi32(acc, _mm512_slli_epi32(_mm512_loadu_si512(sums), 7));
    const VF scale = _mm512_mul_ps(_mm512_set1_ps(x_scale), _mm512_loadu_ps(w_scales));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale);
  }
  static VF AddBias(VF v, const float* p) { return _mm512_add_ps(v, _mm512_loadu_ps(p)); }
  static void StoreF(float* p, VF v) { _mm512_storeu_ps(p, v); }
};

#include "kernels/cpu/gemm_dot_inl.h"

}  // namespace

void GemmW8A8PanelsAvx512Vnni(const GemmParams& p, const DotRows& x, int64_t panel_begin,
                              int64_t panel_end) {
  DotPanels<Ops>(p, x, panel_begin, panel_end);
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
