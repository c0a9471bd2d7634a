#include "engine/step_input.h"

namespace kvserve::engine {

void StepInput::AddSequence(std::span<const int32_t> new_tokens, int32_t first_position,
                            std::span<const int32_t> block_table, int32_t block_size,
                            Logits logits) {
  const int32_t first_index = num_tokens();
  for (size_t i = 0; i < new_tokens.size(); ++i) {
    const int32_t pos = first_position + static_cast<int32_t>(i);
    token_ids.push_back(new_tokens[i]);
    positions.push_back(pos);
    // A position past the block table gets an invalid slot; ModelRunner
    // rejects the step with a message rather than writing out of bounds.
    const size_t block_index = static_cast<size_t>(pos / block_size);
    slot_mapping.push_back(block_index < block_table.size()
                               ? int64_t{block_table[block_index]} * block_size + pos % block_size
                               : -1);
    if (logits == Logits::kAll) logits_indices.push_back(first_index + static_cast<int32_t>(i));
  }
  if (logits == Logits::kLast && !new_tokens.empty()) logits_indices.push_back(num_tokens() - 1);
  query_start.push_back(num_tokens());
  block_ids.insert(block_ids.end(), block_table.begin(), block_table.end());
  block_table_start.push_back(static_cast<int32_t>(block_ids.size()));
}

}  // namespace kvserve::engine
