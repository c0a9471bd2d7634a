// Internal to kernels/cpu: the per-ISA GEMM bodies that Gemm() dispatches to.
// Each computes y for all m rows and the column panels [panel_begin,
// panel_end) of p.w, with the per-element FMA order of gemm.h; they differ only
// in speed, never in results.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.h"

namespace kvserve::kernels::internal {

// Storage tags of the microkernel (gemm_microkernel_inl.h): the element type
// of a packed matrix per WeightFormat. Ops::LoadW widens each exactly.
struct F32W {
  using T = float;
};
struct Bf16W {  // bf16 bit patterns
  using T = uint16_t;
};
struct F16W {  // IEEE binary16 bit patterns
  using T = uint16_t;
};
struct Int8W {  // symmetric int8 codes (the scale is applied after the k loop)
  using T = int8_t;
};

// Tile shapes of the vector bodies (see gemm_microkernel_inl.h). Shared with
// the tests, which run the AVX-512 tiling through emulated 16-lane vectors on
// machines without AVX-512.
struct Avx2Tiling {
  // 16 ymm registers: 6 rows x 1 panel = 12 accumulators + 2 weights + 1 broadcast.
  static constexpr int kMainRows = 6;
  static constexpr int kMainPanels = 1;
  // k-steps per block: 256 x 64 B of weights (16 KiB) stay in L1 across row tiles.
  static constexpr int64_t kKBlock = 256;
  // Fewer rows: more panels at once, for enough independent FMA chains.
  static constexpr int RemPanels(int rows) {
    return rows == 1 ? 4 : rows == 2 ? 3 : rows == 3 ? 2 : 1;
  }
  // Whether those leftover-row tiles ask for the next panel group while they
  // run (FewRows), by bytes per weight. Zen 4 running this path, one-thread
  // GEMV: int8 13.2 -> 20.7 GB/s, bf16 / fp16 +12%, but fp32 26.1 -> 23.2.
  static constexpr bool AsksForNextGroup(int weight_bytes) { return weight_bytes < 4; }
};

struct Avx512Tiling {
  // 32 zmm registers: 12 rows x 2 panels = 24 accumulators + 2 weights + 1 broadcast.
  static constexpr int kMainRows = 12;
  static constexpr int kMainPanels = 2;
  // k-steps per block: 128 x 2 x 64 B of weights (16 KiB) stay in L1.
  static constexpr int64_t kKBlock = 128;
  // Up to 24 accumulators for the leftover rows. One row (decode) takes 8
  // panels: 8 weight streams in flight instead of 4, which keeps more of a
  // narrow format's bytes in flight (int8 GEMV 12-15 -> 16-20 GB/s on one
  // Zen 4 core; bf16 / fp16 +5%, fp32 unchanged).
  static constexpr int RemPanels(int rows) {
    return rows == 1 ? 8 : rows <= 6 ? 4 : rows <= 8 ? 3 : 2;
  }
  // As Avx2Tiling's. Zen 4, one-thread GEMV: fp32 23.9 -> 29.7 GB/s, int8
  // 18.8 -> 23.1, bf16 +11%, fp16 +7%; two threads, bound by the memory
  // bandwidth, move less (docs/benchmarks.md, 2026-11-28).
  static constexpr bool AsksForNextGroup(int /*weight_bytes*/) { return true; }
};

void GemmPanelsScalar(const GemmParams& p, int64_t panel_begin, int64_t panel_end);
void GemmPanelsAvx2(const GemmParams& p, int64_t panel_begin, int64_t panel_end);
void GemmPanelsAvx512(const GemmParams& p, int64_t panel_begin, int64_t panel_end);

}  // namespace kvserve::kernels::internal
