// Runs the AVX-512 tiling (12 x 2 tiles, 128-step k-blocks, 8/4/3/2-panel
// leftovers; gemm_internal.h) on 16-lane vectors emulated with AVX2 pairs, for
// every weight format (the 16-bit and int8 widening as pairs of 8-lane ones), so
// the AVX-512 body's loop structure is checked bit for bit on machines
// without AVX-512. Only gemm_avx512.cc's one-line intrinsic wrappers are left
// untested there.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/target_pragmas.h"

KVSERVE_TARGET_BEGIN("avx2,fma,f16c")

namespace kvserve::kernels::internal::emulated512 {

struct V16 {
  __m256 lo, hi;
};

struct Ops : Avx512Tiling {
  using V = V16;
  static constexpr int kLanes = 16;
  static V Zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static V LoadW(F32W, const float* p) { return {_mm256_load_ps(p), _mm256_load_ps(p + 8)}; }
  static __m256 Bf16x8(const uint16_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static V LoadW(Bf16W, const uint16_t* p) { return {Bf16x8(p), Bf16x8(p + 8)}; }
  static __m256 F16x8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static V LoadW(F16W, const uint16_t* p) { return {F16x8(p), F16x8(p + 8)}; }
  static __m256 I8x8(const int8_t* p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static V LoadW(Int8W, const int8_t* p) { return {I8x8(p), I8x8(p + 8)}; }
  static V LoadU(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static V Fma(V a, V b, V c) {
    return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
  }
  static V FmaBroadcast(const float* p, V w, V acc) {
    const __m256 x = _mm256_broadcast_ss(p);
    return {_mm256_fmadd_ps(x, w.lo, acc.lo), _mm256_fmadd_ps(x, w.hi, acc.hi)};
  }
  static V Add(V a, V b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
  static V Mul(V a, V b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static void StoreU(float* p, V v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
  }
};

#include "kernels/cpu/gemm_microkernel_inl.h"

void Run(const GemmParams& p, int64_t panel_begin, int64_t panel_end) {
  GemmPanels<Ops>(p, panel_begin, panel_end);
}

}  // namespace kvserve::kernels::internal::emulated512

KVSERVE_TARGET_END

namespace kvserve::kernels {
namespace {

// Every weight format (fp32, bf16, fp16, int8): the emulated AVX-512 body
// equals the scalar one bit for bit.
TEST(GemmTilingTest, Avx512TilingMatchesScalarBitForBit) {
  if (DetectedIsa() < CpuIsa::kAvx2) GTEST_SKIP() << "emulation needs AVX2";
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<int64_t> ms;
  for (int64_t m = 1; m <= 26; ++m) ms.push_back(m);
  for (int64_t m : {36, 47, 53, 61}) ms.push_back(m);
  const int64_t kn[][2] = {{97, 200}, {300, 40}, {1536, 72}};
  for (const auto& [k, n] : kn) {
    std::vector<float> w(n * k), bias(n);
    for (float& f : w) f = dist(rng);
    for (float& f : bias) f = dist(rng);
    for (WeightFormat format :
         {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kInt8}) {
      PackedMatrix packed = PackWeights(w.data(), n, k, format);
      const int64_t panels = (n + 15) / 16;
      for (int64_t m : ms) {
        std::vector<float> x(m * k);
        for (float& f : x) f = dist(rng);
        std::vector<float> expected(m * n), got(m * n, -7.0f);
        GemmParams p{x.data(),        k, &packed, m % 3 == 0 ? nullptr : bias.data(),
                     expected.data(), n, m};
        GemmWithIsa(p, CpuIsa::kScalar, nullptr);
        p.y = got.data();
        // Two uneven panel ranges, as two threads might get them.
        const int64_t split = panels / 2 + 1 < panels ? panels / 2 + 1 : panels;
        internal::emulated512::Run(p, 0, split);
        internal::emulated512::Run(p, split, panels);
        ASSERT_EQ(got, expected) << "m=" << m << " k=" << k << " n=" << n
                                 << " format=" << WeightFormatName(format);
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::kernels
