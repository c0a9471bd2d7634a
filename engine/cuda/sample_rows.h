// The host side of GPU sampling: turns SampleSpecs (engine/step_input.h) into
// the flat per-row lists kernels/cuda/sampling.h reads. One builder, used by
// the runner's step arena and by the sampling kernel's tests.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/step_input.h"
#include "kernels/cuda/sampling.h"

namespace kvserve::engine::cuda {

// Whether any penalty of `p` is on (its row then carries a penalty list).
bool AnyPenalty(const SamplingParams& p);

struct SampleRowLists {
  std::vector<kernels::cuda::CudaSampleRow> rows;
  std::vector<int32_t> penalty_tokens;  // each row's distinct prompt + output tokens
  std::vector<int32_t> penalty_counts;  // ... and their counts in the output
  std::vector<int32_t> masked_tokens;
};

// Appends one row for `spec`. Token ids outside [0, vocab) are dropped from
// both lists, as the CPU sampler ignores them. Penalty tokens come in
// ascending id order, so the upload is deterministic.
void AppendSampleRow(const SampleSpec& spec, int64_t vocab, SampleRowLists* lists);

}  // namespace kvserve::engine::cuda
