#include "kernels/cpu/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/avx2_math.h"
#include "kernels/cpu/cpu_features.h"

namespace kvserve::kernels {
namespace {

using internal::HeadPass;
using internal::kMaxHeadsPerPass;
constexpr int kTile = kAttentionKeyTile;
// Keys a decode pass attends from which a step that can (AttentionPath::
// spreads_prefetch) spreads the next tile's prefetches over its own work.
constexpr int kSpreadPrefetchMinKeys = 2048;

// One key tile for every head of the pass, head after head, with an ISA's
// three per-head primitives (Scores, Softmax, Accumulate).
template <class Ops>
void AttendTilePerHead(const PagedAttentionParams& p, HeadPass& pass, const float* const* keys,
                       const float* const* vals, int /*n: pass.n[g] <= n per head*/) {
  alignas(32) float s[kTile];
  for (int g = 0; g < pass.count; ++g) {
    const int n = pass.n[g];
    if (n <= 0) continue;
    Ops::Scores(pass.q[g], keys, n, p.head_dim, p.scale, s);
    if (p.softcap > 0.0f) {
      for (int j = 0; j < n; ++j) s[j] = std::tanh(s[j] / p.softcap) * p.softcap;
    }
    float corr;
    const float sum = Ops::Softmax(s, n, &pass.m[g], &corr);
    pass.l[g] = pass.l[g] * corr + sum;
    Ops::Accumulate(pass.out[g], corr, s, vals, n, p.head_dim);
  }
}

// Decodes `rows` rows stored back to back with a one-row decoder.
template <typename DecodeRow>
void DecodeRowByRow(DecodeRow decode, KvDtype dtype, const uint8_t* src, const float* scales,
                    int rows, int dim, float* dst) {
  const int64_t row_bytes = KvRowBytes(dtype, dim);
  for (int r = 0; r < rows; ++r) {
    decode(dtype, src + r * row_bytes, scales != nullptr ? scales[r] : 1.0f, dim,
           dst + static_cast<int64_t>(r) * dim);
  }
}

// ---- Per-tile primitives of the scalar and AVX2 paths. Each ISA implements
// the same three, each with a fixed operation order of its own. ----

struct ScalarOps {
  static constexpr bool kIntegerCodes = false;      // the integer-code steps need AVX2 at least
  static constexpr bool kTileAsksForLines = false;  // Tile() ignores its LinePrefetcher
  static constexpr bool kRows16InPlace = false;
  static constexpr bool kFp8RowsInPlace = false;
  static constexpr bool kRowsInPlace = false;
  // s[j] = dot(q, keys[j]) * scale
  static void Scores(const float* q, const float* const* keys, int n, int dim, float scale,
                     float* s) {
    for (int j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int d = 0; d < dim; ++d) acc += q[d] * keys[j][d];
      s[j] = acc * scale;
    }
  }
  // Online-softmax step over one tile: *m <- max(*m, max s), s[j] <- exp(s[j] - *m),
  // *corr <- exp(m_old - *m) (0 while m_old is -inf); returns sum_j s[j].
  static float Softmax(float* s, int n, float* m, float* corr) {
    float tile_max = s[0];
    for (int j = 1; j < n; ++j) tile_max = std::max(tile_max, s[j]);
    const float new_m = std::max(*m, tile_max);
    *corr = std::exp(*m - new_m);
    *m = new_m;
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - new_m));
    return sum;
  }
  // out = out * corr + sum_j w[j] * vals[j], j in order.
  static void Accumulate(float* out, float corr, const float* w, const float* const* vals, int n,
                         int dim) {
    for (int d = 0; d < dim; ++d) out[d] *= corr;
    for (int j = 0; j < n; ++j) {
      const float* v = vals[j];
      const float wj = w[j];
      for (int d = 0; d < dim; ++d) out[d] += wj * v[d];
    }
  }
  static void DecodeRows(KvDtype dtype, const uint8_t* src, const float* scales, int rows, int dim,
                         float* dst) {
    DecodeRowByRow(DequantizeKvRow, dtype, src, scales, rows, dim, dst);
  }
  static void Tile(const PagedAttentionParams& p, HeadPass& pass, const float* const* keys,
                   const float* const* vals, int n, internal::LinePrefetcher*) {
    AttendTilePerHead<ScalarOps>(p, pass, keys, vals, n);
  }
};

// s[j] = dot(q, keys[j]) * scale, four keys at a time: per key two 8-lane
// FMA chains over d, then one shared horizontal reduction. A missing fourth
// key is a copy of a real one whose result is dropped, so every key's
// arithmetic is the same wherever it falls in the tile.
__attribute__((target("avx2,fma"))) void ScoresAvx2(const float* q, const float* const* keys, int n,
                                                    int dim, float scale, float* s) {
  for (int j = 0; j < n; j += 4) {
    const float* k[4];
    for (int i = 0; i < 4; ++i) k[i] = keys[j + i < n ? j + i : j];
    __m256 a[4][2];
    for (int i = 0; i < 4; ++i) a[i][0] = a[i][1] = _mm256_setzero_ps();
    int d = 0;
    for (; d + 16 <= dim; d += 16) {
      const __m256 q0 = _mm256_loadu_ps(q + d), q1 = _mm256_loadu_ps(q + d + 8);
      for (int i = 0; i < 4; ++i) {
        a[i][0] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k[i] + d), a[i][0]);
        a[i][1] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(k[i] + d + 8), a[i][1]);
      }
    }
    if (d + 8 <= dim) {
      const __m256 q0 = _mm256_loadu_ps(q + d);
      for (int i = 0; i < 4; ++i) a[i][0] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(k[i] + d), a[i][0]);
      d += 8;
    }
    // hadd(hadd(s0, s1), hadd(s2, s3)) holds each key's two 4-lane half sums.
    const __m256 h = _mm256_hadd_ps(
        _mm256_hadd_ps(_mm256_add_ps(a[0][0], a[0][1]), _mm256_add_ps(a[1][0], a[1][1])),
        _mm256_hadd_ps(_mm256_add_ps(a[2][0], a[2][1]), _mm256_add_ps(a[3][0], a[3][1])));
    alignas(16) float dot[4];
    _mm_store_ps(dot, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
    for (int i = 0; i < 4 && j + i < n; ++i) {
      float sum = dot[i];
      for (int e = d; e < dim; ++e) sum = std::fma(q[e], k[i][e], sum);
      s[j + i] = sum * scale;
    }
  }
}

