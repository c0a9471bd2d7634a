#include "engine/tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/utf8.h"

namespace kvserve::engine {
namespace {

using nlohmann::json;

// llama.cpp's token types.
constexpr int32_t kTypeUnknown = 2;
constexpr int32_t kTypeControl = 3;
constexpr int32_t kTypeUserDefined = 4;

// The split regexes of the `tokenizer.ggml.pre` names whose merges were
// learned on a split other than GPT-2's (the table of transformers' GGUF
// tokenizer mapping); any other name splits with GPT-2's regex.
constexpr std::string_view kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen35Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N})"
    R"(| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kTekkenSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)"
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt4oSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::optional<std::string_view> PreTokenizerSplit(const std::string& pre) {
  static const std::map<std::string, std::string_view, std::less<>> kSplits = {
      {"llama3", kLlama3Split},       {"llama-v3", kLlama3Split},
      {"llama-bpe", kLlama3Split},    {"falcon3", kLlama3Split},
      {"falcon-h1", kLlama3Split},    {"pixtral", kLlama3Split},
      {"midm-2.0", kLlama3Split},     {"lfm2", kLlama3Split},
      {"jina-v5-nano", kLlama3Split}, {"dbrx", kLlama3Split},
      {"smaug-bpe", kLlama3Split},    {"tekken", kTekkenSplit},
      {"qwen2", kQwen2Split},         {"deepseek-r1-qwen", kQwen2Split},
      {"kormo", kQwen2Split},         {"f2llmv2", kQwen2Split},
      {"megrez", kQwen2Split},        {"qwen35", kQwen35Split},
      {"gpt-4o", kGpt4oSplit},        {"llama4", kGpt4oSplit},
      {"kanana2", kGpt4oSplit},       {"talkie", kGpt4oSplit},
      {"minimax-m2", kGpt4oSplit},
  };
  auto it = kSplits.find(pre);
  if (it == kSplits.end()) return std::nullopt;
  return it->second;
}

bool IsGemma(const std::string& architecture) {
  return architecture == "gemma" || architecture == "gemma2" || architecture == "gemma3";
}

int32_t TypeOf(const GgufVocab& v, size_t i) {
  return i < v.token_type.size() ? v.token_type[i] : 1;
}

// Every character of `token` is one of the byte-level alphabet's 256.
bool InByteAlphabet(const std::string& token) {
  if (!utf8::IsValid(token)) return false;
  size_t pos = 0;
  while (pos < token.size()) {
    if (byte_level::CharToByte(utf8::DecodeNext(token, &pos)) < 0) return false;
  }
  return true;
}

// A token made only of whitespace with at least one space: Gemma files store
// "  " where GemmaTokenizer looks up U+2581 U+2581 (one per character).
std::string GemmaSpelling(const std::string& token) {
  if (token.find(' ') == std::string::npos || !utf8::IsValid(token)) return token;
  size_t pos = 0, chars = 0;
  while (pos < token.size()) {
    const char32_t c = utf8::DecodeNext(token, &pos);
    // Python's str.strip() whitespace.
    const bool space = c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) ||
                       c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
                       c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
    if (!space) return token;
    ++chars;
  }
  std::string out;
  for (size_t i = 0; i < chars; ++i) out += "\u2581";
  return out;
}

// Merges implied by a vocabulary without any: every split of a token into
// two tokens (split at character boundaries), ranked by the token's score,
// best first; ties by the longer left piece, then the longer right piece,
// then first found (tokens in vocabulary order, each token's splits by the
// ids of their pieces).
std::vector<std::pair<std::string, std::string>> DeriveMerges(
    const std::vector<std::string>& tokens, const std::vector<double>& token_scores) {
  std::unordered_map<std::string_view, int32_t> id;  // the last id of each token
  for (size_t i = 0; i < tokens.size(); ++i) id[tokens[i]] = static_cast<int32_t>(i);
  struct Candidate {
    int32_t left, right;
    double score;
    size_t left_chars, right_chars;
  };
  std::vector<Candidate> all;
  std::unordered_set<std::string_view> seen;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    if (!seen.insert(token).second) continue;  // a repeated token counts once
    if (token.empty() || !utf8::IsValid(token)) continue;
    const double score = token_scores[id[token]];
    std::vector<Candidate> local;
    size_t pos = 0, chars_before = 0;
    size_t total_chars = 0;
    for (size_t p = 0; p < token.size(); ++total_chars) utf8::DecodeNext(token, &p);
    while (true) {
      utf8::DecodeNext(token, &pos);
      ++chars_before;
      if (pos >= token.size()) break;
      auto l = id.find(std::string_view(token).substr(0, pos));
      auto r = id.find(std::string_view(token).substr(pos));
      if (l != id.end() && r != id.end()) {
        local.push_back({l->second, r->second, score, chars_before, total_chars - chars_before});
      }
    }
    std::sort(local.begin(), local.end(), [](const Candidate& a, const Candidate& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.left_chars != b.left_chars) return a.left_chars > b.left_chars;
    return a.right_chars > b.right_chars;
  });
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(all.size());
  for (const Candidate& c : all) merges.emplace_back(tokens[c.left], tokens[c.right]);
  return merges;
}

absl::Status FileMerges(const GgufVocab& v, HfBpeSpec* spec) {
  spec->merges.reserve(v.merges.size());
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t space = m.find(' ');
    if (space == std::string::npos || m.find(' ', space + 1) != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.ggml.merges[", i, "] = \"", m,
                                                     "\" is not two tokens separated by a space"));
    }
    spec->merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  return absl::OkStatus();
}

// The pipeline around the vocabulary, as tokenizer.json spells it.
json PipelineJson(const GgufVocab& v) {
  json doc = json::object();
  json model = {{"type", "BPE"}, {"vocab", json::object()}, {"merges", json::array()}};
  if (v.model == "gpt2") {
    const std::optional<std::string_view> split = PreTokenizerSplit(v.pre);
    if (split.has_value()) {
      doc["pre_tokenizer"] = {
          {"type", "Sequence"},
          {"pretokenizers",
           json::array(
               {{{"type", "Split"},
                 {"pattern", {{"Regex", std::string(*split)}}},
                 {"behavior", "Isolated"},
                 {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
    } else {
      doc["pre_tokenizer"] = {
          {"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    }
    doc["decoder"] = {{"type", "ByteLevel"}};
  } else {
    model["byte_fallback"] = true;
    model["fuse_unk"] = true;
    json decoders =
        json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}}});
    if (IsGemma(v.architecture)) {
      if (v.unk.has_value()) model["unk_token"] = v.tokens[*v.unk];
      doc["normalizer"] = {
          {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
      doc["pre_tokenizer"] = {{"type", "Split"},
                              {"pattern", {{"String", " "}}},
                              {"behavior", "MergedWithPrevious"},
                              {"invert", false}};
    } else {
      doc["pre_tokenizer"] = {{"type", "Metaspace"},
                              {"replacement", "\u2581"},
                              {"prepend_scheme", "first"},
                              {"split", false}};
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    }
    doc["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  }
  doc["model"] = model;
  return doc;
}

absl::Status CheckId(const std::optional<int32_t>& id, size_t vocab, const char* key) {
  if (id.has_value() && (*id < 0 || static_cast<size_t>(*id) >= vocab)) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " = ", *id, " is outside the vocabulary of ", vocab));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfBpeSpec> GgufTokenizerSpec(const GgufVocab& v) {
  if (v.model != "gpt2" && v.model != "llama") {
    return absl::UnimplementedError(
        absl::StrCat("tokenizer.ggml.model \"", v.model, "\" is not supported (gpt2, llama)"));
  }
  const size_t n = v.tokens.size();
  if (n == 0) return absl::InvalidArgumentError("tokenizer.ggml.tokens is empty");
  if (!v.scores.empty() && v.scores.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.ggml.scores has ", v.scores.size(), " entries for ", n, " tokens"));
  }
  if (!v.token_type.empty() && v.token_type.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer.ggml.token_type has ", v.token_type.size(), " entries for ", n, " tokens"));
  }
  KVSERVE_RETURN_IF_ERROR(CheckId(v.bos, n, "tokenizer.ggml.bos_token_id"));
  KVSERVE_RETURN_IF_ERROR(CheckId(v.eos, n, "tokenizer.ggml.eos_token_id"));
  KVSERVE_RETURN_IF_ERROR(CheckId(v.unk, n, "tokenizer.ggml.unknown_token_id"));
  KVSERVE_ASSIGN_OR_RETURN(HfBpeSpec spec, ParseHfBpeSpec(PipelineJson(v).dump()));

  const bool byte_level = v.model == "gpt2";
  const bool gemma = !byte_level && IsGemma(v.architecture);
  // The vocabulary as the pipeline looks tokens up.
  std::vector<std::string> spelled(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& t = v.tokens[i];
    if (byte_level && !InByteAlphabet(t)) {
      byte_level::Encode(t, &spelled[i]);
    } else {
      spelled[i] = gemma ? GemmaSpelling(t) : t;
    }
    spec.vocab[spelled[i]] = static_cast<int32_t>(i);
  }
  if (!v.merges.empty()) {
    KVSERVE_RETURN_IF_ERROR(FileMerges(v, &spec));
  } else if (byte_level) {
    return absl::InvalidArgumentError("tokenizer.ggml.merges is missing (model \"gpt2\")");
  } else {
    std::vector<double> scores(n);
    for (size_t i = 0; i < n; ++i) {
      // Gemma ranks by position in the file; others by the token's score.
      if (gemma) {
        scores[i] = -static_cast<double>(i);
      } else if (v.scores.empty()) {
        return absl::InvalidArgumentError(
            "tokenizer.ggml.scores is missing (needed to derive the merges)");
      } else {
        scores[i] = v.scores[i];
      }
    }
    spec.merges = DeriveMerges(spelled, scores);
  }
  // Added tokens, in id order: CONTROL (and, for SentencePiece vocabularies,
  // UNKNOWN) special, USER_DEFINED plain; all matched on the raw text.
  for (size_t i = 0; i < n; ++i) {
    const int32_t type = TypeOf(v, i);
    const bool special = type == kTypeControl || (!byte_level && type == kTypeUnknown);
    if (!special && type != kTypeUserDefined) continue;
    if (special && byte_level && !InByteAlphabet(v.tokens[i])) continue;  // a mislabel
    // A USER_DEFINED token the vocabulary spells differently (Gemma's
    // whitespace runs) is looked up by its spelling, never matched raw.
    if (!special && !spec.vocab.contains(v.tokens[i])) continue;
    AddedToken token;
    token.id = static_cast<int32_t>(i);
    token.content = v.tokens[i];
    token.special = special;
    token.normalized = false;
    spec.added_tokens.push_back(std::move(token));
  }
  spec.bos = v.bos;
  spec.eos = v.eos;
  if (v.add_bos.value_or(!byte_level) && v.bos.has_value()) spec.prefix_ids.push_back(*v.bos);
  if (v.add_eos.value_or(false) && v.eos.has_value()) spec.suffix_ids.push_back(*v.eos);
  return spec;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeGgufTokenizer(const GgufVocab& vocab) {
  KVSERVE_ASSIGN_OR_RETURN(HfBpeSpec spec, GgufTokenizerSpec(vocab));
  return MakeHfBpeTokenizer(std::move(spec));
}

}  // namespace kvserve::engine
