// StopChecker: per-request stop conditions and incremental text.
//
// For each output token, in this order:
//   1. stop token: EOS (the model's eos ids, unless ignore_eos) or one of
//      stop_token_ids finishes the request (kStopToken). Its id is part of
//      the output token ids; its text is not emitted. The scheduler masks
//      these ids out of the logits while fewer than min_tokens tokens have
//      been generated (StopTokensToMask), so output token i < min_tokens is
//      never a stop token.
//   2. the token's text is appended to the pending (not yet emitted) text.
//   3. stop strings (only once num_output_tokens >= min_tokens): the earliest
//      occurrence of any stop string in the pending text finishes the request
//      (kStopString); the text before it is emitted, the stop string and
//      anything after it are not.
//   4. max_tokens reached: finishes (kLength), emitting all pending text.
//   5. otherwise the pending text is emitted except its longest suffix that
//      is a proper prefix of some stop string (held back until the next
//      token disambiguates it).
// When 1. or 4. finishes the request, the rest of the text (a cut UTF-8
// sequence becomes U+FFFD) is checked for stop strings once more: one that
// only this flushed text completes finishes it as kStopString instead, so
// emitted text never contains a stop string once min_tokens is reached.
//
// Held-back text is what makes matching across token boundaries work: a stop
// string can only start in text not yet emitted, and every emitted byte is
// one that no stop string can start at (given the text so far). Text emitted
// while below min_tokens is never retracted: a stop string must end at or
// after the min_tokens-th token to count.
//
// Text is valid UTF-8 (IncrementalDetokenizer); stop strings are matched on
// its bytes. Without a tokenizer there is no text and no stop strings.
//
// Thread affinity: owned by its Request, used on the engine loop thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "scheduler/output_stream.h"

namespace kvserve::scheduler {

struct StopParams {
  int32_t max_tokens = 16;  // >= 0; 0: the prompt is computed, nothing sampled
  int32_t min_tokens = 0;   // <= max_tokens
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids = {};
  std::vector<std::string> stop_strings = {};  // non-empty strings
  bool skip_special_tokens = true;             // in the text
};

class StopChecker {
 public:
  // tokenizer may be null (no text). eos_token_ids: the model's.
  StopChecker(const StopParams& params, std::span<const int32_t> eos_token_ids,
              const engine::Tokenizer* tokenizer);
  StopChecker(const StopChecker&) = delete;
  StopChecker& operator=(const StopChecker&) = delete;

  struct Result {
    std::string text;  // to emit now
    FinishReason reason = FinishReason::kNone;
    std::string stop_string;  // kStopString
    int32_t stop_token = -1;  // kStopToken
  };
  // `token` is output token number num_output_tokens (1-based: the count
  // including it).
  Result Append(int32_t token, int32_t num_output_tokens);

  // The request ends for another reason (abort, expiry, error): the pending
  // text, including a trailing incomplete UTF-8 sequence as U+FFFD.
  std::string Flush();

  // Ids whose logits the sampler must mask before drawing output token number
  // num_output_tokens + 1 (empty once min_tokens is reached).
  std::span<const int32_t> StopTokensToMask(int32_t num_output_tokens) const;

  const std::string& pending_text() const { return pending_; }

 private:
  bool IsStopToken(int32_t token) const;
  // The request finishes (r->reason set): the rest of the text, including a
  // cut UTF-8 sequence as U+FFFD, into r->text, cut before a stop string that
  // only the flushed text completes (then r->reason becomes kStopString).
  void FinishText(int32_t num_output_tokens, Result* r);
  // Start of the earliest stop string in pending_, and which one.
  std::optional<std::pair<size_t, size_t>> FindStopString() const;
  // Length of the longest suffix of pending_ that is a proper prefix of a
  // stop string.
  size_t HeldBackLength() const;

  const int32_t max_tokens_;
  const int32_t min_tokens_;
  std::vector<int32_t> stop_tokens_;  // eos (unless ignored) + stop_token_ids
  std::vector<std::string> stop_strings_;
  size_t max_stop_len_ = 0;
  std::optional<engine::IncrementalDetokenizer> detok_;
  std::string pending_;
};

}  // namespace kvserve::scheduler
