// A hand-written byte-level BPE tokenizer.json with known merges, written to
// a temporary directory, and the ids it must give.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace kvserve::engine {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

// Byte-level alphabet: ' ' is "Ġ", '\n' is "Ċ", 'é' (C3 A9) is "Ã" "©".
json BaseSpec() {
  return json::parse(R"({
    "version": "1.0",
    "added_tokens": [
      {"id": 22, "content": "<|end|>", "special": true, "normalized": false},
      {"id": 23, "content": "<tool>", "special": false, "normalized": false,
       "lstrip": true, "rstrip": true},
      {"id": 24, "content": "日本", "special": false, "normalized": false},
      {"id": 25, "content": "[M]", "special": true, "normalized": false, "single_word": true},
      {"id": 26, "content": "<|begin|>", "special": true, "normalized": false}
    ],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                      "use_regex": true},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<|begin|>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [],
      "special_tokens": {"<|begin|>": {"id": "<|begin|>", "ids": [26], "tokens": ["<|begin|>"]}}},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null,
      "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": false,
      "byte_fallback": false, "ignore_merges": false,
      "vocab": {"h": 0, "e": 1, "l": 2, "o": 3, "Ġ": 4, "w": 5, "r": 6, "d": 7, "he": 8,
                "ll": 9, "llo": 10, "hello": 11, "Ġw": 12, "or": 13, "Ġwor": 14, "ld": 15,
                "Ġworld": 16, "!": 17, "Ċ": 18, "Ã": 19, "©": 20, "Ã©": 21, "[": 27, "M": 28,
                "]": 29, "Ġhi": 30, "i": 31},
      "merges": ["h e", "l l", "ll o", "he llo", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld",
                 "Ã ©"]}
  })");
}

class HfBpeTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::path(::testing::TempDir()) /
        ("hf_bpe_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::unique_ptr<Tokenizer> Load(const json& spec) {
    Write("tokenizer.json", spec.dump());
    auto t = LoadTokenizer(dir_.string());
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }
  absl::Status LoadError(const json& spec) {
    Write("tokenizer.json", spec.dump());
    auto t = LoadTokenizer(dir_.string());
    return t.ok() ? absl::OkStatus() : t.status();
  }

  std::filesystem::path dir_;
};

TEST_F(HfBpeTokenizerTest, EncodesWithMerges) {
  auto t = Load(BaseSpec());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 32);
  EXPECT_EQ(*t->Encode("hello world!", false), (Ids{11, 16, 17}));
  EXPECT_EQ(*t->Encode("hello\n", false), (Ids{11, 18}));
  EXPECT_EQ(*t->Encode("é", false), (Ids{21}));
  // "held": h e l d -> "h e" (rank 0) then "l d" (rank 7).
  EXPECT_EQ(*t->Encode("held", false), (Ids{8, 15}));
  // "world" without its space: "o r" then "l d"; no merge joins w, or, ld.
  EXPECT_EQ(*t->Encode("world", false), (Ids{5, 13, 15}));
  EXPECT_EQ(*t->Encode("", false), (Ids{}));
  // Code points outside the vocab are dropped (no unk_token).
  EXPECT_EQ(*t->Encode("hex", false), (Ids{8}));
}

TEST_F(HfBpeTokenizerTest, TemplateAddsBos) {
  auto t = Load(BaseSpec());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode("hello", true), (Ids{26, 11}));
  EXPECT_EQ(*t->Encode("", true), (Ids{26}));
  EXPECT_EQ(t->bos_token_id(), 26);
  EXPECT_EQ(t->eos_token_id(), std::nullopt);
}

TEST_F(HfBpeTokenizerTest, TokenizerConfigNamesEos) {
  Write("tokenizer_config.json",
        R"({"bos_token": "<|begin|>", "eos_token": {"content": "<|end|>", "lstrip": false}})");
  auto t = Load(BaseSpec());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bos_token_id(), 26);
  EXPECT_EQ(t->eos_token_id(), 22);
}

TEST_F(HfBpeTokenizerTest, AddedTokens) {
  auto t = Load(BaseSpec());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode("hello<|end|>world", false), (Ids{11, 22, 5, 13, 15}));
  // lstrip / rstrip swallow the spaces around <tool>.
  EXPECT_EQ(*t->Encode("hello <tool> world", false), (Ids{11, 23, 5, 13, 15}));
  // single_word: [M] right after a letter is plain text.
  EXPECT_EQ(*t->Encode("hello[M]", false), (Ids{11, 27, 28, 29}));
  EXPECT_EQ(*t->Encode("hello [M]", false), (Ids{11, 4, 25}));
  // Longest match first: "<|end|>" is not cut short by another token.
  EXPECT_EQ(*t->Encode("日本<|end|>", false), (Ids{24, 22}));
  EXPECT_TRUE(t->IsSpecial(22));
  EXPECT_FALSE(t->IsSpecial(23));
  EXPECT_FALSE(t->IsSpecial(11));
}

TEST_F(HfBpeTokenizerTest, Decodes) {
  auto t = Load(BaseSpec());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Decode(Ids{11, 22, 16}, false), "hello<|end|> world");
  EXPECT_EQ(t->Decode(Ids{11, 22, 16}, true), "hello world");
  EXPECT_EQ(t->Decode(Ids{26, 11, 18}, true), "hello\n");
  // A token outside the byte-level alphabet contributes its own UTF-8.
  EXPECT_EQ(t->Decode(Ids{24}, false), "日本");
  EXPECT_EQ(t->Decode(Ids{21}, false), "é");
  EXPECT_EQ(t->Decode(Ids{19, 20}, false), "é");
  EXPECT_EQ(t->Decode(Ids{19}, false), "\xEF\xBF\xBD");
  // Half of é per token: nothing, then all of it.
  IncrementalDetokenizer detok(*t, true);
  EXPECT_EQ(detok.Push(11), "hello");
  EXPECT_EQ(detok.Push(19), "");
  EXPECT_EQ(detok.Push(20), "é");
  EXPECT_EQ(detok.Push(22), "");
  EXPECT_EQ(detok.Flush(), "");
}

TEST_F(HfBpeTokenizerTest, MergesAsPairs) {
  json spec = BaseSpec();
  json pairs = json::array();
  for (const json& m : spec["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    pairs.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  spec["model"]["merges"] = pairs;
  auto t = Load(spec);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode("hello world!", false), (Ids{11, 16, 17}));
}

TEST_F(HfBpeTokenizerTest, IgnoreMerges) {
  json spec = BaseSpec();
  auto t = Load(spec);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode(" hi", false), (Ids{4, 0, 31}));  // no merge makes "Ġhi"
  spec["model"]["ignore_merges"] = true;
  t = Load(spec);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode(" hi", false), (Ids{30}));
}

TEST_F(HfBpeTokenizerTest, AddPrefixSpace) {
  json spec = BaseSpec();
  spec["pre_tokenizer"]["add_prefix_space"] = true;
  auto t = Load(spec);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode("world", false), (Ids{16}));
  // Every piece between added tokens gets its own prefix space.
  EXPECT_EQ(*t->Encode("world<|end|>world", false), (Ids{16, 22, 16}));
}

TEST_F(HfBpeTokenizerTest, SplitThenByteLevelWithoutRegex) {
  json spec = BaseSpec();
  spec["pre_tokenizer"] = json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": " ?\\p{L}+|\\s+"}, "behavior": "Isolated",
       "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})");
  auto t = Load(spec);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode("hello world!", false), (Ids{11, 16, 17}));
}

TEST_F(HfBpeTokenizerTest, NfcNormalizer) {
  json spec = BaseSpec();
  auto t = Load(spec);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode("e\u0301", false), (Ids{1}));  // U+0301 is not in the vocab
  spec["normalizer"] = json::parse(R"({"type": "NFC"})");
  t = Load(spec);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(*t->Encode("e\u0301", false), (Ids{21}));
}

