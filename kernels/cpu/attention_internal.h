// Internal to kernels/cpu: the per-pass state of PagedAttention shared by
// attention.cc (scalar and AVX2 bodies, the tile walk) and
// attention_avx512.cc (the AVX-512 tile step).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/attention.h"

namespace kvserve::kernels::internal {

// Query heads of one kv head handled in one pass, so a key tile loaded once
// serves them all: the heads of one token, or of several consecutive tokens
// of one sequence (prefill). Each head's arithmetic is the same whatever the
// grouping.
inline constexpr int kMaxHeadsPerPass = 16;

// The running state of `count` query heads over the tiles seen so far:
// out = sum_j exp(s_j - m) v_j (unnormalised), l = sum_j exp(s_j - m).
// n[g]: how many of the current tile's keys head g attends (its causal end
// can fall inside the tile or before it: then 0, and the tile leaves the
// head alone); heads of a tile step see keys 0..n[g) of the tile's n.
struct HeadPass {
  int count = 0;
  const float* q[kMaxHeadsPerPass];
  float* out[kMaxHeadsPerPass];  // rows of PagedAttentionParams::out
  float m[kMaxHeadsPerPass];
  float l[kMaxHeadsPerPass];
  int n[kMaxHeadsPerPass];
};

// One past the last head of the run of heads from g that attend the same
// number of the tile's keys (runs are what a value accumulation shares).
inline int HeadRunEnd(const HeadPass& pass, int g) {
  int e = g + 1;
  while (e < pass.count && pass.n[e] == pass.n[g]) ++e;
  return e;
}

// Size of the next group when `left` heads remain to be cut into
// ceil(left / most) groups as even as can be (4 heads, most 3: 2 + 2): how
// the AVX2 tile steps group a pass's heads to share each row they read.
inline int NextHeadGroupSize(int left, int most) {
  const int groups = (left + most - 1) / most;
  return (left + groups - 1) / groups;
}

// True when the AVX-512 tile step handles rows of `head_dim` values: a
// multiple of 16 up to 256 (one to sixteen zmm per row).
bool Avx512AttentionSupports(int head_dim);

class LinePrefetcher;

// One key tile (n <= kAttentionKeyTile keys, rows of fp32 given by pointer)
// for every head of the pass (head g: keys 0..pass.n[g)): scores, softcap, online-softmax step and
// accumulation. Needs AVX-512F. Each head's result is bit-identical
// whatever the pass's head count and the tile's place in the batch.
// next_tile (nullable): the next tile's lines, asked for a share before each
// head's scores and the rest before the accumulation (LinePrefetcher below).
void AttendTileAvx512(const PagedAttentionParams& p, HeadPass& pass, const float* const* keys,
                      const float* const* vals, int n, LinePrefetcher* next_tile);

// The same step over bf16 or fp16 rows (p.kv_dtype) read in place: each
// value widened to fp32 in registers, exactly as the row decoders widen
// it, so the result is bit-identical to AttendTileAvx512 on decoded rows.
void AttendTile16Avx512(const PagedAttentionParams& p, HeadPass& pass, const uint16_t* const* keys,
                        const uint16_t* const* vals, int n, LinePrefetcher* next_tile);

// The same step over fp8 e4m3 rows read in place (k_rows / v_rows point at
// the codes; k_scales / v_scales hold their scales, kAttentionKeyTile of
// each, past n any finite value). As the AVX2 row step does, a row's values
// enter before its scale: the scale multiplies the key's score and the
// value's weight. Each head's result is bit-identical whatever the pass's
// head count and the tile's place in the batch.
void AttendTileFp8Avx512(const PagedAttentionParams& p, HeadPass& pass,
                         const uint8_t* const* k_rows, const float* k_scales,
                         const uint8_t* const* v_rows, const float* v_scales, int n,
                         LinePrefetcher* next_tile);

// The same step with bf16 dot products (vdpbf16ps; attention.h,
// UsesBf16DotFp8Attention): q and each weight times its V row's scale
// rounded to bf16, the rows decoded exactly. Needs AVX512-BW, VBMI and BF16
// and head_dim a multiple of 16. Each head's result is bit-identical
// whatever the pass's head count and the tile's place in the batch.
void AttendTileFp8Bf16Avx512(const PagedAttentionParams& p, HeadPass& pass,
                             const uint8_t* const* k_rows, const float* k_scales,
                             const uint8_t* const* v_rows, const float* v_scales, int n,
                             LinePrefetcher* next_tile);

// The calling thread's fp32 scratch buffers, one per use, each at least
// `floats` long and valid until the thread's next call for the same use. A
// pass over a packed format holds both at once (a tile's decoded rows while
// its partition state is live), hence one buffer per use.
enum class ScratchUse {
  kDecodedRows,     // a tile's K and V rows decoded to fp32
  kPartitionState,  // a pass's unnormalised partition output
  kCount,           // not a use: how many there are
};
float* ThreadScratch(ScratchUse use, int64_t floats);

// The cache lines of the next key tile (its K and V rows and their
// scales), listed by the walk as runs of consecutive lines. The AVX2 tile
// step asks for them a few at a time while it scores its own keys, and the
// AVX-512 steps a share before each head's scores (Issue), so that the next
// tile's reads overlap this tile's arithmetic. Asking for a whole tile at once, before the step,
// overlapped nothing on an AVX2 EPYC (kv_cache_bench: the same time as no prefetch). Prefetches are
// hints: a run past kMaxRuns is left out, and nothing here changes a result.
class LinePrefetcher {
 public:
  // A tile of kAttentionKeyTile keys spans at most that many runs of rows
  // (block_size 1), each with K, V and their two scale runs.
  static constexpr int kMaxRuns = 4 * kAttentionKeyTile + 4;

