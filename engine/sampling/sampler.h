// Sampler: turns one row of logits into the next token, vLLM-compatible.
//
// Order of processing: repetition penalty (prompt + output tokens: positive
// logits divided, negative multiplied), frequency and presence penalties
// (output tokens), temperature, top-k, top-p, min-p, then a draw. Temperature
// 0 is greedy (argmax, lowest id on ties) and ignores the rest.
// Logprobs are of the raw model distribution (log_softmax of the logits as
// given), for the chosen token and the top-N.
//
// Randomness: the uniform draw for output position i of a request is a pure
// function of (seed, i) (counter-based, SplitMix64/Philox style), so a request's
// tokens do not depend on the batch, on preemption or on other requests.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace kvserve::engine {

inline constexpr int kMaxLogprobs = 20;

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy; else > 0 and <= 100
  int32_t top_k = 0;         // 0 or -1: off; else >= 1
  float top_p = 1.0f;        // (0, 1]
  float min_p = 0.0f;        // [0, 1]
  float repetition_penalty = 1.0f;  // > 0 (1: off); vLLM: (0, 2] typical
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  uint64_t seed = 0;
  int32_t num_logprobs = 0;  // top-N logprobs to return, 0..kMaxLogprobs

  // InvalidArgument naming the field and the allowed range.
  absl::Status Validate() const;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;                    // of the chosen token (raw distribution)
  std::vector<TokenLogprob> top_logprobs;  // num_logprobs entries, best first
};

// The uniform double in [0, 1) for (seed, output_index).
double CounterUniform(uint64_t seed, uint64_t output_index);

// logits: one row over the vocabulary. prompt_tokens / output_tokens: the
// request's tokens so far (penalties); output_tokens.size() is the output
// position and keys the draw. params must have passed Validate().
SampleResult Sample(std::span<const float> logits, const SamplingParams& params,
                    std::span<const int32_t> prompt_tokens,
                    std::span<const int32_t> output_tokens);

}  // namespace kvserve::engine