// out[0, 8 * kVecs) = out * corr + sum_j w[j] * vals[j], the columns held in
// registers across the tile's keys (kVecs independent FMA chains).
template <int kVecs>
__attribute__((target("avx2,fma"))) inline void AccumulateColumnsAvx2(float* out, __m256 corr,
                                                                      const float* w,
                                                                      const float* const* vals,
                                                                      int n) {
  __m256 o[kVecs];
  for (int64_t c = 0; c < kVecs; ++c) o[c] = _mm256_mul_ps(_mm256_loadu_ps(out + 8 * c), corr);
  for (int j = 0; j < n; ++j) {
    const __m256 wj = _mm256_broadcast_ss(w + j);
    for (int64_t c = 0; c < kVecs; ++c) {
      o[c] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(vals[j] + 8 * c), o[c]);
    }
  }
  for (int64_t c = 0; c < kVecs; ++c) _mm256_storeu_ps(out + 8 * c, o[c]);
}

// Each output column gets the same operations whichever chunk it falls in.
__attribute__((target("avx2,fma"))) void AccumulateAvx2(float* out, float corr, const float* w,
                                                        const float* const* vals, int n, int dim) {
  const __m256 vc = _mm256_set1_ps(corr);
  const float* vrow[kTile];
  int d = 0;
  for (; d + 64 <= dim; d += 64) {
    for (int j = 0; j < n; ++j) vrow[j] = vals[j] + d;
    AccumulateColumnsAvx2<8>(out + d, vc, w, vrow, n);
  }
  for (; d + 8 <= dim; d += 8) {
    for (int j = 0; j < n; ++j) vrow[j] = vals[j] + d;
    AccumulateColumnsAvx2<1>(out + d, vc, w, vrow, n);
  }
  for (; d < dim; ++d) {
    float o = out[d] * corr;
    for (int j = 0; j < n; ++j) o = std::fma(w[j], vals[j][d], o);
    out[d] = o;
  }
}

struct Avx2Ops {
  static constexpr bool kIntegerCodes = true;       // when UsesIntegerCodeAttention
  static constexpr bool kTileAsksForLines = false;  // Tile() ignores its LinePrefetcher
  static constexpr bool kRows16InPlace = false;
  static constexpr bool kFp8RowsInPlace = false;
  // Rows of every format read in place (attention_avx2.cc) when the head
  // dim is a multiple of 8; the other dims decode rows into an fp32 tile
  // for the per-head functions above.
  static constexpr bool kRowsInPlace = true;
  static void Scores(const float* q, const float* const* keys, int n, int dim, float scale,
                     float* s) {
    ScoresAvx2(q, keys, n, dim, scale, s);
  }
  static float Softmax(float* s, int n, float* m, float* corr) {
    return internal::SoftmaxAvx2(s, n, m, corr);
  }
  static void Accumulate(float* out, float corr, const float* w, const float* const* vals, int n,
                         int dim) {
    AccumulateAvx2(out, corr, w, vals, n, dim);
  }
  static void DecodeRows(KvDtype dtype, const uint8_t* src, const float* scales, int rows, int dim,
                         float* dst) {
    DecodeRowByRow(DequantizeKvRowAvx2, dtype, src, scales, rows, dim, dst);
  }
  static void Tile(const PagedAttentionParams& p, HeadPass& pass, const float* const* keys,
                   const float* const* vals, int n, internal::LinePrefetcher*) {
    AttendTilePerHead<Avx2Ops>(p, pass, keys, vals, n);
  }
};

// AVX-512F (head_dim a multiple of 16): all heads of the pass per key row
// (attention_avx512.cc); rows decode 16 values at a time.
struct Avx512Ops {
  static constexpr bool kIntegerCodes = true;      // when UsesIntegerCodeAttention
  static constexpr bool kTileAsksForLines = true;  // every AVX-512 step takes a LinePrefetcher
  static constexpr bool kRows16InPlace = true;     // bf16 / fp16 rows need no decoded tile
  static constexpr bool kFp8RowsInPlace = true;    // nor do fp8 rows (AttendTileFp8Avx512)
  static constexpr bool kRowsInPlace = false;
  static void DecodeRows(KvDtype dtype, const uint8_t* src, const float* scales, int rows, int dim,
                         float* dst) {
    DequantizeKvRowsAvx512(dtype, src, scales, rows, dim, dst);
  }
  static void Tile(const PagedAttentionParams& p, HeadPass& pass, const float* const* keys,
                   const float* const* vals, int n, internal::LinePrefetcher* next_tile) {
    internal::AttendTileAvx512(p, pass, keys, vals, n, next_tile);
  }
};

// Walks a sequence's keys of one kv head in order. Keys of one block are
// consecutive rows of the cache (engine/kv_cache.h), so they are taken in
// runs up to the block's end.
struct KeyCursor {
  const PagedAttentionParams& p;
  const int32_t* blocks;
  int kv_head, block, offset;
  int64_t Row() const {
    return (static_cast<int64_t>(blocks[block]) * p.num_kv_heads + kv_head) * p.block_size + offset;
  }
  // Calls fn(i, row, run) for the next n keys, i counting from 0, in runs
  // of `run` consecutive cache rows from `row`; moves past them.
  template <typename Fn>
  void ForEachRun(int n, Fn fn) {
    for (int i = 0; i < n;) {
      const int run = std::min(n - i, p.block_size - offset);
      fn(i, Row(), run);
      offset += run;
      if (offset == p.block_size) {
        offset = 0;
        ++block;
      }
      i += run;
    }
  }
};

// Lists the cache lines of the next n keys from `ahead` (K and V rows and
// their scales, run by run) for the AVX2 row step to ask for. Out of line:
// inlined into AttendHeads, it slowed every pass that does not use it
// (fp32 in L2 by 10%).
[[gnu::noinline]] void ListNextTileLines(const PagedAttentionParams& p, KeyCursor ahead, int n,
                                         internal::LinePrefetcher* lines) {
  const int64_t row_bytes = KvRowBytes(p.kv_dtype, p.head_dim);
  const auto* k_bytes = reinterpret_cast<const uint8_t*>(p.k_cache);
  const auto* v_bytes = reinterpret_cast<const uint8_t*>(p.v_cache);
  lines->Clear();
  // The scales first: the walk reads them as soon as the next tile starts,
  // before the step reads its rows.
  if (p.k_scales != nullptr) {
    KeyCursor scales = ahead;
    scales.ForEachRun(n, [&](int, int64_t row, int run) {
      lines->Add(p.k_scales + row, run * int64_t{sizeof(float)});
      lines->Add(p.v_scales + row, run * int64_t{sizeof(float)});
    });
  }
  ahead.ForEachRun(n, [&](int, int64_t row, int run) {
    lines->Add(k_bytes + row * row_bytes, run * row_bytes);
    lines->Add(v_bytes + row * row_bytes, run * row_bytes);
  });
}

// The first key position the query at `pos` attends.
int FirstKey(const PagedAttentionParams& p, int pos) {
  return p.sliding_window > 0 ? std::max(0, pos - p.sliding_window + 1) : 0;
}

constexpr int kPartition = kAttentionPartitionKeys;
static_assert(kPartition % kTile == 0, "a partition is whole key tiles");

// Where AttendHeads leaves one partition's unnormalised state, per pass head
// g: m[g], l[g] and out[g * head_dim, (g + 1) * head_dim) in dimension order.
struct PartitionSink {
  float* m;
  float* l;
  float* out;
};

// Folds one partition's (m, l, out) into a head's result (the fold of the
// partitions before it; first: none, and the partition becomes it):
//   m' = max(m_r, m_p), c_r = exp(m_r - m'), c_p = exp(m_p - m'),
//   l' = l_r c_r + l_p c_p, out' = out_r c_r + out_p c_p.
// One out-of-line body, so that the fold of a whole pass (AttendHeads) and
// of separately attended partitions (AttendPartitioned) round alike.
[[gnu::noinline]] void FoldPartition(bool first, float part_m, float part_l, const float* part_out,
                                     int dim, float* m, float* l, float* out) {
  if (first) {
    *m = part_m;
    *l = part_l;
    std::memcpy(out, part_out, sizeof(float) * dim);
    return;
  }
  const float new_m = std::max(*m, part_m);
  const float c_result = std::exp(*m - new_m), c_part = std::exp(part_m - new_m);
  *m = new_m;
  *l = *l * c_result + part_l * c_part;
  for (int d = 0; d < dim; ++d) out[d] = out[d] * c_result + part_out[d] * c_part;
}

void NormalizeHead(float l, int dim, float* out) {
  const float inv = 1.0f / l;
  for (int d = 0; d < dim; ++d) out[d] *= inv;
}

// ---- The path a pass takes: how it reads a key tile's rows, and the step
// that attends them. Chosen once per PagedAttention call from the format,
// the head dim and the ISA (ChoosePaths); no arithmetic depends on it beyond
// the step's own fixed order. ----

// How a tile's rows reach the step.
enum class RowGather {
  kFloatRows,       // the fp32 cache's rows themselves
  kDecodedRows,     // decoded into this thread's fp32 scratch tile (Ops::DecodeRows)
  kRows16,          // bf16 / fp16 rows read in place
  kRowsWithScales,  // rows of any format read in place as bytes, with their scales
};

// The step that attends one tile for every head of the pass.
enum class TileStep {
  kOpsTile,        // Ops::Tile over fp32 rows (kFloatRows, kDecodedRows)
  kRows16Avx512,   // internal::AttendTile16Avx512
  kFp8Avx512,      // internal::AttendTileFp8Avx512
  kFp8Bf16Avx512,  // internal::AttendTileFp8Bf16Avx512 (AVX512-BF16 dot products)
  kRowsAvx2,       // internal::AttendRowTileAvx2, every format
  kCodesAvx2,      // internal::AttendCodeTileAvx2: integer codes (attention.h)
  kCodesVnni,      // internal::AttendCodeTileAvx512Vnni: integer codes on VNNI
};

struct AttentionPath {
  RowGather gather = RowGather::kFloatRows;
  TileStep step = TileStep::kOpsTile;
  // Whether the step can take the next tile's cache lines to ask for while it
  // runs (internal::LinePrefetcher); used on decode passes over long
  // contexts, whose rows come from memory.
  bool spreads_prefetch = false;
  // The integer-code steps keep each head's out in their own order
  // (dimension order restored after each partition).
  bool code_value_order = false;
};

// A call's two paths: the integer-code one where the format has one, taken
// by a pass whose query quantizes (PrepareCodeQuery: its q is finite), and
// the plain one otherwise.
struct AttentionPaths {
  bool has_codes = false;
  AttentionPath codes;
  AttentionPath plain;
};

