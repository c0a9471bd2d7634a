#include "engine/grammar/token_matcher.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "common/check.h"
#include "dlpack/dlpack.h"

namespace kvserve::engine::grammar {

TokenMatcher::TokenMatcher(const xgrammar::CompiledGrammar& grammar, int32_t vocab_size)
    : matcher_(grammar),
      vocab_size_(vocab_size),
      bitmask_(static_cast<size_t>(xgrammar::GetBitmaskSize(vocab_size)), 0) {
  KVSERVE_CHECK(vocab_size > 0);
}

void TokenMatcher::FillMask() {
  KVSERVE_CHECK(!terminated());  // xgrammar throws on it; callers stop at termination
  int64_t shape[1] = {static_cast<int64_t>(bitmask_.size())};
  DLTensor tensor{};
  tensor.data = bitmask_.data();
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = xgrammar::GetBitmaskDLType();
  tensor.shape = shape;
  tensor.strides = nullptr;
  tensor.byte_offset = 0;
  matcher_.FillNextTokenBitmask(&tensor);
  // xgrammar sets bits only for ids of its vocabulary (the model's row):
  // clear the tail of the last word so that no id >= vocab_size counts.
  if (const int32_t tail = vocab_size_ % 32; tail != 0) {
    bitmask_.back() &= static_cast<int32_t>((uint32_t{1} << tail) - 1);
  }
}

bool TokenMatcher::Allowed(int32_t token) const {
  if (token < 0 || token >= vocab_size_) return false;
  return (static_cast<uint32_t>(bitmask_[token / 32]) >> (token % 32)) & 1u;
}

void TokenMatcher::ApplyMask(std::span<float> logits) const {
  KVSERVE_CHECK(static_cast<int32_t>(logits.size()) == vocab_size_);
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (size_t w = 0; w < bitmask_.size(); ++w) {
    const auto word = static_cast<uint32_t>(bitmask_[w]);
    if (word == 0xffffffffu) continue;
    const size_t base = w * 32;
    const size_t end = std::min(logits.size(), base + 32);
    for (size_t t = base; t < end; ++t) {
      if (((word >> (t - base)) & 1u) == 0) logits[t] = kMasked;
    }
  }
}

void TokenMatcher::AppendDisallowed(std::vector<int32_t>* ids) const {
  for (int32_t t = 0; t < vocab_size_; ++t) {
    if (!Allowed(t)) ids->push_back(t);
  }
}

int32_t TokenMatcher::NumAllowed() const {
  int32_t n = 0;
  for (int32_t word : bitmask_) n += std::popcount(static_cast<uint32_t>(word));
  return n;
}

bool TokenMatcher::Accept(int32_t token) {
  if (token < 0 || token >= vocab_size_) return false;
  return matcher_.AcceptToken(token);
}

}  // namespace kvserve::engine::grammar
