#include "scheduler/stop_checker.h"

#include <algorithm>
#include <string_view>
#include <utility>

namespace kvserve::scheduler {

StopChecker::StopChecker(const StopParams& params, std::span<const int32_t> eos_token_ids,
                         const engine::Tokenizer* tokenizer)
    : max_tokens_(params.max_tokens),
      min_tokens_(params.min_tokens),
      stop_strings_(params.stop_strings) {
  if (!params.ignore_eos) stop_tokens_.assign(eos_token_ids.begin(), eos_token_ids.end());
  for (int32_t t : params.stop_token_ids) {
    if (std::find(stop_tokens_.begin(), stop_tokens_.end(), t) == stop_tokens_.end()) {
      stop_tokens_.push_back(t);
    }
  }
  for (const std::string& s : stop_strings_) max_stop_len_ = std::max(max_stop_len_, s.size());
  if (tokenizer != nullptr) detok_.emplace(*tokenizer, params.skip_special_tokens);
}

bool StopChecker::IsStopToken(int32_t token) const {
  return std::find(stop_tokens_.begin(), stop_tokens_.end(), token) != stop_tokens_.end();
}

std::span<const int32_t> StopChecker::StopTokensToMask(int32_t num_output_tokens) const {
  if (num_output_tokens >= min_tokens_) return {};
  return stop_tokens_;
}

std::optional<std::pair<size_t, size_t>> StopChecker::FindStopString() const {
  std::optional<std::pair<size_t, size_t>> best;
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    const size_t pos = pending_.find(stop_strings_[i]);
    if (pos != std::string::npos && (!best || pos < best->first)) best.emplace(pos, i);
  }
  return best;
}

size_t StopChecker::HeldBackLength() const {
  if (max_stop_len_ == 0) return 0;
  const size_t n = pending_.size();
  // Only suffixes shorter than the longest stop string can be proper prefixes.
  for (size_t start = n >= max_stop_len_ ? n - max_stop_len_ + 1 : 0; start < n; ++start) {
    const std::string_view suffix = std::string_view(pending_).substr(start);
    for (const std::string& s : stop_strings_) {
      if (suffix.size() < s.size() && std::string_view(s).substr(0, suffix.size()) == suffix) {
        return n - start;  // earliest start: the longest held suffix
      }
    }
  }
  return 0;
}

StopChecker::Result StopChecker::Append(int32_t token, int32_t num_output_tokens) {
  Result r;
  if (IsStopToken(token) && num_output_tokens > min_tokens_) {
    r.reason = FinishReason::kStopToken;
    r.stop_token = token;
    FinishText(num_output_tokens, &r);
    return r;
  }
  if (detok_) pending_ += detok_->Push(token);
  if (num_output_tokens >= min_tokens_) {
    if (auto match = FindStopString()) {
      r.reason = FinishReason::kStopString;
      r.stop_string = stop_strings_[match->second];
      r.text = pending_.substr(0, match->first);
      pending_.clear();
      return r;
    }
  }
  if (num_output_tokens >= max_tokens_) {
    r.reason = FinishReason::kLength;
    FinishText(num_output_tokens, &r);
    return r;
  }
  const size_t emit = pending_.size() - HeldBackLength();
  r.text = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return r;
}

void StopChecker::FinishText(int32_t num_output_tokens, Result* r) {
  if (detok_) pending_ += detok_->Flush();
  // The flush may end a character (U+FFFD for a cut one) that completes a
  // stop string: then the request stopped there (found by the fuzzer).
  if (num_output_tokens >= min_tokens_) {
    if (auto match = FindStopString()) {
      r->reason = FinishReason::kStopString;
      r->stop_string = stop_strings_[match->second];
      r->stop_token = -1;
      pending_.resize(match->first);
    }
  }
  r->text = std::move(pending_);
  pending_.clear();
}

std::string StopChecker::Flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  if (detok_) out += detok_->Flush();
  return out;
}

}  // namespace kvserve::scheduler