template <class Ops>
AttentionPath PlainPath(KvDtype dtype, int dim) {
  const bool is16 = dtype == KvDtype::kBfloat16 || dtype == KvDtype::kFloat16;
  if (Ops::kRowsInPlace && internal::Avx2RowTileSupports(dim)) {
    return {.gather = RowGather::kRowsWithScales,
            .step = TileStep::kRowsAvx2,
            .spreads_prefetch = true};
  }
  if (Ops::kRows16InPlace && is16) {
    return {.gather = RowGather::kRows16,
            .step = TileStep::kRows16Avx512,
            .spreads_prefetch = Ops::kTileAsksForLines};
  }
  if (Ops::kFp8RowsInPlace && dtype == KvDtype::kFp8E4m3) {
    return {.gather = RowGather::kRowsWithScales,
            .step = UsesBf16DotFp8Attention(dtype, dim) ? TileStep::kFp8Bf16Avx512
                                                        : TileStep::kFp8Avx512,
            .spreads_prefetch = Ops::kTileAsksForLines};
  }
  return {.gather = dtype == KvDtype::kFloat32 ? RowGather::kFloatRows : RowGather::kDecodedRows,
          .step = TileStep::kOpsTile,
          .spreads_prefetch = Ops::kTileAsksForLines};
}

template <class Ops>
AttentionPaths ChoosePaths(KvDtype dtype, int dim) {
  return {
      .has_codes = Ops::kIntegerCodes && UsesIntegerCodeAttention(dtype, dim),
      .codes = {.gather = RowGather::kRowsWithScales,
                .step = internal::UsesVnniCodeTile() ? TileStep::kCodesVnni : TileStep::kCodesAvx2,
                .spreads_prefetch = true,
                .code_value_order = true},
      .plain = PlainPath<Ops>(dtype, dim)};
}

// One tile's rows, in the arrays the path's gather fills.
struct TileRows {
  const float* keys[kTile];  // kFloatRows, kDecodedRows
  const float* vals[kTile];
  const uint8_t* k_rows[kTile];  // kRowsWithScales
  const uint8_t* v_rows[kTile];
  float k_scales[kTile], v_scales[kTile];
  const uint16_t* k16[kTile];  // kRows16
  const uint16_t* v16[kTile];
};

// Fills keys i .. i + run - 1 of the tile from `run` consecutive cache rows
// starting at `row`. `scratch`: 2 * kTile * dim floats (kDecodedRows).
template <class Ops>
void GatherRun(const PagedAttentionParams& p, RowGather gather, int i, int64_t row, int run,
               float* scratch, TileRows& t) {
  const int dim = p.head_dim;
  const int64_t row_bytes = KvRowBytes(p.kv_dtype, dim);
  const auto* k_bytes = reinterpret_cast<const uint8_t*>(p.k_cache);
  const auto* v_bytes = reinterpret_cast<const uint8_t*>(p.v_cache);
  switch (gather) {
    case RowGather::kRowsWithScales: {
      const uint8_t* k_row = k_bytes + row * row_bytes;
      const uint8_t* v_row = v_bytes + row * row_bytes;
      for (int r = 0; r < run; ++r, k_row += row_bytes, v_row += row_bytes) {
        t.k_rows[i + r] = k_row;
        t.v_rows[i + r] = v_row;
      }
      if (p.k_scales != nullptr) {
        std::copy_n(p.k_scales + row, run, t.k_scales + i);
        std::copy_n(p.v_scales + row, run, t.v_scales + i);
      } else {
        std::fill_n(t.k_scales + i, run, 1.0f);
        std::fill_n(t.v_scales + i, run, 1.0f);
      }
      return;
    }
    case RowGather::kRows16:
      for (int r = 0; r < run; ++r) {
        t.k16[i + r] = reinterpret_cast<const uint16_t*>(k_bytes + (row + r) * row_bytes);
        t.v16[i + r] = reinterpret_cast<const uint16_t*>(v_bytes + (row + r) * row_bytes);
      }
      return;
    case RowGather::kDecodedRows: {
      float* kd = scratch + static_cast<int64_t>(i) * dim;
      float* vd = scratch + static_cast<int64_t>(kTile + i) * dim;
      const float* ks = p.k_scales != nullptr ? p.k_scales + row : nullptr;
      const float* vs = p.v_scales != nullptr ? p.v_scales + row : nullptr;
      Ops::DecodeRows(p.kv_dtype, k_bytes + row * row_bytes, ks, run, dim, kd);
      Ops::DecodeRows(p.kv_dtype, v_bytes + row * row_bytes, vs, run, dim, vd);
      for (int r = 0; r < run; ++r) {
        t.keys[i + r] = kd + static_cast<int64_t>(r) * dim;
        t.vals[i + r] = vd + static_cast<int64_t>(r) * dim;
      }
      return;
    }
    case RowGather::kFloatRows:
      for (int r = 0; r < run; ++r) {
        t.keys[i + r] = p.k_cache + (row + r) * dim;
        t.vals[i + r] = p.v_cache + (row + r) * dim;
      }
      return;
  }
}

// Asks for the next tile's rows (all attended), which sit in scattered blocks
// that the hardware prefetcher does not follow, a block's run of rows (and of
// scales) at a time, into L2 (prefetcht2: a whole tile asked into L1 at once
// stalls on the miss buffers).
void PrefetchRuns(const PagedAttentionParams& p, KeyCursor ahead, int n) {
  const int64_t row_bytes = KvRowBytes(p.kv_dtype, p.head_dim);
  const auto* k_bytes = reinterpret_cast<const uint8_t*>(p.k_cache);
  const auto* v_bytes = reinterpret_cast<const uint8_t*>(p.v_cache);
  ahead.ForEachRun(n, [&](int, int64_t row, int run) {
    for (int64_t b = row * row_bytes / 64 * 64; b < (row + run) * row_bytes; b += 64) {
      __builtin_prefetch(k_bytes + b, 0, 1);
      __builtin_prefetch(v_bytes + b, 0, 1);
    }
    if (p.k_scales != nullptr) {
      for (int64_t r = row / 16 * 16; r < row + run; r += 16) {
        __builtin_prefetch(p.k_scales + r, 0, 1);
        __builtin_prefetch(p.v_scales + r, 0, 1);
      }
    }
  });
}

