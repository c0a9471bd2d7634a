// StepInput: one forward step over a flattened batch of sequences, as the
// scheduler hands it to the ModelRunner. Plain data; no request state.
//
// Token region arithmetic for sequence s:
//
//   flattened tokens:  [ query_start[s] ......... query_start[s+1] )
//   their positions:    positions[i], absolute in the sequence, contiguous and
//                       increasing within s (a prompt chunk or one decode token)
//   block table:       block_ids[ block_table_start[s] .. block_table_start[s+1] )
//                       covering positions 0 .. positions[last] of s
//   K/V written to:    slot_mapping[i] = block_table[pos / block_size] * block_size
//                                        + pos % block_size
//
// Token i attends to keys 0..positions[i] of its sequence: cached keys from
// earlier steps or shared prefix blocks, plus the keys of this step's earlier
// tokens. Prefill, chunked prefill and decode are the same rule.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/sampling/sampler.h"

namespace kvserve::engine {

// How to sample one logits row on the device, with everything the sampler
// (engine/sampling/sampler.h) reads. The spans point into the scheduler's
// request state and stay valid for the duration of the Step call only.
struct SampleSpec {
  SamplingParams params;
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;  // its size is the output position
  std::span<const int32_t> masked_tokens;  // set to -inf first (min_tokens' stop tokens)
};

struct StepInput {
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;
  std::vector<int64_t> slot_mapping;
  std::vector<int32_t> query_start = {0};        // num_seqs + 1
  std::vector<int32_t> block_table_start = {0};  // num_seqs + 1
  std::vector<int32_t> block_ids;
  // Flattened token indices whose logits the step returns, in this order
  // (usually the last token of each sequence that will sample).
  std::vector<int32_t> logits_indices;
  // Filled only for a runner that samples on its device (see
  // SampleSpec): one per logits index, in the same order. Empty otherwise.
  std::vector<SampleSpec> sample_specs;

  int32_t num_seqs() const { return static_cast<int32_t>(query_start.size()) - 1; }
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }

  enum class Logits { kNone, kLast, kAll };
  // Appends a sequence whose new tokens start at absolute position
  // first_position; computes positions and slots from block_table.
  void AddSequence(std::span<const int32_t> new_tokens, int32_t first_position,
                   std::span<const int32_t> block_table, int32_t block_size, Logits logits);
};

// Checks that a step is well formed for a model with `vocab_size` tokens and
// a KV cache of num_blocks x block_size slots: InvalidArgument naming the
// sequence and token for an id outside the vocabulary, a slot or block id
// outside the cache, positions that are not contiguous, a block table shorter
// than needed, or sample_specs that do not match logits_indices. Every
// runner calls it before touching its cache.
absl::Status ValidateStepInput(const StepInput& in, int64_t vocab_size, int64_t num_blocks,
                               int64_t block_size);

struct StepOutput {
  int64_t vocab_size = 0;
  std::vector<float> logits;  // [logits_indices.size(), vocab_size]; empty when sampled
  // When the runner sampled on its device (input.sample_specs non-empty):
  // one result per logits index, and no logits.
  std::vector<SampleResult> samples;

  std::span<const float> row(size_t i) const {
    return {logits.data() + i * vocab_size, static_cast<size_t>(vocab_size)};
  }
};

}  // namespace kvserve::engine
