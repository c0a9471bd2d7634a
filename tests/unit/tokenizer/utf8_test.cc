#include "engine/tokenizer/utf8.h"

#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(ToValidUtf8, KeepsValidText) {
  EXPECT_EQ(ToValidUtf8(""), "");
  EXPECT_EQ(ToValidUtf8("hello"), "hello");
  EXPECT_EQ(ToValidUtf8("é日本🎉"), "é日本🎉");
  EXPECT_EQ(ToValidUtf8(std::string("a\0b", 3)), std::string("a\0b", 3));
  EXPECT_EQ(ToValidUtf8("\xF4\x8F\xBF\xBF"), "\xF4\x8F\xBF\xBF");  // U+10FFFF
}

// Expected values follow Rust's String::from_utf8_lossy (what Hugging Face
// tokenizers uses): one U+FFFD per maximal invalid subpart.
TEST(ToValidUtf8, ReplacesMaximalSubparts) {
  EXPECT_EQ(ToValidUtf8("\xFF"), kFffd);
  EXPECT_EQ(ToValidUtf8("a\x80"
                        "b"),
            "a" + kFffd + "b");
  EXPECT_EQ(ToValidUtf8("\x80\x80"), kFffd + kFffd);
  EXPECT_EQ(ToValidUtf8("\xC0\xAF"), kFffd + kFffd);  // overlong lead
  EXPECT_EQ(ToValidUtf8("\xE2\x82"
                        "x"),
            kFffd + "x");                                                     // truncated 3-byte
  EXPECT_EQ(ToValidUtf8("\xE2\x82"), kFffd);                                  // truncated at end
  EXPECT_EQ(ToValidUtf8("\xF0\x9F\x98"), kFffd);                              // truncated 4-byte
  EXPECT_EQ(ToValidUtf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);              // surrogate
  EXPECT_EQ(ToValidUtf8("\xE0\x80\x80"), kFffd + kFffd + kFffd);              // overlong
  EXPECT_EQ(ToValidUtf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(ToValidUtf8("\xF5"), kFffd);
  EXPECT_EQ(ToValidUtf8("\xF0\x9F\x98\xE2\x82\xAC"), kFffd + "€");
}

TEST(Utf8, CompletePrefixLength) {
  EXPECT_EQ(utf8::CompletePrefixLength(""), 0u);
  EXPECT_EQ(utf8::CompletePrefixLength("abc"), 3u);
  EXPECT_EQ(utf8::CompletePrefixLength("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8::CompletePrefixLength("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(utf8::CompletePrefixLength("\xF0"), 0u);
  EXPECT_EQ(utf8::CompletePrefixLength("ab\xFF"), 3u);       // invalid: decided
  EXPECT_EQ(utf8::CompletePrefixLength("ab\xE2\x82x"), 5u);  // invalid subpart ended
  EXPECT_EQ(utf8::CompletePrefixLength("\xE0\x80"), 2u);     // can never complete
  EXPECT_EQ(utf8::CompletePrefixLength("\x80\x80\x80\xE2"), 3u);
}

}  // namespace
}  // namespace kvserve::engine
