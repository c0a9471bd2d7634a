// SamplingParams::Validate: every bound written as `lo <= x && x <= hi` (or
// with strict ends) inside a negation, so that NaN, which fails every
// comparison, is rejected by each check without a separate isnan test.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/sampling/sampler.h"

namespace kvserve::engine {
namespace {

absl::Status OutOfRange(const char* field, const std::string& range, double value) {
  return absl::InvalidArgumentError(absl::StrCat(field, " must be ", range, ", got ", value));
}

std::string AdditiveRange() {
  return absl::StrCat("in [", -kMaxAdditivePenalty, ", ", kMaxAdditivePenalty, "]");
}

}  // namespace

absl::Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f && temperature <= kMaxTemperature)) {
    return OutOfRange(
        "temperature",
        absl::StrCat("in [0, ", kMaxTemperature, "] (below ", kGreedyTemperature, ": greedy)"),
        temperature);
  }
  if (!(top_k == -1 || top_k >= 0)) {
    return OutOfRange("top_k", "-1 or 0 (off) or >= 1", top_k);
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return OutOfRange("top_p", "in (0, 1]", top_p);
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return OutOfRange("min_p", "in [0, 1]", min_p);
  }
  if (!(repetition_penalty > 0.0f && repetition_penalty <= kMaxRepetitionPenalty)) {
    return OutOfRange("repetition_penalty",
                      absl::StrCat("in (0, ", kMaxRepetitionPenalty, "] (1: off)"),
                      repetition_penalty);
  }
  if (!(presence_penalty >= -kMaxAdditivePenalty && presence_penalty <= kMaxAdditivePenalty)) {
    return OutOfRange("presence_penalty", AdditiveRange(), presence_penalty);
  }
  if (!(frequency_penalty >= -kMaxAdditivePenalty && frequency_penalty <= kMaxAdditivePenalty)) {
    return OutOfRange("frequency_penalty", AdditiveRange(), frequency_penalty);
  }
  for (size_t i = 0; i < logit_bias.size(); ++i) {
    const TokenBias& entry = logit_bias[i];
    if (!(entry.bias >= -kMaxLogitBias && entry.bias <= kMaxLogitBias)) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias[", entry.token, "] must be in [",
                                                     -kMaxLogitBias, ", ", kMaxLogitBias, "], got ",
                                                     entry.bias));
    }
    if (entry.token < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias: token id ", entry.token, " is negative"));
    }
    if (i > 0 && !(logit_bias[i - 1].token < entry.token)) {
      return absl::InvalidArgumentError(
          "logit_bias: token ids must be distinct and ascending (the request layers sort them)");
    }
  }
  if (!(num_logprobs >= 0 && num_logprobs <= kMaxLogprobs)) {
    return OutOfRange("num_logprobs", absl::StrCat("in [0, ", kMaxLogprobs, "]"), num_logprobs);
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine
