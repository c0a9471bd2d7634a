// AVX2 int8 x int8 body (gemm_dot.h), for CPUs without AVX-512 VNNI:
// vpmaddubsw multiplies |code| by the weight given code's sign (vpsignb),
// which keeps every pair sum within int16 (2 * 127 * 127), then vpmaddwd
// adds the pairs into int32: the same exact dot product as vpdpbusd.
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/gemm_dot.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx2,fma")

namespace kvserve::kernels::internal {
namespace {

struct Ops {
  // 16 ymm: 2 rows x 2 panels x 2 vectors of accumulators, a weight, |x|
  // and x per row, ones. Decode's few rows read their weights faster from
  // more panels (streams) at once, so a lone row takes 8 panels (16
  // accumulators: the compiler keeps 3 of them on the stack, and it still
  // reads faster than 6 panels without spills). On a Zen 2 core the 1-row
  // GEMV of 2 panels stalled on its loads (most samples just after them) at
  // about half of one thread's copy rate; 4 panels read 1.3x faster, 8 a
  // further 1.1-1.2x; the 2 x 2 tile 1.1-1.2x faster than 4 rows x 1 panel at 2
  // to 4 rows, level from 8 (docs/benchmarks.md).
  static constexpr int kMainRows = 2;
  static constexpr int kMainPanels = 2;
  static constexpr int RemPanels(int /*rows: 1*/) { return 8; }

  using VI = __m256i;
  using VW = __m256i;
  using VF = __m256;
  struct X {
    __m256i magnitude;  // |code| per byte
    __m256i sign;       // code itself: vpsignb takes its sign
  };
  static constexpr int kLanes = 8;
  static VI Zero() { return _mm256_setzero_si256(); }
  static VI LoadW(const int8_t* p) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
  }
  static X BroadcastX(const int8_t* p) {
    int32_t four;
    std::memcpy(&four, p, sizeof(four));
    const __m256i codes = _mm256_set1_epi32(four);
    return {_mm256_abs_epi8(codes), codes};
  }
  static VI Dot(VI acc, X x, VI w) {
    const __m256i pairs = _mm256_maddubs_epi16(x.magnitude, _mm256_sign_epi8(w, x.sign));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  static VF Finish(VI dot, const int32_t* /*sums: codes are not shifted*/, float x_scale,
                   const float* w_scales) {
    const VF scale = _mm256_mul_ps(_mm256_set1_ps(x_scale), _mm256_loadu_ps(w_scales));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(dot), scale);
  }
  static VF AddBias(VF v, const float* p) { return _mm256_add_ps(v, _mm256_loadu_ps(p)); }
  static void StoreF(float* p, VF v) { _mm256_storeu_ps(p, v); }
};

#include "kernels/cpu/gemm_dot_inl.h"

}  // namespace

void GemmW8A8PanelsAvx2(const GemmParams& p, const DotRows& x, int64_t panel_begin,
                        int64_t panel_end) {
  DotPanels<Ops>(p, x, panel_begin, panel_end);
}

}  // namespace kvserve::kernels::internal

KVSERVE_TARGET_END
