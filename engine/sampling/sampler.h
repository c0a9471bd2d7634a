// Sampler: turns one row of logits into the next token, vLLM-compatible.
//
// Order of processing (all on a private copy of the row):
//   0. logit_bias: logit += bias for each listed token (before every other
//      processor, as vLLM and OpenAI apply it); a masked (-inf) logit stays
//      masked and the sum is kept finite;
//   1. repetition penalty over the distinct tokens of prompt + output (each
//      token once): positive logits divided by it, negative multiplied;
//   2. frequency and presence penalties over the output tokens:
//      logit -= frequency_penalty * count_in_output + presence_penalty;
//   3. temperature;  4. top-k;  5. top-p;  6. min-p;  7. the draw.
// Temperature below kGreedyTemperature (0 in practice) is greedy: argmax of
// the *biased and penalised* logits (penalties apply, as in vLLM), lowest id on ties;
// steps 3-7 are skipped.
//
// Rank order: top-k, top-p and min-p each keep a prefix of the tokens ranked
// by (penalised logit desc, token id asc). The order is total, so which tokens
// survive never depends on the selection algorithm. Temperature does not
// change the ranking. Masked tokens (-inf) rank last, have mass 0 and are
// never drawn.
// With masses m_t = exp((l_t - l_max) / T) (1 for the top token):
//   top-k: the first top_k tokens.
//   top-p: the shortest prefix whose mass, summed in rank order, reaches
//          top_p times the mass of the top-k survivors (all tokens when top-k
//          is off); never empty.
//   min-p: ends the prefix before the first token with m_t < min_p, i.e.
//          probability < min_p * (max probability).
// Draw (inverse CDF): over the kept set S visited in ascending token id, the
// first token whose cumulative mass exceeds u * sum_{t in S} m_t, where
// u = CounterUniform(seed, output position). Zero-mass tokens are never
// drawn. Masses are float, sums double in a fixed order (see sampler.cc),
// and no libm function decides a token: identical inputs give the identical
// token on any IEEE-754 machine. (Logprobs use std::log and std::exp.)
//
// Logprobs are of the raw model distribution (log_softmax of the logits as
// given, before logit_bias, penalties and temperature), for the chosen token and the
// top-N ranked by (raw logit desc, token id asc).
//
// Input hygiene (never crashes on these): NaN logits are treated as -inf and
// +inf as the largest float; a row with every logit masked yields token 0 with
// logprob -inf; token ids in prompt/output outside [0, vocab) are ignored by
// the penalties; a penalised logit is kept finite.
//
// Randomness: the uniform draw for output position i of a request is a pure
// function of (seed, i) (counter-based, SplitMix64 style), so a request's
// tokens do not depend on the batch, on preemption or on other requests.
//
// Threads: Sample() is reentrant; each thread uses its own scratch (the
// overload without a scratch uses a thread_local one).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace kvserve::engine {

inline constexpr int kMaxLogprobs = 20;

// Parameter bounds enforced by SamplingParams::Validate(). NaN fails every
// check.
inline constexpr float kMaxTemperature = 100.0f;
// Temperatures in [0, kGreedyTemperature) are greedy (vLLM's _SAMPLING_EPS).
// Any temperature >= this is used as given (vLLM clamps those below 1e-2):
// exponents (l - l_max) / T are <= 0, so a small T cannot overflow.
inline constexpr float kGreedyTemperature = 1e-5f;
inline constexpr float kMaxRepetitionPenalty = 2.0f;  // (0, 2]
inline constexpr float kMaxAdditivePenalty = 2.0f;    // presence/frequency: [-2, 2]
inline constexpr float kMaxLogitBias = 100.0f;        // each bias in [-100, 100]

// One logit_bias entry: added to the token's logit before anything else.
struct TokenBias {
  int32_t token = 0;
  float bias = 0.0f;
  friend bool operator==(const TokenBias&, const TokenBias&) = default;
};

