// Internal to kernels/cpu: the register-tiled int8 x int8 body shared by
// gemm_w8a8_avx2.cc and gemm_w8a8_avx512.cc. Each includes this file inside
// its target region after defining a vector-ops struct `Ops`:
//   VI (int32 vector), VF (float vector), X (one row's broadcast codes),
//   kLanes (8 or 16), kMainRows, kMainPanels, RemPanels(rows),
//   Zero(), LoadW(p): kLanes columns x 4 k of codes at p (aligned),
//   BroadcastX(p): the 4 codes at p for every column,
//   Dot(acc, X, w): acc + the 4-deep products per column (exact int32),
//   Finish(acc, sums, x_scale, w_scales) = float(dot) * (x_scale * w_scale)
//     where dot is acc less the shift correction (gemm_w8a8.h),
//   AddBias(v, p), StoreF(p, v).
// It must include nothing itself.
//
// The integer dot product is exact, so the tile shapes and the order of the
// k loop cannot change a bit of y; Finish and AddBias are the gemm_w8a8.h
// operations element by element.

namespace {

// Rows of codes kept in L2 while a thread sweeps its column panels.
constexpr int64_t kW8A8RowBlockBytes = 256 * 1024;

// y[row..row+MR) x columns [col, col + cols) of the NP panels at w.
template <class Ops, int MR, int NP>
inline void W8A8Tile(const GemmParams& p, const QuantizedRows& x, int64_t row, const int8_t* w,
                     int64_t panel_bytes, int64_t steps, int64_t col, int64_t cols) {
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
  for (int64_t s = 0; s < steps; ++s) {
    VI wv[kVecs];
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

  const auto* sums = reinterpret_cast<const int32_t*>(p.w->code_sums.data()) + col;
  const float* w_scales = p.w->scales.data() + col;
  const float* bias = p.bias != nullptr ? p.bias + col : nullptr;
#pragma GCC unroll 32
  for (int r = 0; r < MR; ++r) {
    const float x_scale = x.scales[row + r];
    float* y = p.y + (row + r) * p.ldy + col;
    if (cols == kWidth) {
#pragma GCC unroll 32
      for (int j = 0; j < kVecs; ++j) {
        VF v = Ops::Finish(acc[r][j], sums + j * Ops::kLanes, x_scale, w_scales + j * Ops::kLanes);
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
                  Ops::Finish(acc[r][j], sums + j * Ops::kLanes, x_scale, w_scales + j * Ops::kLanes));
    }
    for (int64_t c = 0; c < cols; ++c) y[c] = bias != nullptr ? tmp[c] + bias[c] : tmp[c];
  }
}

// W8A8Tile<Ops, rows, NP> for a run-time rows in [1, R].
template <class Ops, int NP, int R>
inline void W8A8TailTile(int64_t rows, const GemmParams& p, const QuantizedRows& x, int64_t row,
                         const int8_t* w, int64_t panel_bytes, int64_t steps, int64_t col,
                         int64_t cols) {
  if constexpr (R > 0) {
    if (rows == R) {
      W8A8Tile<Ops, R, NP>(p, x, row, w, panel_bytes, steps, col, cols);
    } else {
      W8A8TailTile<Ops, NP, R - 1>(rows, p, x, row, w, panel_bytes, steps, col, cols);
    }
  }
}

// Rows [r0, r1) times the panels [pb, pe), NP at a time: each panel group's
// codes stay in L1/L2 while every row tile of the block uses them.
template <class Ops, int MR, int NP>
inline void W8A8RowsTimesPanels(const GemmParams& p, const QuantizedRows& x, int64_t r0,
                                int64_t r1, int64_t pb, int64_t pe) {
  const int64_t panel_bytes = x.ld * 16;
  const int64_t steps = x.ld / 4;
  int64_t panel = pb;
  auto run = [&](auto np_tag, int64_t first_panel) {
    constexpr int kNp = decltype(np_tag)::value;
    const int64_t col = first_panel * 16;
    const int64_t cols = p.w->n - col < kNp * 16 ? p.w->n - col : kNp * 16;
    const int8_t* w = p.w->template As<int8_t>() + first_panel * panel_bytes;
    for (int64_t row = r0; row < r1; row += MR) {
      const int64_t rows = r1 - row < MR ? r1 - row : MR;
      if (rows == MR) {
        W8A8Tile<Ops, MR, kNp>(p, x, row, w, panel_bytes, steps, col, cols);
      } else {
        W8A8TailTile<Ops, kNp, MR - 1>(rows, p, x, row, w, panel_bytes, steps, col, cols);
      }
    }
  };
  for (; panel + NP <= pe; panel += NP) run(std::integral_constant<int, NP>{}, panel);
  for (; panel < pe; ++panel) run(std::integral_constant<int, 1>{}, panel);
}

// Fewer than kMainRows rows: one tile of all of them, RemPanels(R) panels wide.
template <class Ops, int R>
inline void W8A8FewRows(const GemmParams& p, const QuantizedRows& x, int64_t rows, int64_t pb,
                        int64_t pe) {
  if constexpr (R > 0) {
    if (rows == R) {
      W8A8RowsTimesPanels<Ops, R, Ops::RemPanels(R)>(p, x, 0, R, pb, pe);
    } else {
      W8A8FewRows<Ops, R - 1>(p, x, rows, pb, pe);
    }
  }
}

template <class Ops>
void W8A8Panels(const GemmParams& p, const QuantizedRows& x, int64_t pb, int64_t pe) {
  constexpr int MR = Ops::kMainRows;
  if (p.m < MR) {
    W8A8FewRows<Ops, MR - 1>(p, x, p.m, pb, pe);
    return;
  }
  int64_t row_block = kW8A8RowBlockBytes / x.ld / MR * MR;
  if (row_block < MR) row_block = MR;
  for (int64_t r0 = 0; r0 < p.m; r0 += row_block) {
    const int64_t r1 = r0 + row_block < p.m ? r0 + row_block : p.m;
    W8A8RowsTimesPanels<Ops, MR, Ops::kMainPanels>(p, x, r0, r1, pb, pe);
  }
}

}  // namespace
