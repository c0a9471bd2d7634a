// Pre-tokenizers of SentencePiece-converted tokenizer.json files:
//  - Metaspace: every ' ' becomes the replacement (U+2581); the replacement
//    is prepended to a piece that does not start with it, always, only for
//    the piece at the very start of the input ("first"), or never; with
//    split, the piece is cut before each replacement (MergedWithNext).
//  - a literal Split with behavior MergedWithPrevious (Gemma: on " ").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvserve::engine {

struct MetaspaceOptions {
  enum class Prepend { kAlways, kFirst, kNever };
  std::string replacement = "\xE2\x96\x81";  // one code point
  Prepend prepend = Prepend::kAlways;
  bool split = true;
};

// Appends the pre-tokens of `text` to *out. `at_input_start`: the piece
// begins at offset 0 of the text given to Encode (what "first" checks).
void MetaspacePreTokenize(const MetaspaceOptions& options, std::string_view text,
                          bool at_input_start, std::vector<std::string>* out);

// Cuts `text` after every occurrence of `delimiter` (non-empty): "a  b" on
// " " gives "a ", " ", "b". Appends non-empty pieces.
void SplitMergedWithPrevious(std::string_view text, std::string_view delimiter,
                             std::vector<std::string>* out);

}  // namespace kvserve::engine
