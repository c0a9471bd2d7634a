// Internal to kernels/cpu: the register-tiled GEMM body shared by the AVX2 and
// AVX-512 translation units. Each includes this file inside its
// `#pragma GCC target` region after defining a vector-ops struct `Ops`:
//   V, kLanes (8 or 16), Zero(), LoadU(),
//   Fma(a, b, c) = a*b+c with one rounding, FmaBroadcast(p, w, acc) = Fma of
//   *p in every lane, w and acc, Add(), Mul(), StoreU(),
//   LoadW(F32W / Bf16W / F16W / Int8W tag, const T* p): kLanes weights at p
//   (aligned) widened exactly to fp32,
//   kMainRows, kMainPanels, kKBlock, RemPanels(rows),
//   AsksForNextGroup(bytes per weight) (gemm_internal.h).
// It must include nothing itself (standard headers come before the pragma).
//
// Tiling: a tile is MR rows x NP panels (NP*16 columns), one accumulator
// vector per (row, 16/kLanes slice). Every accumulator runs its FMAs in order
// kk = 0..k-1 starting from zero; an int8 matrix's scale multiplies it next
// and the bias is added last. K-blocking only parks an accumulator in memory
// between blocks (a float round trip is exact), so tile shapes, blocking, ISA
// and the weights' storage width change speed, never a bit of y.

namespace {

// Rows of x kept in L2 while a thread sweeps its column panels.
constexpr int64_t kRowBlockBytes = 192 * 1024;
// Row tiles per row block at most (bounds the stack accumulator buffer).
constexpr int64_t kMaxRowTilesPerBlock = 32;

// acc = (acc_in ? acc_in : 0) + x[0..MR) . w over kc steps, then written to
// `out` (row stride ldo): whole when cols == NP * 16, else the first `cols`
// columns. scale and bias (nullable) are applied on the way out; they are
// only passed for the last k-block. panel_elems: elements of one panel.
// kAsk: the tile asks `next`'s NP panels (nullable) into L2 as it goes, one
// 64-byte line per panel whenever its k-steps cross one (FewRows: the next
// group); a compile-time flag, so the prefill tiles carry no check.
template <class Ops, class W, int MR, int NP, bool kAsk = false>
inline void Tile(const float* x, int64_t ldx, const typename W::T* w, int64_t panel_elems,
                 int64_t kc, const float* acc_in, float* out, int64_t ldo, const float* scale,
                 const float* bias, int64_t cols, const typename W::T* next = nullptr) {
  using V = typename Ops::V;
  constexpr int64_t kStepsPerLine = 64 / (16 * sizeof(typename W::T));
  constexpr int kVecPerPanel = 16 / Ops::kLanes;
  constexpr int kVecs = NP * kVecPerPanel;
  constexpr int kWidth = NP * 16;
  V acc[MR][kVecs];
#pragma GCC unroll 32
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 32
    for (int j = 0; j < kVecs; ++j) {
      acc[r][j] =
          acc_in == nullptr ? Ops::Zero() : Ops::LoadU(acc_in + r * kWidth + j * Ops::kLanes);
    }
  }

  for (int64_t kk = 0; kk < kc; ++kk) {
    if constexpr (kAsk) {
      if (next != nullptr && kk % kStepsPerLine == 0) {
#pragma GCC unroll 8
        for (int j = 0; j < NP; ++j) __builtin_prefetch(next + j * panel_elems + kk * 16, 0, 2);
      }
    }
    V wv[kVecs];
#pragma GCC unroll 32
    for (int j = 0; j < kVecs; ++j) {
      wv[j] = Ops::LoadW(
          W{}, w + (j / kVecPerPanel) * panel_elems + kk * 16 + (j % kVecPerPanel) * Ops::kLanes);
    }
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 32
      for (int j = 0; j < kVecs; ++j) {
        acc[r][j] = Ops::FmaBroadcast(x + r * ldx + kk, wv[j], acc[r][j]);
      }
    }
  }

  if (cols == kWidth) {
#pragma GCC unroll 32
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 32
      for (int j = 0; j < kVecs; ++j) {
        V v = acc[r][j];
        if (scale != nullptr) v = Ops::Mul(v, Ops::LoadU(scale + j * Ops::kLanes));
        if (bias != nullptr) v = Ops::Add(v, Ops::LoadU(bias + j * Ops::kLanes));
        Ops::StoreU(out + r * ldo + j * Ops::kLanes, v);
      }
    }
    return;
  }
  // Last, partial panel: columns past n hold zero padding and are dropped.
  alignas(64) float tmp[MR][kWidth];
