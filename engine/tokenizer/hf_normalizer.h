// The normalizers of a Hugging Face tokenizer.json that kvserve implements,
// applied in file order (a Sequence is flattened):
//   NFC, NFKC          Unicode normalization (utf8proc)
//   Prepend(p)         p + text, unless text is empty
//   Replace(s -> c)    every occurrence of the literal s (non-empty) by c
// Anything else is refused when tokenizer.json is parsed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::engine {

struct NormalizerStep {
  enum class Kind { kNfc, kNfkc, kPrepend, kReplace };
  Kind kind;
  std::string pattern;  // kPrepend: the prefix; kReplace: the literal searched
  std::string content;  // kReplace: its replacement
};

// Every occurrence of `from` (non-empty) in `s` replaced by `to`, left to
// right, non-overlapping.
std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to);

// Applies `steps` in order to valid UTF-8 `text`.
absl::StatusOr<std::string> Normalize(const std::vector<NormalizerStep>& steps,
                                      std::string_view text);

}  // namespace kvserve::engine
