// Pre-tokenization by regular expression: the Oniguruma patterns of Hugging
// Face tokenizers run on PCRE2 in UTF + UCP mode, so \p{L}, \p{N} and case
// folding are Unicode-aware. \s and \S are rewritten to Unicode White_Space
// (what Oniguruma uses; PCRE2's own \s also takes U+180E). Remaining
// differences would come from the two engines' Unicode versions (new
// characters only).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::engine {

class RegexSplitter {
 public:
  // `literal`: the pattern is a plain string (Split {"String": ...}).
  static absl::StatusOr<RegexSplitter> Create(std::string_view pattern, bool literal);

  // "Isolated" split: appends, in order, every non-overlapping match of the
  // pattern in `text` and every non-empty gap between matches, so that the
  // pieces concatenate to `text`. Empty matches are ignored. `text` must be
  // valid UTF-8 (not checked again here). Thread-safe.
  absl::Status SplitIsolated(std::string_view text, std::vector<std::string_view>* pieces) const;

 private:
  struct Code;
  explicit RegexSplitter(std::shared_ptr<const Code> code) : code_(std::move(code)) {}
  std::shared_ptr<const Code> code_;  // immutable after Create; shared by copies
};

}  // namespace kvserve::engine
