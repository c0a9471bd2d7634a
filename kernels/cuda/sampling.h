// Sampling on the GPU: the semantics of engine/sampling/sampler.h (penalties,
// temperature, top-k, top-p, min-p, the inverse-CDF draw keyed by
// CounterUniform(seed, output_index), greedy = argmax with the lowest id on
// ties, raw-distribution logprobs), one CTA per row. Only the chosen ids and
// the requested logprobs are copied back to the host.
//
// Equivalence with the CPU sampler: greedy rows and the kept set's rank
// order are exact. The draw compares a cumulative mass with u * total; the
// GPU sums masses in a different order than the CPU (a block reduction), so
// a draw that lands within rounding of a boundary between two tokens may
// pick the neighbour. Tests compare against the CPU sampler on random rows
// and allow no mismatch away from such boundaries.
#pragma once

#include "kernels/cuda/cuda_types.h"

namespace kvserve::kernels::cuda {

inline constexpr int kCudaMaxLogprobs = 20;  // == engine::kMaxLogprobs

// One row's parameters (copied to the device as an array). Validated by the
// caller (SamplingParams::Validate).
struct CudaSampleRow {
  float temperature = 1.0f;  // < 1e-5: greedy
  int32_t top_k = 0;         // <= 0 or >= vocab: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t num_logprobs = 0;  // 0 .. kCudaMaxLogprobs
  uint64_t seed = 0;
  uint64_t output_index = 0;  // the request's output position (keys the draw)
  // Penalty tokens of this row: penalty_tokens[penalty_begin, penalty_end),
  // each distinct token of prompt + output once, with its count in the output
  // in penalty_counts (0 for prompt-only tokens). Empty when no penalty is on.
  int32_t penalty_begin = 0;
  int32_t penalty_end = 0;
  // Tokens masked to -inf before anything else (min_tokens' stop tokens):
  // masked_tokens[mask_begin, mask_end).
  int32_t mask_begin = 0;
  int32_t mask_end = 0;
};

struct CudaTokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct CudaSamplingParams {
  float* logits = nullptr;  // [num_rows, vocab] fp32; overwritten (penalties, masks)
  int num_rows = 0;
  int vocab = 0;
  const CudaSampleRow* rows = nullptr;  // [num_rows]
  const int32_t* penalty_tokens = nullptr;
  const int32_t* penalty_counts = nullptr;
  const int32_t* masked_tokens = nullptr;
  // Outputs (device): the chosen token, its logprob, and the top
  // num_logprobs (token, logprob) of the raw distribution, best first, in
  // row r's slots [r * kCudaMaxLogprobs, r * kCudaMaxLogprobs + num_logprobs).
  int32_t* out_tokens = nullptr;        // [num_rows]
  float* out_logprobs = nullptr;        // [num_rows]
  CudaTokenLogprob* out_top = nullptr;  // [num_rows * kCudaMaxLogprobs]
  void* workspace = nullptr;            // >= SamplingWorkspaceBytes(num_rows, vocab)
  size_t workspace_bytes = 0;
};

size_t SamplingWorkspaceBytes(int num_rows, int vocab);

cudaError_t SampleRows(const CudaSamplingParams& p, cudaStream_t stream);

}  // namespace kvserve::kernels::cuda