#pragma GCC unroll 32
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 32
    for (int j = 0; j < kVecs; ++j) Ops::StoreU(&tmp[r][j * Ops::kLanes], acc[r][j]);
  }
  for (int r = 0; r < MR; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float v = tmp[r][c];
      if (scale != nullptr) v = v * scale[c];
      out[r * ldo + c] = bias != nullptr ? v + bias[c] : v;
    }
  }
}

// Tile<Ops, rows, NP> for a run-time rows in [1, R].
template <class Ops, class W, int NP, int R>
inline void TailTile(int64_t rows, const float* x, int64_t ldx, const typename W::T* w,
                     int64_t panel_elems, int64_t kc, const float* acc_in, float* out, int64_t ldo,
                     const float* scale, const float* bias, int64_t cols) {
  if constexpr (R > 0) {
    if (rows == R) {
      Tile<Ops, W, R, NP>(x, ldx, w, panel_elems, kc, acc_in, out, ldo, scale, bias, cols);
    } else {
      TailTile<Ops, W, NP, R - 1>(rows, x, ldx, w, panel_elems, kc, acc_in, out, ldo, scale, bias,
                                  cols);
    }
  }
}

// Rows [r0, r1) times panels [panel, panel + NP), k in blocks of kc: a block
// of the panels' k-rows stays in L1 while every row tile of the row block
// uses it, so W is streamed once per row block. Rows past the last multiple
// of MR (only in the last block) take a shorter tile. Partial sums wait in
// `acc_buf` between k-blocks.
template <class Ops, class W, int MR, int NP>
inline void RowBlockTimesPanels(const GemmParams& p, int64_t r0, int64_t r1, int64_t panel,
                                int64_t kc, float* acc_buf) {
  const int64_t k = p.w->k, n = p.w->n;
  const int64_t panel_elems = k * 16;
  const int64_t col = panel * 16;
  const int64_t cols = n - col < NP * 16 ? n - col : NP * 16;
  const typename W::T* w = p.w->template As<typename W::T>() + panel * panel_elems;
  const float* bias = p.bias != nullptr ? p.bias + col : nullptr;
  const float* scale = p.w->scales.size() != 0 ? p.w->scales.data() + col : nullptr;
  for (int64_t k0 = 0; k0 < k || k0 == 0; k0 += kc) {
    const int64_t this_kc = k - k0 < kc ? k - k0 : kc;
    const bool first = k0 == 0, last = k0 + this_kc >= k;
    for (int64_t row = r0; row < r1; row += MR) {
      const int64_t rows = r1 - row < MR ? r1 - row : MR;
      float* buf = acc_buf + (row - r0) * NP * 16;
      const float* acc_in = first ? nullptr : buf;
      const float* x = p.x + row * p.ldx + k0;
      float* out = last ? p.y + row * p.ldy + col : buf;
      const int64_t ldo = last ? p.ldy : NP * 16;
      const float* b = last ? bias : nullptr;
      const float* sc = last ? scale : nullptr;
      const int64_t c = last ? cols : NP * 16;
      if (rows == MR) {
        Tile<Ops, W, MR, NP>(x, p.ldx, w + k0 * 16, panel_elems, this_kc, acc_in, out, ldo, sc, b,
                             c);
      } else {
        TailTile<Ops, W, NP, MR - 1>(rows, x, p.ldx, w + k0 * 16, panel_elems, this_kc, acc_in, out,
                                     ldo, sc, b, c);
      }
    }
    if (last) break;
  }
}

