// Internal to kernels/cpu: the register-tiled body of the dot-product
// formats (gemm_dot.h), shared by gemm_w8a8_{avx2,avx512}.cc and
// gemm_bf16dot_{avx2,avx512}.cc. Each includes this file inside its target
// region after defining a vector-ops struct `Ops`:
//   VI (accumulator vector), VW (weight vector), VF (float vector),
//   X (one row's broadcast step),
//   kLanes (8 or 16), kMainRows, kMainPanels, RemPanels(rows),
//   Zero(), LoadW(p): kLanes columns x one 4-byte step at p (aligned),
//   BroadcastX(p): the 4-byte step at p for every column,
//   Dot(acc, X, w): acc plus that step's products per column, in the
//     format's order (gemm_dot.h),
//   Finish(acc, sums, x_scale, w_scales): y before the bias (W8A8: the
//     scales applied; bf16: acc itself; sums and w_scales may be null),
//   AddBias(v, p), StoreF(p, v).
// It must include nothing itself.
//
// Every accumulator takes the steps in order s = 0, 1, ... from zero, and
// Finish and AddBias are gemm_dot.h's operations element by element, so the
// tile shapes cannot change a bit of y.

namespace {

// Rows of converted x kept in L2 while a thread sweeps its column panels.
constexpr int64_t kDotRowBlockBytes = 256 * 1024;

// Where a row tile prefetches the next panel group: its NP panels at `next`
// (nullptr: none) into L2, one 64-byte line per panel at every step s with
// s % every == phase. The T row tiles of a group take phases 0..T-1, so the
// next group arrives spread over the whole group's time instead of all
// being read from memory by its own first tile.
struct DotPrefetch {
  const int8_t* next = nullptr;
  int every = 1;
  int phase = 0;
};

// y[row..row+MR) x columns [col, col + cols) of the NP panels at w.
template <class Ops, int MR, int NP>
inline void DotTile(const GemmParams& p, const DotRows& x, int64_t row, const int8_t* w,
                    int64_t panel_bytes, int64_t steps, int64_t col, int64_t cols, DotPrefetch pf) {
  using VI = typename Ops::VI;
  using VF = typename Ops::VF;
  constexpr int kVecPerPanel = 16 / Ops::kLanes;
  constexpr int kVecs = NP * kVecPerPanel;
  constexpr int kWidth = NP * 16;
  VI acc[MR][kVecs];
#pragma GCC unroll 32
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 32
    for (int j = 0; j < kVecs; ++j) acc[r][j] = Ops::Zero();
  }
  const int8_t* xr = x.codes + row * x.ld;
  int countdown = pf.phase + 1;
  for (int64_t s = 0; s < steps; ++s) {  // in order (bf16 sums are rounded)
    if (pf.next != nullptr && --countdown == 0) {
      countdown = pf.every;
#pragma GCC unroll 8
      for (int j = 0; j < NP; ++j) __builtin_prefetch(pf.next + j * panel_bytes + s * 64, 0, 2);
    }
    typename Ops::VW wv[kVecs];
#pragma GCC unroll 32
    for (int j = 0; j < kVecs; ++j) {
      wv[j] = Ops::LoadW(w + (j / kVecPerPanel) * panel_bytes + s * 64 +
                         (j % kVecPerPanel) * Ops::kLanes * 4);
    }
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
      const typename Ops::X xb = Ops::BroadcastX(xr + r * x.ld + s * 4);
#pragma GCC unroll 32
      for (int j = 0; j < kVecs; ++j) acc[r][j] = Ops::Dot(acc[r][j], xb, wv[j]);
    }
  }

  const auto* sums = p.w->code_sums.size() != 0
                         ? reinterpret_cast<const int32_t*>(p.w->code_sums.data()) + col
                         : nullptr;
  const float* w_scales = p.w->scales.size() != 0 ? p.w->scales.data() + col : nullptr;
  const float* bias = p.bias != nullptr ? p.bias + col : nullptr;
  // Vector j's slice of a per-column array that may be absent.
  auto Lanes = [](const auto* base, int j) {
    return base != nullptr ? base + j * Ops::kLanes : base;
  };
#pragma GCC unroll 32
  for (int r = 0; r < MR; ++r) {
    const float x_scale = x.scales != nullptr ? x.scales[row + r] : 0.0f;
    float* y = p.y + (row + r) * p.ldy + col;
    if (cols == kWidth) {
#pragma GCC unroll 32
      for (int j = 0; j < kVecs; ++j) {
        VF v = Ops::Finish(acc[r][j], Lanes(sums, j), x_scale, Lanes(w_scales, j));
        if (bias != nullptr) v = Ops::AddBias(v, bias + j * Ops::kLanes);
        Ops::StoreF(y + j * Ops::kLanes, v);
      }
      continue;
    }
    // Last, partial panel: sums and scales are padded to whole panels; the
    // bias is not, so it is added per kept column.
    alignas(64) float tmp[kWidth];
#pragma GCC unroll 32
    for (int j = 0; j < kVecs; ++j) {
      Ops::StoreF(tmp + j * Ops::kLanes,
                  Ops::Finish(acc[r][j], Lanes(sums, j), x_scale, Lanes(w_scales, j)));
    }
    for (int64_t c = 0; c < cols; ++c) y[c] = bias != nullptr ? tmp[c] + bias[c] : tmp[c];
  }
}

// DotTile<Ops, rows, NP> for a run-time rows in [1, R].
template <class Ops, int NP, int R>
inline void DotTailTile(int64_t rows, const GemmParams& p, const DotRows& x, int64_t row,
                        const int8_t* w, int64_t panel_bytes, int64_t steps, int64_t col,
                        int64_t cols, DotPrefetch pf) {
  if constexpr (R > 0) {
    if (rows == R) {
      DotTile<Ops, R, NP>(p, x, row, w, panel_bytes, steps, col, cols, pf);
    } else {
      DotTailTile<Ops, NP, R - 1>(rows, p, x, row, w, panel_bytes, steps, col, cols, pf);
    }
  }
}

// Rows [r0, r1) times the panels [pb, pe), NP at a time: each panel group's
// codes stay in L1/L2 while every row tile of the block uses them.
template <class Ops, int MR, int NP>
inline void DotRowsTimesPanels(const GemmParams& p, const DotRows& x, int64_t r0, int64_t r1,
                               int64_t pb, int64_t pe) {
  const int64_t panel_bytes = x.ld * 16;
  const int64_t steps = x.ld / 4;
  int64_t panel = pb;
  auto run = [&](auto np_tag, int64_t first_panel) {
    constexpr int kNp = decltype(np_tag)::value;
    const int64_t col = first_panel * 16;
    const int64_t cols = p.w->n - col < kNp * 16 ? p.w->n - col : kNp * 16;
    const int8_t* w = p.w->template As<int8_t>() + first_panel * panel_bytes;
    // Every group asks for the next one of the same width, a single row
    // tile (m < kMainRows: decode) too: the group's short panel streams (k / 4
    // lines each) otherwise each wait for the hardware prefetcher to learn
    // them. Measured on Zen 4 (docs/benchmarks.md, 2026-11-28): one-thread
    // w8a8 GEMV 22.0 -> 25.4 GB/s and m = 8 through Qwen2.5's layers +17%;
    // m = 1 on two threads, bound by the memory bandwidth, within the noise.
    const int tiles = static_cast<int>((r1 - r0 + MR - 1) / MR);
    DotPrefetch pf;
    if (first_panel + 2 * kNp <= pe) {
      pf.next = w + kNp * panel_bytes;
      pf.every = tiles;
    }
    for (int64_t row = r0; row < r1; row += MR, ++pf.phase) {
      const int64_t rows = r1 - row < MR ? r1 - row : MR;
      if (rows == MR) {
        DotTile<Ops, MR, kNp>(p, x, row, w, panel_bytes, steps, col, cols, pf);
      } else {
        DotTailTile<Ops, kNp, MR - 1>(rows, p, x, row, w, panel_bytes, steps, col, cols, pf);
      }
    }
  };
  for (; panel + NP <= pe; panel += NP) run(std::integral_constant<int, NP>{}, panel);
  // The leftover panels in halving groups (7 = 4 + 2 + 1): a lone panel has
  // one dependency chain per row, latency-bound when there are few rows.
  if constexpr (NP >= 8) {
    if (panel + 4 <= pe) run(std::integral_constant<int, 4>{}, panel), panel += 4;
  }
  if constexpr (NP >= 4) {
    if (panel + 2 <= pe) run(std::integral_constant<int, 2>{}, panel), panel += 2;
  }
  for (; panel < pe; ++panel) run(std::integral_constant<int, 1>{}, panel);
}

// Fewer than kMainRows rows: one tile of all of them, RemPanels(R) panels wide.
template <class Ops, int R>
inline void DotFewRows(const GemmParams& p, const DotRows& x, int64_t rows, int64_t pb,
                       int64_t pe) {
  if constexpr (R > 0) {
    if (rows == R) {
      DotRowsTimesPanels<Ops, R, Ops::RemPanels(R)>(p, x, 0, R, pb, pe);
    } else {
      DotFewRows<Ops, R - 1>(p, x, rows, pb, pe);
    }
  }
}

template <class Ops>
void DotPanels(const GemmParams& p, const DotRows& x, int64_t pb, int64_t pe) {
  constexpr int MR = Ops::kMainRows;
  if (p.m < MR) {
    DotFewRows<Ops, MR - 1>(p, x, p.m, pb, pe);
    return;
  }
  int64_t row_block = kDotRowBlockBytes / x.ld / MR * MR;
  if (row_block < MR) row_block = MR;
  for (int64_t r0 = 0; r0 < p.m; r0 += row_block) {
    const int64_t r1 = r0 + row_block < p.m ? r0 + row_block : p.m;
    DotRowsTimesPanels<Ops, MR, Ops::kMainPanels>(p, x, r0, r1, pb, pe);
  }
}

}  // namespace