struct SamplingParams {
  float temperature = 1.0f;         // [0, 100]; < kGreedyTemperature: greedy
  int32_t top_k = 0;                // 0 or -1: off; else >= 1 (>= vocab: off)
  float top_p = 1.0f;               // (0, 1]; 1: off
  float min_p = 0.0f;               // [0, 1]; 0: off
  float repetition_penalty = 1.0f;  // (0, 2]; 1: off
  float presence_penalty = 0.0f;    // [-2, 2]; 0: off
  float frequency_penalty = 0.0f;   // [-2, 2]; 0: off
  uint64_t seed = 0;
  // Ascending, distinct token ids; each bias in [-kMaxLogitBias,
  // kMaxLogitBias]. Ids outside the row's vocabulary are ignored here (the
  // request layers refuse them by name). Empty: off.
  std::vector<TokenBias> logit_bias;
  int32_t num_logprobs = 0;  // top-N logprobs to return, 0..kMaxLogprobs
  // false: the result carries no logprobs (SampleResult::logprob NaN, no
  // top entries, num_logprobs ignored), which spares a pass of exp over the
  // row; the token is the same either way.
  bool logprobs = true;

  // InvalidArgument naming the field, the allowed range and the value given.
  absl::Status Validate() const;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;  // of the chosen token (raw distribution); NaN without params.logprobs
  std::vector<TokenLogprob> top_logprobs;  // min(num_logprobs, vocab) entries, best first
};

// The raw distribution's view of one given token (prompt logprobs): what
// Sample() would report for it had it been drawn, plus its rank.
struct TokenScore {
  int32_t token = 0;
  float logprob = 0.0f;
  int32_t rank = 0;  // 1 + tokens before it in the rank order (1: the top token)
  std::vector<TokenLogprob> top_logprobs;  // min(num_top, vocab) entries, best first
};

// Scores `token` (inside the row) in one logits row: log_softmax of the raw
// row (sanitized as Sample() does), its rank by (logit desc, id asc), and
// the top num_top entries (0..kMaxLogprobs). Pure; thread-safe.
TokenScore ScoreToken(std::span<const float> logits, int32_t token, int32_t num_top);

// Reusable buffers for Sample(), grown on demand and never shrunk: at most
// 20 bytes per vocabulary entry (3 MB for a 152k vocabulary). Not
// thread-safe: one per thread. Invariant between calls: marks_ and bitmap_
// are all 0.
class SamplerScratch {
 public:
  SamplerScratch() = default;
  SamplerScratch(const SamplerScratch&) = delete;
  SamplerScratch& operator=(const SamplerScratch&) = delete;
  SamplerScratch(SamplerScratch&&) = default;  // a moved-from scratch is empty and valid
  SamplerScratch& operator=(SamplerScratch&&) = default;

 private:
  friend class SamplerImpl;
  std::vector<float> logits_;          // working copy of the row (penalised)
  std::vector<uint64_t> keys_;         // candidate rank keys (logit bits | id), then kept ids
  std::vector<uint32_t> marks_;        // per token: repetition bit | output count; all 0 at rest
  std::vector<float> masses_;          // masses of the kept set, in ascending id
  std::vector<uint64_t> bitmap_;       // one bit per token; all 0 at rest
  std::vector<uint64_t> sort_buffer_;  // RadixSort's other half
};

// The uniform double in [0, 1) for (seed, output_index): 53 random mantissa
// bits of SplitMix64 output number output_index + 1 from a state derived from
// seed. A pure function.
double CounterUniform(uint64_t seed, uint64_t output_index);

// logits: one row over the vocabulary (non-empty). prompt_tokens /
// output_tokens: the request's tokens so far (penalties); output_tokens.size()
// is the output position and keys the draw. params must have passed
// Validate(). The result depends on nothing else.
SampleResult Sample(std::span<const float> logits, const SamplingParams& params,
                    std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens);

// Same, with caller-owned scratch buffers.
SampleResult Sample(std::span<const float> logits, const SamplingParams& params,
                    std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens,
                    SamplerScratch& scratch);

}  // namespace kvserve::engine