// Attends one tile of n keys for every head of the pass with the path's
// step. `next_lines` holds the next tile's lines when `spread` (else it is
// empty; the steps that take a pointer get none).
template <class Ops>
void AttendTile(const PagedAttentionParams& p, TileStep step, HeadPass& pass,
                const internal::CodeQuery& code_query, TileRows& t, int n,
                internal::LinePrefetcher& next_lines, bool spread) {
  internal::LinePrefetcher* lines = spread ? &next_lines : nullptr;
  switch (step) {
    case TileStep::kCodesVnni:
      return internal::AttendCodeTileAvx512Vnni(p, pass, code_query, t.k_rows, t.k_scales, t.v_rows,
                                                t.v_scales, n, lines);
    case TileStep::kCodesAvx2:
      return internal::AttendCodeTileAvx2(p, pass, code_query, t.k_rows, t.k_scales, t.v_rows,
                                          t.v_scales, next_lines);
    case TileStep::kRowsAvx2:
      return internal::AttendRowTileAvx2(p, pass, t.k_rows, t.k_scales, t.v_rows, t.v_scales, n,
                                         next_lines);
    case TileStep::kRows16Avx512:
      return internal::AttendTile16Avx512(p, pass, t.k16, t.v16, n, lines);
    case TileStep::kFp8Bf16Avx512:
      return internal::AttendTileFp8Bf16Avx512(p, pass, t.k_rows, t.k_scales, t.v_rows, t.v_scales,
                                               n, lines);
    case TileStep::kFp8Avx512:
      return internal::AttendTileFp8Avx512(p, pass, t.k_rows, t.k_scales, t.v_rows, t.v_scales, n,
                                           lines);
    case TileStep::kOpsTile:
      return Ops::Tile(p, pass, t.keys, t.vals, n, lines);
  }
}

// Query heads [head, head + count) of each of tokens t .. t + tokens - 1
// (one sequence, consecutive positions, no sliding window when more than
// one), all of kv head `kv_head`: one pass, pass head g = token (g / count),
// head (head + g % count).
//
// Keys lo..pos are visited in tiles [32 i, 32 i + 32) of absolute positions,
// clipped to lo..pos (pos: the last token's); the first and last tile may be
// partial, and an earlier token's heads stop at their own position:
//
//   positions  0 ........ 31 | 32 ........ 63 | 64 ... pos
//                      lo ^^^|^^^^^^^^^^^^^^^^|^^^^^^^^^^
//
// Per tile and head: scores, running max m, correction exp(m_old - m),
// weights exp(s - m), running sum l, out = out * corr + sum w v. Each
// partition (attention.h) starts that from nothing and ends folded into the
// head's result (FoldPartition); finally out /= l. A head's operations are
// those of a pass of its token alone.
//
// sink == nullptr: every partition of the keys, the result normalised into
// p.out. Else only partition `partition`, its unnormalised (m, l, out) per
// pass head stored in *sink for AttendPartitioned to fold.
template <class Ops>
void AttendHeads(const PagedAttentionParams& p, const AttentionPaths& paths, int t, int tokens,
                 int kv_head, int head, int count, const PartitionSink* sink = nullptr,
                 int partition = 0) {
  const int dim = p.head_dim;
  const int bs = p.block_size;
  const int pos = p.token_pos[t + tokens - 1];
  const int lo = FirstKey(p, p.token_pos[t]);
  const int32_t* blocks = p.block_ids + p.block_table_start[p.token_seq[t]];
  // The keys this call attends: [begin, end).
  const int begin = sink != nullptr ? std::max(lo, partition * kPartition) : lo;
  const int end = sink != nullptr ? std::min(pos + 1, (partition + 1) * kPartition) : pos + 1;

  HeadPass pass;
  pass.count = tokens * count;
  int key_end[kMaxHeadsPerPass];  // one past the last key position of head g
  // The running state of the partition at hand (pass.m, pass.l, pass.out in
  // this thread's scratch) and the fold of those before it (result_*).
  float* partition_out =
      internal::ThreadScratch(internal::ScratchUse::kPartitionState, int64_t{pass.count} * dim);
  float* result_out[kMaxHeadsPerPass];
  float result_m[kMaxHeadsPerPass], result_l[kMaxHeadsPerPass];
  for (int g = 0; g < pass.count; ++g) {
    const int64_t token = t + g / count, h = head + g % count;
    pass.q[g] = p.q + token * p.q_stride + h * dim;
    pass.out[g] = partition_out + int64_t{g} * dim;
    key_end[g] = p.token_pos[token] + 1;
    result_out[g] =
        sink != nullptr ? sink->out + int64_t{g} * dim : p.out + (token * p.num_heads + h) * dim;
    result_m[g] = -std::numeric_limits<float>::infinity();
    result_l[g] = 0.0f;
  }

  internal::CodeQuery code_query;
  const AttentionPath& path = paths.has_codes && internal::PrepareCodeQuery(p, pass, &code_query)
                                  ? paths.codes
                                  : paths.plain;
  float* scratch =
      path.gather == RowGather::kDecodedRows
          ? internal::ThreadScratch(internal::ScratchUse::kDecodedRows, 2 * kTile * dim)
          : nullptr;
  // Prefill chunks and short contexts ask for whole tiles: their rows sit in
  // cache, and listing the lines cost them more than it saved.
  const bool spread =
      path.spreads_prefetch && tokens == 1 && pos + 1 - lo >= kSpreadPrefetchMinKeys;
  internal::LinePrefetcher next_lines;
  TileRows rows;
  KeyCursor cursor{p, blocks, kv_head, begin / bs, begin % bs};
  int partition_first_key = begin;
  bool folded[kMaxHeadsPerPass] = {};  // head g's result holds a partition
  for (int tile = begin / kTile * kTile; tile < end; tile += kTile) {
    if (tile == begin / kTile * kTile || tile % kPartition == 0) {  // a partition starts
      partition_first_key = std::max(begin, tile);
      for (int g = 0; g < pass.count; ++g) {
        pass.m[g] = -std::numeric_limits<float>::infinity();
        pass.l[g] = 0.0f;
        std::memset(pass.out[g], 0, sizeof(float) * dim);
      }
    }
    const int j0 = std::max(begin, tile);
    const int n = std::min(end, tile + kTile) - j0;
    for (int g = 0; g < pass.count; ++g) pass.n[g] = std::min(key_end[g], tile + kTile) - j0;
    cursor.ForEachRun(n, [&](int i, int64_t row, int run) {
      GatherRun<Ops>(p, path.gather, i, row, run, scratch, rows);
    });
    const int next_n = std::max(0, std::min(end, tile + 2 * kTile) - (tile + kTile));
    if (spread) {
      ListNextTileLines(p, cursor, next_n, &next_lines);
    } else {
      PrefetchRuns(p, cursor, next_n);
    }
    if (path.gather == RowGather::kRowsWithScales) {
      std::fill(rows.k_scales + n, rows.k_scales + kTile, 1.0f);  // finite, for masked lanes
      std::fill(rows.v_scales + n, rows.v_scales + kTile, 1.0f);
    }
    AttendTile<Ops>(p, path.step, pass, code_query, rows, n, next_lines, spread);
    if (tile + kTile >= end || (tile + kTile) % kPartition == 0) {  // the partition ends
      for (int g = 0; g < pass.count; ++g) {
        if (key_end[g] <= partition_first_key) continue;  // no key of it is head g's
        // Dimension order first (a permutation: the fold is the same either way).
        if (path.code_value_order) {
          if (path.step == TileStep::kCodesVnni) {
            internal::RestoreCodeValueOrder(p.kv_dtype, dim, pass.out[g]);
          } else {
            internal::RestoreCodeValueOrderAvx2(dim, pass.out[g]);
          }
        }
        FoldPartition(!folded[g], pass.m[g], pass.l[g], pass.out[g], dim, &result_m[g],
                      &result_l[g], result_out[g]);
        folded[g] = true;
      }
    }
  }
  for (int g = 0; g < pass.count; ++g) {
    if (sink != nullptr) {
      sink->m[g] = result_m[g];
      sink->l[g] = result_l[g];
    } else {
      NormalizeHead(result_l[g], dim, result_out[g]);
    }
  }
}

template <class Ops>
void AttendItems(const PagedAttentionParams& p, const AttentionPaths& paths, int64_t begin,
                 int64_t end) {
  const int heads = p.num_heads;
  const int group = heads / p.num_kv_heads;
  for (int64_t i = begin; i < end;) {
    const int t = static_cast<int>(i / heads);
    const int head = static_cast<int>(i % heads);
    // Whole tokens of one sequence at consecutive positions (a prefill
    // chunk), all in this range: one pass per kv head serves them together,
    // each key tile read (or decoded) once for all of them.
    int tokens = 1;
    if (head == 0 && p.sliding_window == 0) {
      const int max_tokens = kMaxHeadsPerPass / group;
      while (tokens < max_tokens && i + int64_t{tokens + 1} * heads <= end &&
             p.token_seq[t + tokens] == p.token_seq[t] &&
             p.token_pos[t + tokens] == p.token_pos[t] + tokens) {
        ++tokens;
      }
    }
    if (tokens > 1) {
      for (int kv_head = 0; kv_head < p.num_kv_heads; ++kv_head) {
        AttendHeads<Ops>(p, paths, t, tokens, kv_head, kv_head * group, group);
      }
      i += int64_t{tokens} * heads;
      continue;
    }
    const int kv_head = head / group;
    const int64_t count =
        std::min<int64_t>({(kv_head + 1) * group - head, end - i, kMaxHeadsPerPass});
    AttendHeads<Ops>(p, paths, t, 1, kv_head, head, static_cast<int>(count));
    i += count;
  }
}

// A small batch's passes, cut at their partitions so that every thread has
// work: a batch-1 decode of 3 kv heads on 2 threads otherwise leaves one
// thread idle for a third of the time, and more threads than kv heads idle
// for good. Each (pass, partition) is a unit of work, attended alone
// (AttendHeads with a sink); then each head's partitions are folded in
// order and normalised: the operations of the whole pass, so the split
// changes no bit.
template <class Ops>
void AttendPartitioned(const PagedAttentionParams& p, const AttentionPaths& paths,
                       ThreadPool& pool) {
  const int group = p.num_heads / p.num_kv_heads;
  const int dim = p.head_dim;
  // A pass: query heads [head, head + count) of one token, all of one kv
  // head (a GQA group, cut at kMaxHeadsPerPass heads as AttendItems does).
  struct Pass {
    int token, kv_head, head, count;
    int first_unit, end_unit;  // its units: one per partition, in order
  };
  struct Unit {
    int pass, partition;
  };
  std::vector<Pass> passes;
  std::vector<Unit> units;
  for (int t = 0; t < p.num_tokens; ++t) {
    const int pos = p.token_pos[t];
    const int lo = FirstKey(p, pos);
    for (int kv_head = 0; kv_head < p.num_kv_heads; ++kv_head) {
      for (int h = 0; h < group; h += kMaxHeadsPerPass) {
        const int first = static_cast<int>(units.size());
        for (int part = lo / kPartition; part <= pos / kPartition; ++part) {
          units.push_back({static_cast<int>(passes.size()), part});
        }
        passes.push_back({t, kv_head, kv_head * group + h, std::min(kMaxHeadsPerPass, group - h),
                          first, static_cast<int>(units.size())});
      }
    }
  }
  // Each unit's state, for as many heads as a pass holds.
  const int64_t heads = std::min(group, kMaxHeadsPerPass);
  const int64_t num_units = static_cast<int64_t>(units.size());
  std::vector<float> state_m(num_units * heads), state_l(num_units * heads);
  std::vector<float> state_out(num_units * heads * dim);
  auto sink_of = [&](int64_t u) {
    return PartitionSink{&state_m[u * heads], &state_l[u * heads], &state_out[u * heads * dim]};
  };
  pool.ParallelFor(num_units, 1, [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      const Pass& pass = passes[units[u].pass];
      const PartitionSink sink = sink_of(u);
      AttendHeads<Ops>(p, paths, pass.token, 1, pass.kv_head, pass.head, pass.count, &sink,
                       units[u].partition);
    }
  });
  for (const Pass& pass : passes) {
    for (int g = 0; g < pass.count; ++g) {
      float* out = p.out + (int64_t{pass.token} * p.num_heads + pass.head + g) * dim;
      float m = 0.0f, l = 0.0f;
      for (int u = pass.first_unit; u < pass.end_unit; ++u) {
        const PartitionSink part = sink_of(u);
        FoldPartition(u == pass.first_unit, part.m[g], part.l[g], part.out + int64_t{g} * dim, dim,
                      &m, &l, out);
      }
      NormalizeHead(l, dim, out);
    }
  }
}

