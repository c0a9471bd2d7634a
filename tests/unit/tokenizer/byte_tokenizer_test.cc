#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::vector<int32_t> Ids(std::string_view bytes) {
  std::vector<int32_t> ids;
  for (const char c : bytes) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

// Push()... + Flush(), checking that no chunk is invalid UTF-8.
std::string Stream(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special,
                   std::vector<std::string>* chunks = nullptr) {
  IncrementalDetokenizer detok(t, skip_special);
  std::string text;
  for (const int32_t id : ids) {
    std::string chunk = detok.Push(id);
    EXPECT_EQ(ToValidUtf8(chunk), chunk);
    text += chunk;
    if (chunks != nullptr) chunks->push_back(std::move(chunk));
  }
  std::string tail = detok.Flush();
  EXPECT_EQ(ToValidUtf8(tail), tail);
  text += tail;
  if (chunks != nullptr) chunks->push_back(std::move(tail));
  return text;
}

TEST(ByteTokenizer, Vocabulary) {
  auto t = MakeByteTokenizer();
  EXPECT_EQ(t->vocab_size(), 258);
  EXPECT_EQ(t->bos_token_id(), 256);
  EXPECT_EQ(t->eos_token_id(), 257);
  EXPECT_TRUE(t->IsSpecial(256));
  EXPECT_TRUE(t->IsSpecial(257));
  EXPECT_FALSE(t->IsSpecial(0));
  EXPECT_FALSE(t->IsSpecial(255));
}

TEST(ByteTokenizer, EncodeAddsBosOnlyWhenAsked) {
  auto t = MakeByteTokenizer();
  EXPECT_EQ(*t->Encode("hi", false), (std::vector<int32_t>{'h', 'i'}));
  EXPECT_EQ(*t->Encode("hi", true), (std::vector<int32_t>{256, 'h', 'i'}));
  EXPECT_EQ(*t->Encode("", true), (std::vector<int32_t>{256}));
  EXPECT_EQ(*t->Encode("", false), (std::vector<int32_t>{}));
}

TEST(ByteTokenizer, RoundTrip) {
  auto t = MakeByteTokenizer();
  for (const std::string& text :
       std::vector<std::string>{"", "hello world", "é日本🎉", "👨‍👩‍👧 tabs\tnew\nlines",
                                std::string("nul\0byte", 8)}) {
    auto ids = t->Encode(text, true);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(t->Decode(*ids, true), text);
    EXPECT_EQ(t->Decode(*ids, false), "<bos>" + text);
    EXPECT_EQ(Stream(*t, *ids, true), text);
  }
}

TEST(ByteTokenizer, InvalidUtf8DecodesToReplacementCharacters) {
  auto t = MakeByteTokenizer();
  // Invalid input bytes are still one token each and round-trip as ids.
  const std::string bytes =
      "a\xFF"
      "b\xE2\x82"
      "c\xF0\x9F\x98";
  auto ids = t->Encode(bytes, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, Ids(bytes));
  const std::string want = "a" + kFffd + "b" + kFffd + "c" + kFffd;
  EXPECT_EQ(t->Decode(*ids, false), want);
  EXPECT_EQ(Stream(*t, *ids, false), want);
}

TEST(ByteTokenizer, EmojiSplitAcrossTokensStreamsWhole) {
  auto t = MakeByteTokenizer();
  std::vector<int32_t> ids = Ids("ok 🎉!");  // 🎉 = F0 9F 8E 89
  ids.push_back(257);
  std::vector<std::string> chunks;
  EXPECT_EQ(Stream(*t, ids, /*skip_special=*/true, &chunks), "ok 🎉!");
  // One chunk per Push, then Flush.
  const std::vector<std::string> want = {"o", "k", " ", "", "", "", "🎉", "!", "", ""};
  EXPECT_EQ(chunks, want);
  EXPECT_EQ(Stream(*t, ids, /*skip_special=*/false), "ok 🎉!<eos>");
}

TEST(ByteTokenizer, StreamFlushesTruncatedTail) {
  auto t = MakeByteTokenizer();
  std::vector<std::string> chunks;
  EXPECT_EQ(Stream(*t, Ids("x\xF0\x9F"), false, &chunks), "x" + kFffd);
  EXPECT_EQ(chunks, (std::vector<std::string>{"x", "", "", kFffd}));
}

TEST(ByteTokenizer, SpecialInsideOpenSequenceBreaksIt) {
  auto t = MakeByteTokenizer();
  // <eos> arrives while a UTF-8 sequence is open: the sequence is invalid.
  std::vector<int32_t> ids = {0xE2, 0x82, 257, 'a'};
  EXPECT_EQ(t->Decode(ids, false), kFffd + "<eos>a");
  EXPECT_EQ(Stream(*t, ids, false), kFffd + "<eos>a");
  // Skipped, it appends nothing, so the sequence stays open.
  ids = {0xE2, 0x82, 257, 0xAC};
  EXPECT_EQ(t->Decode(ids, true), "€");
  EXPECT_EQ(Stream(*t, ids, true), "€");
}

TEST(ByteTokenizer, IdsOutsideTheVocabularyDecodeToNothing) {
  auto t = MakeByteTokenizer();
  EXPECT_EQ(t->Decode(std::vector<int32_t>{-1, 'a', 258, 100000, 'b'}, false), "ab");
}

}  // namespace
}  // namespace kvserve::engine
