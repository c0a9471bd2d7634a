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

namespace kvserve::engine {

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

  int32_t num_seqs() const { return static_cast<int32_t>(query_start.size()) - 1; }
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }

  enum class Logits { kNone, kLast, kAll };
  // Appends a sequence whose new tokens start at absolute position
  // first_position; computes positions and slots from block_table.
  void AddSequence(std::span<const int32_t> new_tokens, int32_t first_position,
                   std::span<const int32_t> block_table, int32_t block_size, Logits logits);
};

struct StepOutput {
  int64_t vocab_size = 0;
  std::vector<float> logits;  // [logits_indices.size(), vocab_size]

  std::span<const float> row(size_t i) const {
    return {logits.data() + i * vocab_size, static_cast<size_t>(vocab_size)};
  }
};

}  // namespace kvserve::engine
