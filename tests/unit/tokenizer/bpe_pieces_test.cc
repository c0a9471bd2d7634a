// The building blocks of the byte-level BPE tokenizer.
#include <string>
#include <vector>

#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/regex_splitter.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

using Ids = std::vector<int32_t>;

TEST(ByteLevel, Gpt2Alphabet) {
  EXPECT_EQ(byte_level::ByteToChar('a'), U'a');
  EXPECT_EQ(byte_level::ByteToChar(' '), U'\u0120');   // Ġ
  EXPECT_EQ(byte_level::ByteToChar('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(byte_level::ByteToChar(0), U'\u0100');
  EXPECT_EQ(byte_level::ByteToChar(0xAD), U'\u0143');  // the last non-printable byte
  EXPECT_EQ(byte_level::ByteToChar(0xE9), U'\u00E9');
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(byte_level::CharToByte(byte_level::ByteToChar(b)), b);
  }
  EXPECT_EQ(byte_level::CharToByte(U'日'), -1);
  EXPECT_EQ(byte_level::CharToByte(U' '), -1);  // ' ' itself is not in the alphabet
  std::string encoded;
  byte_level::Encode("a é\n", &encoded);
  EXPECT_EQ(encoded, "aĠÃ©Ċ");
  std::string decoded;
  EXPECT_TRUE(byte_level::Decode(encoded, &decoded));
  EXPECT_EQ(decoded, "a é\n");
  decoded = "x";
  EXPECT_FALSE(byte_level::Decode("a日", &decoded));
  EXPECT_EQ(decoded, "x");
}

std::unique_ptr<BpeModel> Model(BpeModel::Options options = {}) {
  std::unordered_map<std::string, int32_t> vocab = {{"a", 0},  {"b", 1},   {"c", 2},  {"ab", 3},
                                                    {"bc", 4}, {"abc", 5}, {"aa", 6}, {"<unk>", 7}};
  auto model = BpeModel::Create(vocab, {{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"a", "a"}},
                                std::move(options));
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

TEST(BpeModel, LowestRankFirst) {
  auto m = Model();
  Ids ids;
  m->EncodeWord("abc", &ids);  // "b c" (rank 0) before "a b" (rank 1), then "a bc"
  EXPECT_EQ(ids, (Ids{5}));
  ids.clear();
  m->EncodeWord("ab", &ids);
  EXPECT_EQ(ids, (Ids{3}));
  ids.clear();
  m->EncodeWord("aaa", &ids);  // leftmost on ties
  EXPECT_EQ(ids, (Ids{6, 0}));
  ids.clear();
  m->EncodeWord("abab", &ids);
  EXPECT_EQ(ids, (Ids{3, 3}));
  ids.clear();
  m->EncodeWord("abab", &ids);  // second time: from the cache
  EXPECT_EQ(ids, (Ids{3, 3}));
}

TEST(BpeModel, UnknownCodePoints) {
  auto dropped = Model();
  Ids ids;
  dropped->EncodeWord("axxb", &ids);
  EXPECT_EQ(ids, (Ids{3}));  // a and b meet once the x are gone, and merge
  auto unk = Model({.unk_token = "<unk>"});
  ids.clear();
  unk->EncodeWord("axxb", &ids);
  EXPECT_EQ(ids, (Ids{0, 7, 7, 1}));
  auto fused = Model({.unk_token = "<unk>", .fuse_unk = true});
  ids.clear();
  fused->EncodeWord("axxb", &ids);
  EXPECT_EQ(ids, (Ids{0, 7, 1}));
}

TEST(BpeModel, BadMergeIsAnError) {
  auto model = BpeModel::Create({{"a", 0}}, {{"a", "z"}}, {});
  EXPECT_FALSE(model.ok());
  model = BpeModel::Create({{"a", 0}}, {}, {.unk_token = "<unk>"});
  EXPECT_FALSE(model.ok());
}

std::vector<std::string> Split(const RegexSplitter& s, std::string_view text) {
  std::vector<std::string_view> pieces;
  EXPECT_TRUE(s.SplitIsolated(text, &pieces).ok());
  return {pieces.begin(), pieces.end()};
}

TEST(RegexSplitter, Gpt2Pattern) {
  auto s = RegexSplitter::Create(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", false);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Split(*s, "Hello world's  test"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " test"}));
  EXPECT_EQ(Split(*s, "naïve 日本 42!"), (std::vector<std::string>{"naïve", " 日本", " 42", "!"}));
  // U+180E is not White_Space (Unicode >= 6.3), unlike PCRE2's own \s.
  EXPECT_EQ(Split(*s, " \u180e"), (std::vector<std::string>{" \u180e"}));
  // " ?" is an ASCII space only; \s+(?!\S) leaves the last space to \s+.
  EXPECT_EQ(Split(*s, "a\u3000\u3000b"), (std::vector<std::string>{"a", "\u3000", "\u3000", "b"}));
  EXPECT_EQ(Split(*s, ""), (std::vector<std::string>{}));
}

TEST(RegexSplitter, GapsAndEmptyMatches) {
  auto s = RegexSplitter::Create("x*", false);  // matches empty strings everywhere
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(Split(*s, "axxbé"), (std::vector<std::string>{"a", "xx", "bé"}));
  auto literal = RegexSplitter::Create("a.b", true);
  ASSERT_TRUE(literal.ok());
  EXPECT_EQ(Split(*literal, "xa.bya_b"), (std::vector<std::string>{"x", "a.b", "ya_b"}));
  EXPECT_FALSE(RegexSplitter::Create("(", false).ok());
}

TEST(AddedTokenMatcher, LeftmostLongest) {
  AddedTokenMatcher m(
      {{.content = "<a>", .id = 1}, {.content = "<a><b>", .id = 2}, {.content = "b", .id = 3}},
      {"<a>", "<a><b>", "b"});
  std::vector<AddedTokenMatcher::Segment> out;
  m.Split("x<a><b>b<a>", &out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].text, "x");
  EXPECT_EQ(out[0].id, -1);
  EXPECT_EQ(out[1].id, 2);
  EXPECT_EQ(out[2].id, 3);
  EXPECT_EQ(out[3].id, 1);
}

TEST(AddedTokenMatcher, StripAndSingleWord) {
  AddedTokenMatcher m({{.content = "<t>", .id = 1, .lstrip = true, .rstrip = true},
                       {.content = "M", .id = 2, .single_word = true}},
                      {"<t>", "M"});
  std::vector<AddedTokenMatcher::Segment> out;
  m.Split("a \t<t>\u3000 b", &out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].text, " \t<t>\u3000 ");
  EXPECT_EQ(out[1].id, 1);
  EXPECT_EQ(out[2].text, "b");
  out.clear();
  m.Split("aM M éM M,", &out);
  std::vector<int32_t> ids;
  ids.reserve(out.size());
  for (const auto& s : out) ids.push_back(s.id);
  EXPECT_EQ(ids, (std::vector<int32_t>{-1, 2, -1, 2, -1}));
  EXPECT_EQ(out[0].text, "aM ");
  EXPECT_EQ(out[2].text, " éM ");
}

}  // namespace
}  // namespace kvserve::engine
