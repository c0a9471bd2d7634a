#include "engine/step_input.h"

#include "absl/strings/str_cat.h"

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

absl::Status ValidateStepInput(const StepInput& in, int64_t vocab_size, int64_t num_blocks,
                               int64_t block_size) {
  const int32_t n = in.num_tokens();
  const int32_t seqs = in.num_seqs();
  if (seqs < 0 || in.positions.size() != static_cast<size_t>(n) ||
      in.slot_mapping.size() != static_cast<size_t>(n) ||
      in.block_table_start.size() != in.query_start.size() || in.query_start.front() != 0 ||
      in.query_start.back() != n || in.block_table_start.front() != 0 ||
      in.block_table_start.back() != static_cast<int32_t>(in.block_ids.size())) {
    return absl::InvalidArgumentError("step input: array sizes are inconsistent");
  }
  const int64_t bs = block_size;
  for (int32_t b : in.block_ids) {
    if (b < 0 || b >= num_blocks) {
      return absl::InvalidArgumentError(
          absl::StrCat("step input: block id ", b, " outside [0, ", num_blocks, ")"));
    }
  }
  for (int32_t s = 0; s < seqs; ++s) {
    const int32_t begin = in.query_start[s], end = in.query_start[s + 1];
    if (end < begin) return absl::InvalidArgumentError("step input: query_start decreases");
    const int64_t table_len = in.block_table_start[s + 1] - in.block_table_start[s];
    for (int32_t i = begin; i < end; ++i) {
      const int32_t pos = in.positions[i];
      if (in.token_ids[i] < 0 || in.token_ids[i] >= vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("step input: sequence ", s, " token ", i,
                                                       ": id ", in.token_ids[i],
                                                       " outside the vocabulary"));
      }
      if (pos < 0 || (i > begin && pos != in.positions[i - 1] + 1)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "step input: sequence ", s, " positions must be contiguous and non-negative"));
      }
      if (pos / bs >= table_len) {
        return absl::InvalidArgumentError(absl::StrCat("step input: sequence ", s, " position ",
                                                       pos, " is past its block table"));
      }
      const int64_t expected_slot =
          int64_t{in.block_ids[in.block_table_start[s] + pos / bs]} * bs + pos % bs;
      if (in.slot_mapping[i] != expected_slot) {
        return absl::InvalidArgumentError(
            absl::StrCat("step input: sequence ", s, " token ", i, ": slot ", in.slot_mapping[i],
                         " is not the block table's slot ", expected_slot));
      }
    }
  }
  for (int32_t idx : in.logits_indices) {
    if (idx < 0 || idx >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("step input: logits index ", idx, " outside [0, ", n, ")"));
    }
  }
  if (!in.sample_specs.empty() && in.sample_specs.size() != in.logits_indices.size()) {
    return absl::InvalidArgumentError("step input: sample_specs must match logits_indices");
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine
