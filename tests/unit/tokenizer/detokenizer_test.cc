// Decode / IncrementalDetokenizer against a tokenizer whose tokens are
// arbitrary byte strings, including pieces of UTF-8 sequences.
#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

// Token i is kPieces[i]. Token 0 is special. Token 1 is a "dummy prefix"
// piece: at the first position it drops its leading space and ends the first
// position (EndsFirstPosition), like SentencePiece's "▁" without
// remove_extra_whitespaces; token 2 drops its leading space at the first
// position but does not end it.
const std::vector<std::string> kPieces = {
    "<s>",      " ",        " x",   "a",    "é",    "\xC3",     "\xA9", "\xE2", "\x82",     "\xAC",
    "\xF0\x9F", "\x8E\x89", "\xFF", "\x80", "日本", "\xE6\x97", "\xA5", "🎉",    "\xED\xA0", "z\xF0",
};

class FakeTokenizer final : public Tokenizer {
 public:
  int32_t vocab_size() const override { return static_cast<int32_t>(kPieces.size()); }
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view, bool) const override {
    return std::vector<int32_t>{};
  }
  void AppendTokenBytes(int32_t id, bool first, bool skip_special,
                        std::string* out) const override {
    if (id < 0 || id >= vocab_size()) return;
    if (skip_special && IsSpecial(id)) return;
    std::string_view piece = kPieces[id];
    if (first && (id == 1 || id == 2)) piece.remove_prefix(1);
    out->append(piece);
  }
  bool EndsFirstPosition(int32_t id) const override { return id == 1; }
  bool IsSpecial(int32_t id) const override { return id == 0; }
  std::optional<int32_t> bos_token_id() const override { return 0; }
  std::optional<int32_t> eos_token_id() const override { return std::nullopt; }
};

std::string Stream(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  IncrementalDetokenizer detok(t, skip_special);
  std::string text;
  for (const int32_t id : ids) {
    const std::string chunk = detok.Push(id);
    EXPECT_EQ(ToValidUtf8(chunk), chunk) << "invalid chunk";
    text += chunk;
  }
  const std::string tail = detok.Flush();
  EXPECT_EQ(ToValidUtf8(tail), tail);
  return text + tail;
}

TEST(Detokenizer, FirstPositionRule) {
  FakeTokenizer t;
  // Token 1 at the start drops its space and ends the first position.
  EXPECT_EQ(t.Decode(std::vector<int32_t>{1, 1, 3}, false), " a");
  // Token 2 drops its space; the text is non-empty afterwards.
  EXPECT_EQ(t.Decode(std::vector<int32_t>{2, 2}, false), "x x");
  // A special token appending nothing keeps the first position open.
  EXPECT_EQ(t.Decode(std::vector<int32_t>{0, 2}, true), "x");
  // Shown, it closes it.
  EXPECT_EQ(t.Decode(std::vector<int32_t>{0, 2}, false), "<s> x");
  EXPECT_EQ(Stream(t, {1, 1, 3}, false), " a");
  EXPECT_EQ(Stream(t, {0, 2}, true), "x");
}

TEST(Detokenizer, RandomSequencesStreamLikeDecode) {
  FakeTokenizer t;
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int32_t> token(-1, static_cast<int32_t>(kPieces.size()));
  std::uniform_int_distribution<int> length(0, 12);
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<int32_t> ids(length(rng));
    for (int32_t& id : ids) id = token(rng);
    for (const bool skip : {false, true}) {
      const std::string want = t.Decode(ids, skip);
      ASSERT_EQ(ToValidUtf8(want), want);
      ASSERT_EQ(Stream(t, ids, skip), want) << "iteration " << iter;
    }
  }
}

}  // namespace
}  // namespace kvserve::engine
