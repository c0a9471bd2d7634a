#include "engine/tokenizer/added_tokens.h"

#include <utf8proc.h>

#include <algorithm>

#include "engine/tokenizer/utf8.h"

namespace kvserve::engine {
namespace {

bool IsWordChar(char32_t c) {
  if (c == '_' || c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens,
                                     std::vector<std::string> patterns) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (patterns[i].empty()) continue;
    int32_t node = 0;
    for (const char c : patterns[i]) {
      const unsigned char b = static_cast<unsigned char>(c);
      auto it = trie_[node].next.find(b);
      if (it == trie_[node].next.end()) {
        trie_.push_back(Node{});
        it = trie_[node].next.emplace(b, static_cast<int32_t>(trie_.size() - 1)).first;
      }
      node = it->second;
    }
    // The first token given for a pattern wins, as the first pattern does in
    // Aho-Corasick.
    if (trie_[node].token < 0) {
      trie_[node].token = static_cast<int32_t>(tokens_.size());
      tokens_.push_back(std::move(tokens[i]));
    }
  }
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>* out) const {
  size_t plain_start = 0;  // start of the text not yet assigned to a segment
  size_t pos = 0;          // next position where a match may start
  while (pos < text.size()) {
    // Longest pattern starting at pos.
    int32_t node = 0;
    int32_t best = -1;
    size_t best_end = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      auto it = trie_[node].next.find(static_cast<unsigned char>(text[i]));
      if (it == trie_[node].next.end()) break;
      node = it->second;
      if (trie_[node].token >= 0) {
        best = trie_[node].token;
        best_end = i + 1;
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[best];
    size_t start = pos;
    size_t stop = best_end;
    pos = best_end;
    if (token.single_word) {
      const bool word_before = start > 0 && IsWordChar(utf8::DecodePrev(text, start));
      size_t after = stop;
      const bool word_after = stop < text.size() && IsWordChar(utf8::DecodeNext(text, &after));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) {
      while (start > plain_start) {
        size_t prev = start - 1;
        while (prev > 0 && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
        size_t tmp = prev;
        if (!utf8::IsWhitespace(utf8::DecodeNext(text, &tmp))) break;
        start = prev;
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t next = stop;
        if (!utf8::IsWhitespace(utf8::DecodeNext(text, &next))) break;
        stop = next;
      }
      pos = stop;
    }
    if (start > plain_start) out->push_back({text.substr(plain_start, start - plain_start), -1});
    out->push_back({text.substr(start, stop - start), token.id});
    plain_start = stop;
  }
  if (plain_start < text.size()) out->push_back({text.substr(plain_start), -1});
}

}  // namespace kvserve::engine
