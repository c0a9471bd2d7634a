// The BPE tokenizer built from an HfBpeSpec. Encode follows the pipeline of
// Hugging Face tokenizers:
//
//   text ─► split on non-normalized added tokens
//          ─► plain runs: normalize ─► split on normalized added tokens
//             ─► plain runs: byte-level: Split regexes ─► ByteLevel (prefix
//                space, GPT-2 regex, bytes → alphabet) ─► BPE per word
//                SentencePiece: Metaspace | literal split ─► BPE per word
//                (byte fallback)
//   ─► prefix_ids + ids + suffix_ids   (add_special_tokens only)
#include "engine/tokenizer/hf_bpe_tokenizer.h"

#include <algorithm>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/utf8.h"

namespace kvserve::engine {
namespace {

class HfBpeTokenizer final : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(HfBpeSpec spec) {
    std::unique_ptr<HfBpeTokenizer> t(new HfBpeTokenizer());
    KVSERVE_ASSIGN_OR_RETURN(t->model_,
                             BpeModel::Create(std::move(spec.vocab), spec.merges, spec.bpe));
    t->spec_ = std::move(spec);
    t->spec_.vocab.clear();  // moved into model_
    t->spec_.merges.clear();
    if (auto s = t->BuildAddedTokens(); !s.ok()) return s;
    t->BuildIdTable();
    return std::unique_ptr<Tokenizer>(std::move(t));
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(token_bytes_.size()); }

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special_tokens) const override {
    if (!utf8::IsValid(text)) return absl::InvalidArgumentError("text is not valid UTF-8");
    std::vector<int32_t> ids;
    if (add_special_tokens) ids = spec_.prefix_ids;
    std::vector<AddedTokenMatcher::Segment> raw;
    raw_matcher_.Split(text, &raw);
    for (const auto& seg : raw) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
        continue;
      }
      auto normalized = Normalize(spec_.normalizer, seg.text);
      if (!normalized.ok()) return normalized.status();
      std::vector<AddedTokenMatcher::Segment> norm;
      normalized_matcher_.Split(*normalized, &norm);
      for (const auto& piece : norm) {
        if (piece.id >= 0) {
          ids.push_back(piece.id);
          continue;
        }
        // Metaspace's "first" prepends only to the piece at offset 0 of the
        // input (a normalizer never moves that offset).
        const bool at_input_start =
            seg.text.data() == text.data() && piece.text.data() == normalized->data();
        if (auto s = spec_.byte_level ? EncodeByteLevel(piece.text, &ids)
                                      : EncodeSentencePiece(piece.text, at_input_start, &ids);
            !s.ok()) {
          return s;
        }
      }
    }
    if (add_special_tokens) ids.insert(ids.end(), spec_.suffix_ids.begin(), spec_.suffix_ids.end());
    return ids;
  }

  void AppendTokenBytes(int32_t id, bool first, bool skip_special,
                        std::string* out) const override {
    if (id < 0 || id >= vocab_size()) return;
    if (skip_special && special_[id]) return;
    out->append(first && !token_first_bytes_.empty() ? token_first_bytes_[id] : token_bytes_[id]);
  }

  bool IsSpecial(int32_t id) const override { return id >= 0 && id < vocab_size() && special_[id]; }
  // SentencePiece pipeline: "first" is token 0 of what the decoder sees,
  // i.e. the first token not skipped (a Metaspace decoder depends on it).
  bool EndsFirstPosition(int32_t id) const override {
    return !spec_.byte_level && id >= 0 && id < vocab_size() && !special_[id];
  }
  bool IsByteToken(int32_t id) const override {
    return id >= 0 && id < vocab_size() && byte_token_[id];
  }
  LeadingStrip leading_strip() const override {
    return {spec_.decoder.strip_content, spec_.decoder.strip_start};
  }
  std::optional<int32_t> bos_token_id() const override { return spec_.bos; }
  std::optional<int32_t> eos_token_id() const override { return spec_.eos; }

 private:
  HfBpeTokenizer() = default;

  // SentencePiece pipeline: normalized text without added tokens →
  // Metaspace / literal split → BPE (with byte fallback).
  absl::Status EncodeSentencePiece(std::string_view text, bool at_input_start,
                                   std::vector<int32_t>* ids) const {
    std::vector<std::string> words;
    if (spec_.metaspace.has_value()) {
      MetaspacePreTokenize(*spec_.metaspace, text, at_input_start, &words);
    } else if (!spec_.split_merged_with_previous.empty()) {
      SplitMergedWithPrevious(text, spec_.split_merged_with_previous, &words);
    } else if (!text.empty()) {
      words.emplace_back(text);
    }
    for (const std::string& w : words) model_->EncodeWord(w, ids);
    return absl::OkStatus();
  }

  // Byte-level pipeline: normalized text without added tokens →
  // pre-tokenize → BPE.
  absl::Status EncodeByteLevel(std::string_view text, std::vector<int32_t>* ids) const {
    std::vector<std::string_view> pieces{text};
    std::vector<std::string_view> next;
    // All Split steps but the ByteLevel regex (the last one when
    // byte_level_regex), which runs after the prefix space is added.
    const size_t plain_splits = spec_.splits.size() - (spec_.byte_level_regex ? 1 : 0);
    for (size_t i = 0; i < plain_splits; ++i) {
      next.clear();
      for (std::string_view p : pieces) {
        if (auto s = spec_.splits[i].SplitIsolated(p, &next); !s.ok()) return s;
      }
      pieces.swap(next);
    }
    std::string prefixed;
    std::string word;
    std::vector<std::string_view> words;
    for (std::string_view p : pieces) {
      if (p.empty()) continue;
      // ByteLevel adds the prefix space to every piece that lacks one.
      if (spec_.add_prefix_space && p.front() != ' ') {
        prefixed.assign(1, ' ');
        prefixed.append(p);
        p = prefixed;
      }
      words.clear();
      if (spec_.byte_level_regex) {
        if (auto s = spec_.splits.back().SplitIsolated(p, &words); !s.ok()) return s;
      } else {
        words.push_back(p);
      }
      for (std::string_view w : words) {
        word.clear();
        byte_level::Encode(w, &word);
        model_->EncodeWord(word, ids);
      }
    }
    return absl::OkStatus();
  }

  absl::Status BuildAddedTokens() {
    std::vector<AddedToken> raw, normalized;
    std::vector<std::string> raw_patterns, normalized_patterns;
    // Special tokens first, then the others, each in file order: the order
    // in which tokenizers builds its matchers (it decides equal patterns).
    for (int pass = 0; pass < 2; ++pass) {
      for (const AddedToken& t : spec_.added_tokens) {
        if (t.special != (pass == 0)) continue;
        if (!t.normalized) {
          raw.push_back(t);
          raw_patterns.push_back(t.content);
        } else {
          auto pattern = Normalize(spec_.normalizer, t.content);
          if (!pattern.ok()) return pattern.status();
          normalized.push_back(t);
          normalized_patterns.push_back(*std::move(pattern));
        }
      }
    }
    raw_matcher_ = AddedTokenMatcher(std::move(raw), std::move(raw_patterns));
    normalized_matcher_ = AddedTokenMatcher(std::move(normalized), std::move(normalized_patterns));
    return absl::OkStatus();
  }

  // token_bytes_[id]: the bytes id decodes to. Added tokens take precedence
  // over the model's vocab (as id_to_token does). A token all of whose code
  // points are in the byte-level alphabet decodes through it; any other
  // token (e.g. "日本" added by a user) contributes its UTF-8 as is — the
  // ByteLevel decoder's rule. Note that an added token made of alphabet
  // characters, such as "é", is mapped too (to byte 0xE9), as tokenizers does.
  void BuildIdTable() {
    int32_t size = 0;
    for (const auto& [token, id] : model_->vocab()) size = std::max(size, id + 1);
    for (const AddedToken& t : spec_.added_tokens) size = std::max(size, t.id + 1);
    std::vector<const std::string*> text(size, nullptr);
    for (const auto& [token, id] : model_->vocab()) text[id] = &token;
    for (const AddedToken& t : spec_.added_tokens) text[t.id] = &t.content;
    token_bytes_.assign(size, std::string());
    special_.assign(size, false);
    byte_token_.assign(size, false);
    for (int32_t id = 0; id < size; ++id) {
      if (text[id] == nullptr) continue;  // a hole in the id space decodes to nothing
      if (!spec_.byte_level) continue;
      if (!byte_level::Decode(*text[id], &token_bytes_[id])) token_bytes_[id] = *text[id];
    }
    // The SentencePiece decoders run on every token, added ones included.
    if (!spec_.byte_level) token_first_bytes_.assign(size, std::string());
    for (int32_t id = 0; id < size && !spec_.byte_level; ++id) {
      if (text[id] == nullptr) continue;
      token_bytes_[id] = ApplyPerTokenSteps(spec_.decoder, *text[id], /*first=*/false);
      token_first_bytes_[id] = ApplyPerTokenSteps(spec_.decoder, *text[id], /*first=*/true);
      if (!spec_.decoder.byte_fallback) continue;
      const int byte = ParseByteTokenName(token_bytes_[id]);
      if (byte >= 0 && ParseByteTokenName(token_first_bytes_[id]) == byte) {
        byte_token_[id] = true;
        token_bytes_[id] = token_first_bytes_[id] = std::string(1, static_cast<char>(byte));
      }
    }
    // Special-ness goes by content, as tokenizers' decode checks it.
    std::unordered_set<std::string_view> special;
    for (const AddedToken& t : spec_.added_tokens) {
      if (t.special) special.insert(t.content);
    }
    for (int32_t id = 0; id < size; ++id) {
      special_[id] = text[id] != nullptr && special.contains(*text[id]);
    }
  }

  HfBpeSpec spec_;  // vocab moved out into model_
  std::unique_ptr<BpeModel> model_;
  AddedTokenMatcher raw_matcher_;               // added tokens with normalized == false
  AddedTokenMatcher normalized_matcher_;        // the others, patterns normalized
  std::vector<std::string> token_bytes_;        // by id; size is vocab_size()
  std::vector<std::string> token_first_bytes_;  // as the first token decoded; empty: same
  std::vector<bool> special_;                   // by id
  std::vector<bool> byte_token_;                // by id: a ByteFallback <0xNN> token
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeHfBpeTokenizer(HfBpeSpec spec) {
  return HfBpeTokenizer::Create(std::move(spec));
}

}  // namespace kvserve::engine
