#include "scheduler/ngram_proposer.h"

#include <algorithm>

#include "common/check.h"

namespace kvserve::scheduler {

NgramProposer::NgramProposer(int32_t min_n, int32_t max_n)
    : min_n_(min_n), max_n_(max_n), next_after_(static_cast<size_t>(max_n - min_n + 1)) {
  KVSERVE_CHECK(min_n >= 1 && min_n <= max_n);
}

uint64_t NgramProposer::Hash(std::span<const int32_t> ngram) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ ngram.size();
  for (int32_t t : ngram) {
    h ^= static_cast<uint32_t>(t);
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
  }
  return h;
}

void NgramProposer::Extend(std::span<const int32_t> tokens) {
  // The n-gram ending before position i, followed by tokens[i].
  for (size_t i = std::max<size_t>(num_indexed_, 1); i < tokens.size(); ++i) {
    for (int32_t n = min_n_; n <= max_n_ && static_cast<size_t>(n) <= i; ++n) {
      next_after_[static_cast<size_t>(n - min_n_)][Hash(tokens.subspan(i - n, n))] =
          static_cast<int32_t>(i);
    }
  }
  num_indexed_ = std::max(num_indexed_, tokens.size());
}

std::vector<int32_t> NgramProposer::Propose(std::span<const int32_t> tokens, int32_t k) const {
  std::vector<int32_t> draft;
  if (k <= 0) return draft;
  for (int32_t n = std::min<int32_t>(max_n_, static_cast<int32_t>(tokens.size()) - 1); n >= min_n_;
       --n) {
    const std::span<const int32_t> suffix = tokens.last(static_cast<size_t>(n));
    const auto& index = next_after_[static_cast<size_t>(n - min_n_)];
    const auto it = index.find(Hash(suffix));
    if (it == index.end()) continue;
    const size_t next = static_cast<size_t>(it->second);
    // Only an earlier occurrence counts (the index never holds the suffix
    // itself: its follower is not known yet), and only an exact one.
    if (next >= tokens.size() || !std::equal(suffix.begin(), suffix.end(),
                                             tokens.begin() + static_cast<ptrdiff_t>(next - n))) {
      continue;
    }
    const size_t end = std::min(tokens.size(), next + static_cast<size_t>(k));
    draft.assign(tokens.begin() + static_cast<ptrdiff_t>(next),
                 tokens.begin() + static_cast<ptrdiff_t>(end));
    return draft;
  }
  return draft;
}

}  // namespace kvserve::scheduler
