// NgramProposer (prompt lookup): proposes the tokens that followed the most
// recent earlier occurrence of a sequence's last n tokens, for n from max_n
// down to min_n, as speculative drafts for the target model to verify.
//
// Cost: an index from each n-gram (min_n..max_n) to the position after its
// latest occurrence, extended as tokens arrive, so a proposal is at most
// (max_n - min_n + 1) hash lookups and each new token (max_n - min_n + 1)
// insertions: no scan of the context per step. Hash collisions are resolved
// by comparing the tokens.
//
// One per request; engine loop thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kvserve::scheduler {

class NgramProposer {
 public:
  // 1 <= min_n <= max_n.
  NgramProposer(int32_t min_n, int32_t max_n);

  // Indexes the n-grams of `tokens` (the request's tokens: the ones seen by
  // the previous call, then new ones) that have a following token.
  void Extend(std::span<const int32_t> tokens);
  // Up to k tokens that followed the latest earlier occurrence of the
  // longest suffix (n in [min_n, max_n]) of `tokens` seen before; empty when
  // none recurs. Extend(tokens) first.
  std::vector<int32_t> Propose(std::span<const int32_t> tokens, int32_t k) const;

 private:
  static uint64_t Hash(std::span<const int32_t> ngram);

  const int32_t min_n_;
  const int32_t max_n_;
  size_t num_indexed_ = 0;  // Extend has indexed the followers at positions < this
  // Per n - min_n: n-gram hash -> the position of the token after its latest occurrence.
  std::vector<absl::flat_hash_map<uint64_t, int32_t>> next_after_;
};

}  // namespace kvserve::scheduler
