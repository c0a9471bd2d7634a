// The pieces of the SentencePiece-converted tokenizer.json pipeline:
// normalizers, Metaspace, the literal MergedWithPrevious split, the decoder
// rules (per-token steps, ByteFallback runs, Strip), the per-byte U+FFFD
// rule, and refusals that name the file and the field. Expected values are
// what tokenizers 0.23 / sentencepiece 0.2 give for the same inputs.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/tokenizer/hf_decoder.h"
#include "engine/tokenizer/hf_normalizer.h"
#include "engine/tokenizer/metaspace.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

constexpr char kMeta[] = "\xE2\x96\x81";  // U+2581
const std::string kFffd = "\xEF\xBF\xBD";

// "~" stands for U+2581 in the strings below.
std::string Meta(std::string s) { return ReplaceAll(s, "~", kMeta); }

TEST(Normalizer, PrependThenReplaceAsLlama2) {
  const std::vector<NormalizerStep> steps = {
      {NormalizerStep::Kind::kPrepend, kMeta, ""},
      {NormalizerStep::Kind::kReplace, " ", kMeta},
  };
  EXPECT_EQ(*Normalize(steps, " a b"), Meta("~~a~b"));
  EXPECT_EQ(*Normalize(steps, ""), "");  // Prepend leaves empty text alone
}

TEST(Normalizer, NfkcAndNfc) {
  const std::vector<NormalizerStep> nfkc = {{NormalizerStep::Kind::kNfkc, "", ""}};
  const std::vector<NormalizerStep> nfc = {{NormalizerStep::Kind::kNfc, "", ""}};
  EXPECT_EQ(*Normalize(nfkc, "\xEF\xAC\x81 \xE2\x91\xA0"), "fi 1");  // ﬁ ①
  EXPECT_EQ(*Normalize(nfc, "\xEF\xAC\x81"), "\xEF\xAC\x81");
  EXPECT_EQ(*Normalize(nfc, "e\xCC\x81"), "\xC3\xA9");
}

std::vector<std::string> Metaspace(MetaspaceOptions::Prepend prepend, bool split,
                                   std::string_view text, bool at_start) {
  MetaspaceOptions options;
  options.prepend = prepend;
  options.split = split;
  std::vector<std::string> out;
  MetaspacePreTokenize(options, text, at_start, &out);
  return out;
}

TEST(MetaspacePreTokenizer, SchemesAndSplit) {
  using P = MetaspaceOptions::Prepend;
  using V = std::vector<std::string>;
  EXPECT_EQ(Metaspace(P::kAlways, true, " Hey  friend ", true),
            (V{Meta("~Hey"), Meta("~"), Meta("~friend"), Meta("~")}));
  EXPECT_EQ(Metaspace(P::kAlways, false, " Hey  friend ", true), (V{Meta("~Hey~~friend~")}));
  EXPECT_EQ(Metaspace(P::kAlways, false, "Hey", false), (V{Meta("~Hey")}));
  EXPECT_EQ(Metaspace(P::kFirst, false, "Hey", true), (V{Meta("~Hey")}));
  EXPECT_EQ(Metaspace(P::kFirst, false, "Hey", false), (V{"Hey"}));
  EXPECT_EQ(Metaspace(P::kNever, true, "a b", true), (V{"a", Meta("~b")}));
  EXPECT_EQ(Metaspace(P::kAlways, true, "", true), V{});
}

TEST(SplitMergedWithPrevious, AsGemma) {
  std::vector<std::string> out;
  SplitMergedWithPrevious("a  b c ", " ", &out);
  EXPECT_EQ(out, (std::vector<std::string>{"a ", " ", "b ", "c "}));
  out.clear();
  SplitMergedWithPrevious(" a", " ", &out);
  EXPECT_EQ(out, (std::vector<std::string>{" ", "a"}));
}

TEST(DecoderSteps, ReplaceAndMetaspace) {
  HfDecoderSpec replace;
  replace.per_token.push_back({.pattern = kMeta, .content = " "});
  EXPECT_EQ(ApplyPerTokenSteps(replace, Meta("~a~b"), true), " a b");
  HfDecoderSpec metaspace;
  metaspace.per_token.push_back({.metaspace = true, .pattern = kMeta});
  // tokenizers drops every U+2581 of token 0, not only the leading one.
  EXPECT_EQ(ApplyPerTokenSteps(metaspace, Meta("~a~b"), true), "ab");
  EXPECT_EQ(ApplyPerTokenSteps(metaspace, Meta("~a~b"), false), " a b");
  metaspace.per_token[0].metaspace_drop_first = false;  // prepend_scheme never
  EXPECT_EQ(ApplyPerTokenSteps(metaspace, Meta("~a"), true), " a");
}

TEST(ToValidUtf8, PerByteRule) {
  // A cut 3-byte character: one U+FFFD per maximal subpart, or per byte.
  EXPECT_EQ(ToValidUtf8("\xE6\x97"), kFffd);
  EXPECT_EQ(ToValidUtf8("\xE6\x97", /*per_byte=*/true), kFffd + kFffd);
  EXPECT_EQ(ToValidUtf8("\xF0\x9F\x98\xE6\x97\xA5x", true), kFffd + kFffd + kFffd + "日x");
  EXPECT_EQ(ToValidUtf8("\xED\xA0\x80", true), kFffd + kFffd + kFffd);  // a surrogate
}

// A tokenizer.json written by the test, loaded through LoadTokenizer.
class SpJsonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvserve_sp_json_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // vocab: <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then the pieces.
  std::string Json(const std::string& normalizer, const std::string& pre_tokenizer,
                   const std::string& decoder, bool byte_fallback = true) const {
    std::string vocab = R"("<unk>": 0, "<s>": 1, "</s>": 2)";
    char name[16];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      vocab += std::string(", \"") + name + "\": " + std::to_string(3 + b);
    }
    vocab += Meta(R"(, "~": 259, "a": 260, "b": 261, "~a": 262, "~b": 263)");
    return std::string(R"({"model": {"type": "BPE", "byte_fallback": )") +
           (byte_fallback ? "true" : "false") + R"(, "fuse_unk": true,
      "unk_token": "<unk>", "vocab": {)" +
           vocab + Meta(R"(}, "merges": ["~ a", "~ b"]},
      "added_tokens": [{"id": 1, "content": "<s>", "special": true, "normalized": false},
                       {"id": 2, "content": "</s>", "special": true, "normalized": false}],
      "normalizer": )") +
           normalizer + ", \"pre_tokenizer\": " + pre_tokenizer + ", \"decoder\": " + decoder +
           R"(, "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}})";
  }

  std::unique_ptr<Tokenizer> Load(const std::string& json) {
    std::ofstream(dir_ / "tokenizer.json") << json;
    auto t = LoadTokenizer(dir_.string());
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }

  std::string Stream(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
    IncrementalDetokenizer d(t, skip);
    std::string text;
    for (int32_t id : ids) {
      const std::string chunk = d.Push(id);
      EXPECT_EQ(ToValidUtf8(chunk), chunk);
      text += chunk;
    }
    return text + d.Flush();
  }

  std::filesystem::path dir_;
};

const char kLegacyNormalizer[] =
    R"({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "~"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "~"}]})";
const char kLlamaDecoder[] =
    R"({"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "~"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})";

int32_t Byte(int b) { return 3 + b; }

TEST_F(SpJsonTest, Llama2LegacyEncodeWithByteFallback) {
  auto t = Load(Json(Meta(kLegacyNormalizer), "null", Meta(kLlamaDecoder)));
  ASSERT_NE(t, nullptr);
  // "a b日": _a _b then the three bytes of 日 (not in the vocab).
  EXPECT_EQ(*t->Encode("a b日", true),
            (std::vector<int32_t>{1, 262, 263, Byte(0xE6), Byte(0x97), Byte(0xA5)}));
  // Prepend goes in front of the text after an added token too.
  EXPECT_EQ(*t->Encode("a</s>b", false), (std::vector<int32_t>{262, 2, 263}));
  EXPECT_EQ(*t->Encode(" a", false), (std::vector<int32_t>{259, 262}));
}

TEST_F(SpJsonTest, MetaspaceFirstEncode) {
  auto t = Load(Json("null", Meta(R"({"type": "Metaspace", "replacement": "~",
      "prepend_scheme": "first", "split": false})"),
                     Meta(kLlamaDecoder)));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode("a</s>b", false), (std::vector<int32_t>{262, 2, 261}));
  EXPECT_EQ(*t->Encode(" a", false), (std::vector<int32_t>{262}));
}

TEST_F(SpJsonTest, ByteFallbackDecodeRunsAndStrip) {
  auto t = Load(Json(Meta(kLegacyNormalizer), "null", Meta(kLlamaDecoder)));
  ASSERT_NE(t, nullptr);
  struct Case {
    std::vector<int32_t> ids;
    std::string want;  // skip_special = false
  };
  const std::vector<Case> cases = {
      {{262, Byte(0xE6), Byte(0x97), Byte(0xA5)}, "a日"},  // Strip took the leading space
      {{Byte(0xE6), Byte(0x97)}, kFffd + kFffd},           // a cut character: one per byte
      {{Byte(0x41), Byte(0xE6)}, kFffd + kFffd},           // the whole run, "A" included
      {{Byte(0x41), 260, Byte(0xE6)}, "Aa" + kFffd},       // a non-byte token ends a run
      {{Byte(0xE6), Byte(0x97), Byte(0xA5), Byte(0xE6)}, kFffd + kFffd + kFffd + kFffd},
      {{Byte(0x20), 262}, " a"},  // fused "  a", one space stripped
      {{1, 262}, "<s> a"},        // the special token's text starts the text
  };
  for (const Case& c : cases) {
    EXPECT_EQ(t->Decode(c.ids, false), c.want);
    EXPECT_EQ(Stream(*t, c.ids, false), c.want);
  }
  // Skipped special tokens are not there at all: they do not end a run.
  const std::vector<int32_t> split = {Byte(0xE6), 2, Byte(0x97), Byte(0xA5)};
  EXPECT_EQ(t->Decode(split, true), "日");
  EXPECT_EQ(Stream(*t, split, true), "日");
  EXPECT_EQ(t->Decode(split, false), kFffd + "</s>" + kFffd + kFffd);
}

TEST_F(SpJsonTest, ByteRunIsHeldUntilItEnds) {
  auto t = Load(Json(Meta(kLegacyNormalizer), "null", Meta(kLlamaDecoder)));
  ASSERT_NE(t, nullptr);
  IncrementalDetokenizer d(*t, false);
  EXPECT_EQ(d.Push(262), "a");        // " a", its leading space stripped
  EXPECT_EQ(d.Push(Byte(0x41)), "");  // a later invalid byte would void it
  EXPECT_EQ(d.Push(Byte(0x42)), "");
  EXPECT_EQ(d.Push(263), "AB b");  // the run ended valid
  EXPECT_EQ(d.Push(Byte(0xE6)), "");
  EXPECT_EQ(d.Flush(), kFffd);
}

TEST_F(SpJsonTest, MetaspaceDecoderDropsReplacementsOfTokenZero) {
  auto t =
      Load(Json(Meta(kLegacyNormalizer), "null",
                Meta(R"({"type": "Metaspace", "replacement": "~", "prepend_scheme": "always"})")));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Decode(std::vector<int32_t>{262, 263}, false), "a b");
  EXPECT_EQ(t->Decode(std::vector<int32_t>{1, 262, 263}, true), "a b");  // <s> skipped
  EXPECT_EQ(t->Decode(std::vector<int32_t>{1, 262, 263}, false), "<s> a b");
  // Without ByteFallback, byte tokens are plain text.
  EXPECT_EQ(t->Decode(std::vector<int32_t>{260, Byte(0x41)}, false), "a<0x41>");
}

TEST_F(SpJsonTest, WithoutByteFallbackUnknownCharactersFuseIntoOneUnk) {
  auto t = Load(Json(Meta(kLegacyNormalizer), "null", Meta(R"({"type": "Sequence", "decoders": [
                         {"type": "Replace", "pattern": {"String": "~"}, "content": " "},
                         {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1}]})"),
                     /*byte_fallback=*/false));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode("a日本b", false), (std::vector<int32_t>{262, 0, 261}));
  // Without ByteFallback in the decoder, <0xNN> tokens are text.
  EXPECT_EQ(t->Decode(std::vector<int32_t>{262, Byte(0x41)}, false), "a<0x41>");
}

TEST_F(SpJsonTest, UnsupportedFieldsAreNamed) {
  struct Case {
    std::string normalizer, pre_tokenizer, decoder, words;
  };
  const std::vector<Case> cases = {
      {R"({"type": "Lowercase"})", "null", kLlamaDecoder, "normalizer"},
      {R"({"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "~"})", "null",
       kLlamaDecoder, "normalizer Replace"},
      {"null", R"({"type": "Metaspace", "replacement": "~", "prepend_scheme": "sometimes"})",
       kLlamaDecoder, "prepend_scheme"},
      {"null", R"({"type": "Whitespace"})", kLlamaDecoder, "pre_tokenizer"},
      {"null", R"({"type": "Metaspace", "replacement": "~", "add_prefix_space": false})",
       kLlamaDecoder, "add_prefix_space = false"},
      {"null", "null", R"({"type": "Sequence", "decoders": [{"type": "Fuse"},
          {"type": "Strip", "content": " ", "start": 1, "stop": 1}]})",
       "Strip stop"},
      {"null", "null", R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"},
          {"type": "Replace", "pattern": {"String": "~"}, "content": " "}]})",
       "out of order"},
      {"null", "null", "null", "decoder"},
      {"null", "null", R"({"type": "CTC"})", "decoder"},
  };
  for (const Case& c : cases) {
    std::ofstream(dir_ / "tokenizer.json")
        << Json(Meta(c.normalizer), Meta(c.pre_tokenizer), Meta(c.decoder));
    auto t = LoadTokenizer(dir_.string());
    ASSERT_FALSE(t.ok()) << c.words;
    EXPECT_NE(t.status().message().find((dir_ / "tokenizer.json").string()), std::string::npos)
        << t.status();
    EXPECT_NE(t.status().message().find(c.words), std::string::npos) << t.status();
  }
}

}  // namespace
}  // namespace kvserve::engine