// Fewer than kMainRows rows (decode, the tail of a batch): the whole k in one
// go, NP panels at a time so that even one row has several FMA chains.
template <class Ops, class W, int MR, int NP>
inline void FewRows(const GemmParams& p, int64_t row, int64_t pb, int64_t pe) {
  const int64_t k = p.w->k, n = p.w->n;
  const int64_t panel_elems = k * 16;
  const float* x = p.x + row * p.ldx;
  float* y = p.y + row * p.ldy;
  const typename W::T* w = p.w->template As<typename W::T>();
  const float* scales = p.w->scales.size() != 0 ? p.w->scales.data() : nullptr;
  int64_t panel = pb;
  for (; panel + NP <= pe; panel += NP) {
    const int64_t col = panel * 16;
    const int64_t cols = n - col < NP * 16 ? n - col : NP * 16;
    // The next group of the same width, asked for while this one runs (its
    // k-long panel streams otherwise wait for the hardware prefetcher).
    constexpr bool kAsk = Ops::AsksForNextGroup(sizeof(typename W::T));
    const typename W::T* next = panel + 2 * NP <= pe ? w + (panel + NP) * panel_elems : nullptr;
    Tile<Ops, W, MR, NP, kAsk>(x, p.ldx, w + panel * panel_elems, panel_elems, k, nullptr, y + col,
                               p.ldy, scales != nullptr ? scales + col : nullptr,
                               p.bias != nullptr ? p.bias + col : nullptr, cols, next);
  }
  for (; panel < pe; ++panel) {
    const int64_t col = panel * 16;
    const int64_t cols = n - col < 16 ? n - col : 16;
    Tile<Ops, W, MR, 1>(x, p.ldx, w + panel * panel_elems, panel_elems, k, nullptr, y + col, p.ldy,
                        scales != nullptr ? scales + col : nullptr,
                        p.bias != nullptr ? p.bias + col : nullptr, cols);
  }
}

template <class Ops, class W, int R>
inline void RemainderRows(const GemmParams& p, int64_t row, int64_t rows, int64_t pb, int64_t pe) {
  if constexpr (R > 0) {
    if (rows == R) {
      FewRows<Ops, W, R, Ops::RemPanels(R)>(p, row, pb, pe);
    } else {
      RemainderRows<Ops, W, R - 1>(p, row, rows, pb, pe);
    }
  }
}

template <class Ops, class W>
void GemmPanelsOf(const GemmParams& p, int64_t pb, int64_t pe) {
  constexpr int MR = Ops::kMainRows;
  constexpr int NP = Ops::kMainPanels;
  if (p.m < MR) {
    RemainderRows<Ops, W, MR - 1>(p, 0, p.m, pb, pe);
    return;
  }
  const int64_t k = p.w->k;
  int64_t row_tiles = kRowBlockBytes / (k * 4 * MR + 1);
  row_tiles = row_tiles < 1                      ? 1
              : row_tiles > kMaxRowTilesPerBlock ? kMaxRowTilesPerBlock
                                                 : row_tiles;
  const int64_t row_block = row_tiles * MR;
  // Balanced k-blocks of at most kKBlock.
  const int64_t k_blocks = (k + Ops::kKBlock - 1) / Ops::kKBlock;
  const int64_t kc = k_blocks > 0 ? (k + k_blocks - 1) / k_blocks : 0;
  // One row block, plus the tail rows when they join the last block.
  alignas(64) float acc_buf[(kMaxRowTilesPerBlock + 1) * MR * NP * 16];

  // Row blocks outermost: a block of x stays in L2 while the thread sweeps
  // its panels. The rows past the last full block join it (< MR of them).
  const int64_t m_main = p.m / MR * MR;
  for (int64_t r0 = 0; r0 < m_main; r0 += row_block) {
    const int64_t r1 = r0 + row_block < m_main ? r0 + row_block : p.m;
    int64_t panel = pb;
    for (; panel + NP <= pe; panel += NP) {
      RowBlockTimesPanels<Ops, W, MR, NP>(p, r0, r1, panel, kc, acc_buf);
    }
    for (; panel < pe; ++panel) RowBlockTimesPanels<Ops, W, MR, 1>(p, r0, r1, panel, kc, acc_buf);
  }
}

// The body for p.w's storage format.
template <class Ops>
void GemmPanels(const GemmParams& p, int64_t pb, int64_t pe) {
  switch (p.w->format) {
    case WeightFormat::kF32:
      return GemmPanelsOf<Ops, F32W>(p, pb, pe);
    case WeightFormat::kBF16:
      return GemmPanelsOf<Ops, Bf16W>(p, pb, pe);
    case WeightFormat::kF16:
      return GemmPanelsOf<Ops, F16W>(p, pb, pe);
    case WeightFormat::kInt8:
      return GemmPanelsOf<Ops, Int8W>(p, pb, pe);
    case WeightFormat::kW8A8:
    case WeightFormat::kBF16Dot:
      break;  // gemm_dot.h (Gemm() never sends them here)
  }
}

}  // namespace
