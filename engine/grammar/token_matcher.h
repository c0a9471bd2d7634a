// TokenMatcher: one request's position in its grammar, and the set of
// tokens that may come next.
//
// Per output token: FillMask() (which ids the grammar allows next), the
// sampler draws from the row with every other id at -inf (ApplyMask, before
// penalties, temperature, top-k and top-p: a disallowed token has mass 0 and
// can never be drawn), then Accept(token) advances the grammar. The mask is
// a pure function of the tokens accepted so far, so a constrained request's
// tokens stay independent of the batch.
//
// A grammar that is complete allows only the stop tokens (the model's EOS
// ids); accepting one terminates it. A grammar that can be complete or go on
// (a regex "[0-9]+") allows both.
//
// Threads: one request's matcher is used by one thread at a time; matchers
// of different requests may run on different threads at once (they share
// the CompiledGrammar read-only).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "xgrammar/matcher.h"

namespace kvserve::engine::grammar {

class TokenMatcher {
 public:
  // vocab_size: the logits row's length.
  TokenMatcher(const xgrammar::CompiledGrammar& grammar, int32_t vocab_size);

  // Computes the allowed set for the next token. Not once terminated().
  void FillMask();
  // After FillMask: whether `token` is allowed.
  bool Allowed(int32_t token) const;
  // After FillMask: logits[t] = -inf for every t not allowed.
  void ApplyMask(std::span<float> logits) const;
  // After FillMask: appends the ids not allowed (a device sampler's mask list).
  void AppendDisallowed(std::vector<int32_t>* ids) const;
  int32_t NumAllowed() const;

  // Advances by one token; false (nothing changes) when the grammar does not
  // allow it.
  bool Accept(int32_t token);
  // A stop token was accepted at the grammar's end: nothing may follow.
  bool terminated() const { return matcher_.IsTerminated(); }

 private:
  xgrammar::GrammarMatcher matcher_;
  const int32_t vocab_size_;
  std::vector<int32_t> bitmask_;  // bit t % 32 of word t / 32: t allowed
};

}  // namespace kvserve::engine::grammar