  void Clear() { num_runs_ = total_ = issued_ = run_ = line_ = 0; }
  // Adds the lines holding bytes [begin, begin + bytes).
  void Add(const void* begin, int64_t bytes) {
    if (bytes <= 0 || num_runs_ == kMaxRuns) return;
    const uintptr_t first = reinterpret_cast<uintptr_t>(begin) / 64;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + bytes - 1) / 64;
    runs_[num_runs_++] = {first, static_cast<int>(last - first + 1)};
    total_ += static_cast<int>(last - first + 1);
  }
  // How many lines to ask for per `step` of `steps`, for the list to be
  // asked for in full by the last step.
  int LinesPerStep(int step, int steps) const {
    if (issued_ >= total_) return 0;
    return steps > 0 ? static_cast<int>((int64_t{total_} * step + steps - 1) / steps) : total_;
  }
  // Asks (prefetcht2) for the next `lines` lines of the list, in order.
  void Issue(int lines) {
    Take(lines, [](const void* line) { __builtin_prefetch(line, 0, 1); });
  }
  // Calls visit(line address) for the next `lines` lines of the list (fewer
  // at its end), in order, and counts them as asked for.
  // A run's lines go out from one tight loop (the bookkeeping per run, not
  // per line: listing and asking line by line took a fifth of a bf16 pass in
  // L2).
  template <class Visit>
  void Take(int lines, Visit visit) {
    lines = std::min(lines, total_ - issued_);  // nothing (left) to ask for: 0
    while (lines > 0) {
      const Run& run = runs_[run_];
      const int take = std::min(lines, run.lines - line_);
      const uintptr_t first = run.first_line + line_;
      for (uintptr_t line = first; line < first + take; ++line) {
        visit(reinterpret_cast<const void*>(line * 64));
      }
      issued_ += take;
      lines -= take;
      line_ += take;
      if (line_ == run.lines) {
        line_ = 0;
        ++run_;
      }
    }
  }
  void IssueRest() { Issue(total_); }
  bool Pending() const { return issued_ < total_; }

 private:
  struct Run {
    uintptr_t first_line;
    int lines;
  };
  Run runs_[kMaxRuns];
  int num_runs_ = 0, total_ = 0, issued_ = 0;
  int run_ = 0, line_ = 0;  // the next line to ask for
};

// The online-softmax step of the AVX2 paths over one tile's scores s[0, n)
// (s has room for n rounded up to 8; those slots are set to -inf): *m <-
// max(*m, max s), s[j] <- exp(s[j] - *m), *corr <- exp(m_old - *m); returns
// sum_j s[j] (vectors in order, then lanes). Needs AVX2 and FMA.
float SoftmaxAvx2(float* s, int n, float* m, float* corr);

