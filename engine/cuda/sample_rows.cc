#include "engine/cuda/sample_rows.h"

#include <map>

namespace kvserve::engine::cuda {

bool AnyPenalty(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

void AppendSampleRow(const SampleSpec& spec, int64_t vocab, SampleRowLists* lists) {
  const SamplingParams& p = spec.params;
  kernels::cuda::CudaSampleRow r{.temperature = p.temperature,
                                 .top_k = p.top_k,
                                 .top_p = p.top_p,
                                 .min_p = p.min_p,
                                 .repetition_penalty = p.repetition_penalty,
                                 .presence_penalty = p.presence_penalty,
                                 .frequency_penalty = p.frequency_penalty,
                                 .num_logprobs = p.num_logprobs,
                                 .seed = p.seed,
                                 .output_index = spec.output_tokens.size()};
  r.penalty_begin = static_cast<int32_t>(lists->penalty_tokens.size());
  if (AnyPenalty(p)) {
    std::map<int32_t, int32_t> counts;  // distinct tokens, ascending
    for (int32_t t : spec.prompt_tokens) counts.try_emplace(t, 0);
    for (int32_t t : spec.output_tokens) ++counts[t];
    for (const auto& [token, count] : counts) {
      if (token < 0 || token >= vocab) continue;
      lists->penalty_tokens.push_back(token);
      lists->penalty_counts.push_back(count);
    }
  }
  r.penalty_end = static_cast<int32_t>(lists->penalty_tokens.size());
  r.mask_begin = static_cast<int32_t>(lists->masked_tokens.size());
  for (int32_t t : spec.masked_tokens) {
    if (t >= 0 && t < vocab) lists->masked_tokens.push_back(t);
  }
  r.mask_end = static_cast<int32_t>(lists->masked_tokens.size());
  lists->rows.push_back(r);
}

}  // namespace kvserve::engine::cuda