TEST_F(HfBpeTokenizerTest, ConcurrentEncodesAgree) {
  auto t = Load(BaseSpec());
  ASSERT_NE(t, nullptr);
  // Many distinct words, so that threads fill the word cache concurrently.
  std::string text;
  for (int i = 0; i < 3000; ++i) {
    for (int b = i; b > 0; b /= 5) text += "held"[b % 4];
    text += i % 7 == 0 ? "\n" : " ";
  }
  auto want = t->Encode(text, true);
  ASSERT_TRUE(want.ok());
  std::vector<std::thread> threads;
  threads.reserve(4);
  std::vector<int> same(4, 0);    // not vector<bool>: threads write neighbours
  auto fresh = Load(BaseSpec());  // cold cache
  ASSERT_NE(fresh, nullptr);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      auto got = fresh->Encode(text, true);
      same[i] = got.ok() && *got == *want;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(same, std::vector<int>(4, 1));
}

TEST_F(HfBpeTokenizerTest, RejectsInvalidUtf8Input) {
  auto t = Load(BaseSpec());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("a\xFF", false).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(HfBpeTokenizerTest, UnsupportedPartsAreNamed) {
  struct Case {
    const char* pointer;
    const char* value;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"/model/type", R"("WordPiece")", "WordPiece"},
      {"/normalizer", R"({"type": "Lowercase"})", "Lowercase"},
      {"/pre_tokenizer", R"({"type": "Metaspace"})", "Metaspace"},
      {"/pre_tokenizer", R"({"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Removed"},
          {"type": "ByteLevel"}]})",
       "Removed"},
      {"/decoder", R"({"type": "WordPiece"})", "decoder"},
      {"/decoder", "null", "decoder"},
      {"/post_processor", R"({"type": "BertProcessing2"})", "BertProcessing2"},
      {"/model/dropout", "0.1", "dropout"},
      {"/model/continuing_subword_prefix", R"("##")", "continuing_subword_prefix"},
  };
  for (const Case& c : cases) {
    json spec = BaseSpec();
    spec[json::json_pointer(c.pointer)] = json::parse(c.value);
    const absl::Status s = LoadError(spec);
    EXPECT_FALSE(s.ok()) << c.pointer;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s;
    EXPECT_NE(s.message().find("tokenizer.json"), std::string::npos) << s;
  }
}

TEST_F(HfBpeTokenizerTest, MalformedFiles) {
  Write("tokenizer.json", "{not json");
  auto t = LoadTokenizer(dir_.string());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find((dir_ / "tokenizer.json").string()), std::string::npos);
  EXPECT_NE(t.status().message().find("JSON"), std::string::npos);

  json spec = BaseSpec();
  spec["model"]["merges"].push_back("x y");  // tokens not in the vocab
  const absl::Status s = LoadError(spec);
  EXPECT_NE(s.message().find("merge"), std::string::npos) << s;

  spec = BaseSpec();
  spec["model"]["vocab"] = "oops";
  EXPECT_FALSE(LoadError(spec).ok());

  spec = BaseSpec();
  spec["added_tokens"][0]["id"] = 2000000000;
  EXPECT_NE(LoadError(spec).message().find("out of range"), std::string::npos);
}

TEST_F(HfBpeTokenizerTest, MissingFiles) {
  auto t = LoadTokenizer(dir_.string());  // empty directory
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find(dir_.string()), std::string::npos);
  t = LoadHfTokenizerJson((dir_ / "nope.json").string());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("nope.json"), std::string::npos);
  t = LoadSentencePiece((dir_ / "nope.model").string());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("nope.model"), std::string::npos);
  // A file that is not a SentencePiece model.
  const std::string garbage = Write("tokenizer.model", "garbage");
  t = LoadTokenizer(dir_.string());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(garbage), std::string::npos) << t.status();
}

}  // namespace
}  // namespace kvserve::engine
