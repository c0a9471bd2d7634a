// AVX512-BF16 bf16 dot-product body (gemm_dot.h, kBF16Dot): vdpbf16ps
// multiplies a column's two bf16 weights of a step by the row's two bf16
// values and adds both products to its fp32 accumulator (odd, then even),
// 32 products per instruction. Tile shapes as the fp32 body's
// (gemm_internal.h: Avx512Tiling).
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/gemm_dot.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx512f,avx512bf16")

namespace kvserve::kernels::internal {
namespace {

struct Ops : Avx512Tiling {
  using VI = __m512;  // fp32 accumulators
  using VW = __m512i;
  using VF = __m512;
  using X = __m512i;
  static constexpr int kLanes = 16;
  static VI Zero() { return _mm512_setzero_ps(); }
  static __m512i LoadW(const int8_t* p) { return _mm512_load_si512(p); }
  static X BroadcastX(const int8_t* p) {
    int32_t pair;
    std::memcpy(&pair, p, sizeof(pair));
    return _mm512_set1_epi32(pair);
  }
  static VI Dot(VI acc, X x, __m512i w) {
    return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh&>(x), reinterpret_cast<__m512bh&>(w));
  }
  static VF Finish(VI acc, const int32_t*, float, const float*) { return acc; }
  static VF AddBias(VF v, const float* p) { return _mm512_add_ps(v, _mm512_loadu_ps(p)); }
  static void StoreF(float* p, VF v) { _mm512_storeu_ps(p, v); }
};

#include "kernels/cpu/gemm_dot_inl.h"

}  // namespace

void GemmBf16DotPanelsAvx512Bf16(const GemmParams& p, const DotRows& x, int64_t panel_begin,
                                 int64_t panel_end) {
  DotPanels<Ops>(p, x, panel_begin, panel_end);
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
