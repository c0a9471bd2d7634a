// Tokenizer: text <-> token ids. Three kinds:
//  - byte-level (builtin models): ids 0..255 are bytes, then <bos>, <eos>;
//  - Hugging Face tokenizer.json with a BPE model: byte-level (GPT-2,
//    Llama 3, Qwen2/3) or SentencePiece-converted with byte fallback
//    (Llama 2, Mistral, Gemma, Phi-3), with added / special tokens;
//  - SentencePiece tokenizer.model through libsentencepiece.
//
// Decoding is defined token by token: each id stands for a byte string
// (AppendTokenBytes), the text is their concatenation, with three
// tokenizer-specific rules on top:
//  - invalid UTF-8 becomes U+FFFD: one per maximal invalid subpart (HF
//    ByteLevel, Rust's from_utf8_lossy) or one per byte (SentencePiece,
//    ReplacePerByte);
//  - byte tokens (IsByteToken, HF ByteFallback): a run of consecutive byte
//    tokens decodes to its bytes when they are valid UTF-8 as a whole, and
//    to one U+FFFD per byte of the run otherwise;
//  - leading_strip(): up to `count` leading `content` characters of the
//    whole text are removed (HF Strip decoder after Fuse).
// IncrementalDetokenizer streams the same text without ever emitting a
// broken UTF-8 sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::engine {

// Every method is const and safe to call from several threads at once.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // One more than the largest id (tokenizer.json: over vocab and added tokens).
  virtual int32_t vocab_size() const = 0;
  // add_special_tokens: add what the tokenizer's own template adds (e.g. BOS).
  // Text that is not valid UTF-8 is InvalidArgument for tokenizer.json models.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                      bool add_special_tokens) const = 0;
  // Appends the bytes that `id` stands for. `first`: id is the first token of
  // the decoded text (SentencePiece drops its dummy-prefix space there).
  // Special tokens append nothing when skip_special is set.
  virtual void AppendTokenBytes(int32_t id, bool first, bool skip_special,
                                std::string* out) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
  // The `first` argument of AppendTokenBytes is true from the start of a
  // decode until a token appends at least one byte, or until a token decoded
  // with first == true returns true here. SentencePiece returns true for a
  // piece whose leading dummy-prefix space was just dropped (unless the model
  // removes extra whitespace), so that only one such space is dropped, as
  // DecodeIds does. Decode and IncrementalDetokenizer follow this rule.
  virtual bool EndsFirstPosition(int32_t id) const { return false; }
  // See the decoding rules at the top of this file.
  virtual bool IsByteToken(int32_t id) const { return false; }
  virtual bool ReplacePerByte() const { return false; }
  struct LeadingStrip {
    std::string content;  // one code point; empty: nothing stripped
    int count = 0;
  };
  virtual LeadingStrip leading_strip() const { return {}; }
  virtual std::optional<int32_t> bos_token_id() const = 0;
  virtual std::optional<int32_t> eos_token_id() const = 0;

  // Whole-sequence decode; invalid UTF-8 becomes U+FFFD.
  std::string Decode(std::span<const int32_t> ids, bool skip_special) const;
};

// Streams the text of a growing token sequence. Push returns the text that
// became final with this token (possibly empty: a UTF-8 sequence is still
// open, a run of byte tokens is not finished, or leading characters may
// still be stripped); Flush returns what is left. The concatenation of all
// Push results and Flush equals Decode(all ids), and every chunk is valid
// UTF-8. A run of HF byte tokens is held back until a non-byte token ends
// it, because one invalid byte turns the whole run into U+FFFDs.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special);
  std::string Push(int32_t id);
  std::string Flush();

 private:
  void Emit(std::string_view text, std::string* out);

  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool per_byte_;
  Tokenizer::LeadingStrip strip_;  // count left; 0 once a character is emitted
  bool first_ = true;              // see Tokenizer::EndsFirstPosition
  bool in_run_ = false;            // pending_ holds an open run of byte tokens
  std::string pending_;            // an unfinished UTF-8 sequence, or the run
};

// Replaces invalid UTF-8 by U+FFFD: one per maximal invalid subpart, like
// Rust's from_utf8_lossy, or with `per_byte` one per byte of it, like
// SentencePiece. Exposed for tests.
std::string ToValidUtf8(std::string_view bytes, bool per_byte = false);

std::unique_ptr<Tokenizer> MakeByteTokenizer();
// <dir>/tokenizer.json if present, else <dir>/tokenizer.model, the order of
// transformers' AutoTokenizer. A tokenizer.json that cannot be used is an
// error naming it and the field; tokenizer.model is then not tried.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir);
// Reads tokenizer_config.json (and config.json's model_type) beside it too.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfTokenizerJson(const std::string& path);
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& path);

}  // namespace kvserve::engine