// True when the AVX2 row tile step handles rows of `head_dim` values (a
// multiple of 8).
bool Avx2RowTileSupports(int head_dim);

// One key tile (n <= kAttentionKeyTile keys; head g: 0..pass.n[g)) for every
// head of the pass, the cache rows of any format (p.kv_dtype) read in place
// (attention_avx2.cc): k_rows / v_rows point at the rows, k_scales /
// v_scales hold their scales (1 for the unscaled formats; kAttentionKeyTile
// of each, past n any finite value). Needs AVX2, FMA and F16C. Each head's
// result is bit-identical whatever the pass's head count and the tile's
// place in the batch, and a bf16 / fp16 row attends exactly as an fp32 row
// of its values does. next_tile: the next tile's lines (empty for none),
// all asked for by the time the step returns.
void AttendRowTileAvx2(const PagedAttentionParams& p, HeadPass& pass, const uint8_t* const* k_rows,
                       const float* k_scales, const uint8_t* const* v_rows, const float* v_scales,
                       int n, LinePrefetcher& next_tile);

// The integer-code path (attention.h): every head of a pass with its q
// rounded to one or two int8 digits (q ~ scale' * (q + q_low / 256)), in
// the order the format's key codes are unpacked in (int4 and fp4 rows hold
// two codes per byte: each 64-value piece of q is stored as its even then
// its odd values), with the constants that turn sum_d u[d] * digit[d] over
// the unsigned codes u = code + bias into a score.
struct CodeQuery {
  int digits = 1;  // 2 for int8 rows
  alignas(64) int8_t q[kMaxHeadsPerPass][256];
  alignas(64) int8_t q_low[kMaxHeadsPerPass][256];  // digits == 2
  int32_t offset[kMaxHeadsPerPass];                 // bias * sum_d q[d]
  int32_t offset_low[kMaxHeadsPerPass];             // bias * sum_d q_low[d]
  float scale[kMaxHeadsPerPass];                    // q's scale * attention scale (* 1/2 for fp4)
};

// Fills `query` for the pass; false when a head's q is not finite (the pass
// then takes the fp32-tile path). Needs UsesIntegerCodeAttention.
bool PrepareCodeQuery(const PagedAttentionParams& p, const HeadPass& pass, CodeQuery* query);

// One key tile (n <= kAttentionKeyTile keys; head g: 0..pass.n[g)) of the
// integer-code path:
// k_rows / v_rows point at the cache rows' codes, k_scales / v_scales hold
// their scales (kAttentionKeyTile of each; past n any finite value). Needs
// AVX-512F, BW and VNNI; each head's result (in the order below) is bit-identical whatever the
// pass's head count and the tile's place in the batch. next_tile (nullable) as for
// AttendTileAvx512.
void AttendCodeTileAvx512Vnni(const PagedAttentionParams& p, HeadPass& pass, const CodeQuery& query,
                              const uint8_t* const* k_rows, const float* k_scales,
                              const uint8_t* const* v_rows, const float* v_scales, int n,
                              LinePrefetcher* next_tile);

// The same step for int4 and fp4 rows on AVX2 without VNNI
// (attention_codes_avx2.cc): the same scores, bit for bit; the AVX2 softmax
// (SoftmaxAvx2), then the same rounding of the weights and integer value
// sums. next_tile as for AttendRowTileAvx2. Needs AVX2, FMA and F16C; each
// head's result is bit-identical whatever the pass's head count and the
// tile's place in the batch.
void AttendCodeTileAvx2(const PagedAttentionParams& p, HeadPass& pass, const CodeQuery& query,
                        const uint8_t* const* k_rows, const float* k_scales,
                        const uint8_t* const* v_rows, const float* v_scales,
                        LinePrefetcher& next_tile);

// True when the integer-code path runs the VNNI step above on ActiveIsa()
// (AVX-512 with VNNI and BW), false when it runs the AVX2 step.
bool UsesVnniCodeTile();

// The tile steps above keep each head's output in the order their integer
// value sums produce it, not dimension order; these put one head's row back
// in dimension order, after the pass's last tile (one per step).
void RestoreCodeValueOrder(KvDtype dtype, int head_dim, float* out);
void RestoreCodeValueOrderAvx2(int head_dim, float* out);

}  // namespace kvserve::kernels::internal