// Whether PagedAttention cuts this batch's passes at their partitions: too
// few (token, kv head) passes for the pool's threads (fewer than two each),
// and some pass spans more than one partition. Either way gives the same
// bits; this only picks the faster.
bool SplitsPartitions(const PagedAttentionParams& p, int threads) {
  if (threads <= 1 || int64_t{p.num_tokens} * p.num_kv_heads >= 2 * int64_t{threads}) {
    return false;
  }
  for (int t = 0; t < p.num_tokens; ++t) {
    const int pos = p.token_pos[t];
    const int lo = FirstKey(p, pos);
    if (lo / kPartition != pos / kPartition) return true;
  }
  return false;
}

}  // namespace

bool UsesIntegerCodeAttention(KvDtype dtype, int head_dim) {
  const bool integer_codes =
      dtype == KvDtype::kInt8 || dtype == KvDtype::kInt4 || dtype == KvDtype::kFp4E2m1;
  if (!integer_codes || head_dim <= 0 || head_dim % 64 != 0 || head_dim > 256) return false;
  if (internal::UsesVnniCodeTile()) return true;
  // AVX2 (or AVX-512 without VNNI): the 4-bit formats (attention_codes_avx2.cc
  // says why not int8).
  return ActiveIsa() >= CpuIsa::kAvx2 && dtype != KvDtype::kInt8;
}

int CodeWeightSteps(KvDtype dtype) {
  // attention_codes_avx512.cc: 4-bit rows take uint8 weights there.
  return internal::UsesVnniCodeTile() && dtype != KvDtype::kInt8 ? 255 : 32767;
}

bool UsesBf16DotFp8Attention(KvDtype dtype, int head_dim) {
  return dtype == KvDtype::kFp8E4m3 && head_dim > 0 && head_dim % 16 == 0 && head_dim <= 256 &&
         ActiveIsa() >= CpuIsa::kAvx512 && HasAvx512Bw() && HasAvx512Vbmi() && HasAvx512Bf16();
}

namespace {

// QuantizeQueryInt8's largest |q[d]| over [begin, end), from max_abs; NaN
// when a value is not finite.
inline float MaxAbsOrNanScalar(const float* q, int begin, int end, float max_abs) {
  for (int d = begin; d < end; ++d) {
    if (!std::isfinite(q[d])) return std::numeric_limits<float>::quiet_NaN();
    max_abs = std::max(max_abs, std::fabs(q[d]));
  }
  return max_abs;
}

// QuantizeQueryInt8's rounding of [begin, end): x = q * inv, the high digit
// nearbyint(x), the low one nearbyint((x - high) * 256) clamped to +-127.
inline void QuantizeQueryDigitsScalar(const float* q, int begin, int end, float inv, int8_t* q8,
                                      int8_t* q8_low) {
  for (int d = begin; d < end; ++d) {
    const float x = q[d] * inv;
    const float high = std::nearbyint(x);
    q8[d] = static_cast<int8_t>(high);
    if (q8_low != nullptr) {
      q8_low[d] =
          static_cast<int8_t>(std::clamp(std::nearbyint((x - high) * 256.0f), -127.0f, 127.0f));
    }
  }
}

// 8 integral floats in [-127, 127] as int8 (the saturating packs keep them).
__attribute__((target("avx2"))) inline void StoreInt8x8(__m256 integral, int8_t* dst) {
  const __m256i i32 = _mm256_cvtps_epi32(integral);
  const __m128i i16 =
      _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm_packs_epi16(i16, i16));
}

// The same, 8 values at a time: the same products, and rounding to nearest
// even as nearbyint does in the default mode, so every digit is the
// scalar one. Returns how many values it did (a multiple of 8).
__attribute__((target("avx2"))) int QuantizeQueryDigitsAvx2(const float* q, int dim, float inv,
                                                            int8_t* q8, int8_t* q8_low) {
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  int d = 0;
  for (; d + 8 <= dim; d += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(q + d), vinv);
    const __m256 high = _mm256_round_ps(x, kNearest);
    StoreInt8x8(high, q8 + d);
    if (q8_low != nullptr) {
      const __m256 low =
          _mm256_round_ps(_mm256_mul_ps(_mm256_sub_ps(x, high), _mm256_set1_ps(256.0f)), kNearest);
      StoreInt8x8(_mm256_min_ps(_mm256_max_ps(low, lo), hi), q8_low + d);
    }
  }
  return d;
}

// The largest |q[d]|, or NaN when some q[d] is not finite (max is exact
// in any order).
__attribute__((target("avx2"))) float MaxAbsOrNanAvx2(const float* q, int dim) {
  const __m256 sign = _mm256_set1_ps(-0.0f),
               inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  __m256 most = _mm256_setzero_ps();
  int not_finite = 0;
  int d = 0;
  for (; d + 8 <= dim; d += 8) {
    const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(q + d));
    not_finite |= _mm256_movemask_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ));  // inf or NaN
    most = _mm256_max_ps(most, a);
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(most), _mm256_extractf128_ps(most, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  if (not_finite != 0) return std::numeric_limits<float>::quiet_NaN();
  return MaxAbsOrNanScalar(q, d, dim, _mm_cvtss_f32(m));
}

}  // namespace

