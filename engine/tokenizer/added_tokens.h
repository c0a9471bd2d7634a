// Added tokens of a Hugging Face tokenizer.json (special or not): the input
// is split on them before normalization and pre-tokenization, as
// tokenizers' AddedVocabulary does.
//
// Matching: leftmost, then longest, non-overlapping (Aho-Corasick
// "LeftmostLongest"), done here with a byte trie walked from each position.
// Options, per token:
//  - single_word: the match is dropped unless the code points around it are
//    not word characters (\w: letters, marks, Nd, Nl, Pc, ZWJ/ZWNJ; an
//    approximation of Unicode Alphabetic that differs only for a few symbols
//    such as circled letters). A dropped match is not retried at a shorter
//    length or later start inside it, as in tokenizers.
//  - lstrip / rstrip: Unicode whitespace around the match is swallowed into
//    it (and so disappears from the text).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::engine {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;  // matched against the normalized text
  bool special = false;
};

class AddedTokenMatcher {
 public:
  struct Segment {
    std::string_view text;  // the input covered; for a token, with stripped spaces
    int32_t id;             // token id, or -1 for plain text
  };

  // `patterns[i]` is what is searched for `tokens[i]` (its content, normalized
  // for the normalized matcher). Tokens with empty patterns are ignored.
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);
  AddedTokenMatcher() = default;

  bool empty() const { return tokens_.empty(); }
  // Appends the segments of `text` (valid UTF-8): plain runs and matched tokens,
  // in order, covering all of it. Plain segments are never empty.
  void Split(std::string_view text, std::vector<Segment>* out) const;

 private:
  struct Node {
    std::map<unsigned char, int32_t> next;
    int32_t token = -1;  // index into tokens_ when a pattern ends here
  };
  std::vector<AddedToken> tokens_;
  std::vector<Node> trie_{Node{}};
};

}  // namespace kvserve::engine
