// Internal to kernels/cpu: the per-pass state of PagedAttention shared by
// attention.cc (scalar and AVX2 bodies, the tile walk) and
// attention_avx512.cc (the AVX-512 tile step).
#pragma once

#include "kernels/cpu/attention.h"

namespace kvserve::kernels::internal {

// Query heads of one kv head handled in one pass, so a key tile loaded once
// serves them all. Each head's arithmetic is the same whatever the grouping.
inline constexpr int kMaxHeadsPerPass = 8;

// The running state of `count` query heads of one token over the tiles seen
// so far: out = sum_j exp(s_j - m) v_j (unnormalised), l = sum_j exp(s_j - m).
struct HeadPass {
  int count = 0;
  const float* q[kMaxHeadsPerPass];
  float* out[kMaxHeadsPerPass];  // rows of PagedAttentionParams::out
  float m[kMaxHeadsPerPass];
  float l[kMaxHeadsPerPass];
};

// True when the AVX-512 tile step handles rows of `head_dim` values: a
// multiple of 16 up to 256 (one to sixteen zmm per row).
bool Avx512AttentionSupports(int head_dim);

// One key tile (n <= kAttentionKeyTile keys, rows of fp32 given by pointer)
// for every head of the pass: scores, softcap, online-softmax step and
// accumulation. Needs AVX-512F. Each head's result is bit-identical
// whatever the pass's head count and the tile's place in the batch.
void AttendTileAvx512(const PagedAttentionParams& p, HeadPass& pass, const float* const* keys,
                      const float* const* vals, int n);

}  // namespace kvserve::kernels::internal