float QuantizeQueryInt8(const float* q, int dim, int8_t* q8, int8_t* q8_low) {
  // Vectorized on AVX2 (bit-identical): a decode pass quantizes its heads'
  // q once per pass, which at short contexts was a fifth of an int8 pass.
  const bool avx2 = ActiveIsa() >= CpuIsa::kAvx2;
  const float max_abs = avx2 ? MaxAbsOrNanAvx2(q, dim) : MaxAbsOrNanScalar(q, 0, dim, 0.0f);
  if (std::isnan(max_abs)) return max_abs;
  const float inv = max_abs > 0.0f ? 127.0f / max_abs : 0.0f;
  const int done = avx2 ? QuantizeQueryDigitsAvx2(q, dim, inv, q8, q8_low) : 0;
  QuantizeQueryDigitsScalar(q, done, dim, inv, q8, q8_low);
  return max_abs / 127.0f;
}

namespace internal {

bool UsesVnniCodeTile() {
  return ActiveIsa() >= CpuIsa::kAvx512 && HasAvx512Vnni() && HasAvx512Bw();
}

bool PrepareCodeQuery(const PagedAttentionParams& p, const HeadPass& pass, CodeQuery* query) {
  const int dim = p.head_dim;
  const bool nibbles = p.kv_dtype != KvDtype::kInt8;  // two codes per byte
  const int bias = p.kv_dtype == KvDtype::kInt8 ? 128 : p.kv_dtype == KvDtype::kInt4 ? 8 : 12;
  const float unit = p.kv_dtype == KvDtype::kFp4E2m1 ? 0.5f : 1.0f;  // fp4 codes are 2 v
  query->digits = p.kv_dtype == KvDtype::kInt8 ? 2 : 1;
  int8_t q8[256], q8_low[256];
  for (int g = 0; g < pass.count; ++g) {
    const float q_scale =
        QuantizeQueryInt8(pass.q[g], dim, q8, query->digits == 2 ? q8_low : nullptr);
    if (std::isnan(q_scale)) return false;
    int32_t sum = 0, sum_low = 0;
    for (int d = 0; d < dim; ++d) {
      // Nibble formats: in each 64-value piece, the even values first.
      const int at = nibbles ? d / 64 * 64 + (d % 2) * 32 + (d % 64) / 2 : d;
      query->q[g][at] = q8[d];
      sum += q8[d];
      if (query->digits == 2) {
        query->q_low[g][at] = q8_low[d];
        sum_low += q8_low[d];
      }
    }
    query->offset[g] = bias * sum;
    query->offset_low[g] = bias * sum_low;
    query->scale[g] = q_scale * p.scale * unit;
  }
  return true;
}

}  // namespace internal

namespace {

// One call on one ISA's Ops, its paths chosen once.
template <class Ops>
void RunPagedAttention(const PagedAttentionParams& p, int64_t items, ThreadPool* pool) {
  const AttentionPaths paths = ChoosePaths<Ops>(p.kv_dtype, p.head_dim);
  if (pool == nullptr) {
    AttendItems<Ops>(p, paths, 0, items);
    return;
  }
  if (SplitsPartitions(p, pool->num_threads())) {
    AttendPartitioned<Ops>(p, paths, *pool);
    return;
  }
  // Threads take whole GQA groups (the query heads of one kv head of one
  // token), so that a pass reads its kv head's rows once for all of them. A
  // head's result does not depend on its pass (AttendHeads), so the split
  // changes no bit.
  const int64_t group = p.num_heads / p.num_kv_heads;
  pool->ParallelFor(items / group, 1, [&](int64_t b, int64_t e) {
    AttendItems<Ops>(p, paths, b * group, e * group);
  });
}

}  // namespace

void PagedAttention(const PagedAttentionParams& p, ThreadPool* pool) {
  const int64_t items = static_cast<int64_t>(p.num_tokens) * p.num_heads;
  if (items <= 0) return;
  const CpuIsa isa = ActiveIsa();
  if (isa >= CpuIsa::kAvx512 && internal::Avx512AttentionSupports(p.head_dim)) {
    RunPagedAttention<Avx512Ops>(p, items, pool);
  } else if (isa >= CpuIsa::kAvx2) {
    RunPagedAttention<Avx2Ops>(p, items, pool);
  } else {
    RunPagedAttention<ScalarOps>(p, items, pool);
  }
}

void WriteKvCache(const WriteKvParams& p) {
  const int64_t row_bytes = KvRowBytes(p.kv_dtype, p.head_dim);
  auto* k_bytes = reinterpret_cast<uint8_t*>(p.k_cache);
  auto* v_bytes = reinterpret_cast<uint8_t*>(p.v_cache);
  auto* quantize = ActiveIsa() == CpuIsa::kAvx512 ? QuantizeKvRowAvx512 : QuantizeKvRow;
  for (int t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0) continue;
    const int64_t block = slot / p.block_size, offset = slot % p.block_size;
    for (int h = 0; h < p.num_kv_heads; ++h) {
      const int64_t src =
          static_cast<int64_t>(t) * p.src_stride + static_cast<int64_t>(h) * p.head_dim;
      const int64_t row = (block * p.num_kv_heads + h) * p.block_size + offset;
      const float ks = quantize(p.kv_dtype, p.k + src, p.head_dim, k_bytes + row * row_bytes);
      const float vs = quantize(p.kv_dtype, p.v + src, p.head_dim, v_bytes + row * row_bytes);
      if (p.k_scales != nullptr) p.k_scales[row] = ks;
      if (p.v_scales != nullptr) p.v_scales[row] = vs;
    }
  }
}

namespace internal {

float* ThreadScratch(ScratchUse use, int64_t floats) {
  thread_local std::array<std::vector<float>, static_cast<size_t>(ScratchUse::kCount)> buffers;
  std::vector<float>& buffer = buffers[static_cast<size_t>(use)];
  if (static_cast<int64_t>(buffer.size()) < floats) buffer.resize(floats);
  return buffer.data();
}

}  // namespace internal

}  // namespace kvserve::kernels
