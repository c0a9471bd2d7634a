// tokenizer.json / tokenizer_config.json -> HfBpeSpec. Everything that the
// two BPE pipelines (hf_bpe_tokenizer.h) do not implement is refused here,
// by name.
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/tokenizer/auto_tokenizer_rules.h"
#include "engine/tokenizer/hf_bpe_tokenizer.h"
#include "engine/tokenizer/hf_json_sentencepiece.h"

namespace kvserve::engine {
namespace {

using hf_json::BoolOr;
using hf_json::ParseNormalizer;
using hf_json::ParseSentencePieceDecoder;
using hf_json::ParseSentencePiecePreTokenizer;
using hf_json::TypeOf;
using hf_json::Unsupported;
using nlohmann::json;

// The pattern ByteLevel(use_regex=true) splits with (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Ids index dense tables; anything this large is a broken file, not a vocab.
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

absl::StatusOr<int32_t> TokenId(const json& j) {
  // A float must not reach get<int64_t>() (out of range is undefined
  // behaviour; found by tests/fuzz/tokenizer_json_fuzz.cc).
  if (!j.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", j.dump(), " is not an integer"));
  }
  const int64_t id = j.get<int64_t>();
  if (id < 0 || id >= kMaxTokenId) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", id, " out of range"));
  }
  return static_cast<int32_t>(id);
}

// A string field that must be null, absent or empty.
absl::Status RequireUnset(const json& model, const char* key) {
  auto it = model.find(key);
  if (it == model.end() || it->is_null()) return absl::OkStatus();
  if (it->is_string() && it->get<std::string>().empty()) return absl::OkStatus();
  return Unsupported("BPE option", absl::StrCat(key, " = ", it->dump()));
}

absl::Status ParseModel(const json& model, HfBpeSpec* spec) {
  if (!model.is_object()) return absl::InvalidArgumentError("\"model\" is missing");
  const std::string type = model.contains("type") ? TypeOf(model) : "BPE";
  if (type != "BPE") {
    return Unsupported("model.type", absl::StrCat("\"", type, "\" (only BPE is supported)"));
  }
  if (auto it = model.find("dropout");
      it != model.end() && !it->is_null() && it->get<double>() != 0.0) {
    return Unsupported("BPE option", absl::StrCat("dropout = ", it->dump()));
  }
  spec->bpe.byte_fallback = BoolOr(model, "byte_fallback", false);
  if (auto s = RequireUnset(model, "continuing_subword_prefix"); !s.ok()) return s;
  if (auto s = RequireUnset(model, "end_of_word_suffix"); !s.ok()) return s;
  spec->bpe.ignore_merges = BoolOr(model, "ignore_merges", false);
  spec->bpe.fuse_unk = BoolOr(model, "fuse_unk", false);
  if (auto it = model.find("unk_token"); it != model.end() && it->is_string()) {
    spec->bpe.unk_token = it->get<std::string>();
  }
  const json& vocab = model.at("vocab");
  if (!vocab.is_object()) return absl::InvalidArgumentError("model.vocab is not an object");
  spec->vocab.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    auto id = TokenId(id_json);
    if (!id.ok()) return id.status();
    spec->vocab.emplace(token, *id);
  }
  const json& merges = model.at("merges");
  spec->merges.reserve(merges.size());
  for (const json& m : merges) {
    if (m.is_string()) {
      // "a b": tokens never contain ' ' (it is shown as U+0120), so the first
      // space separates them.
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("bad merge \"", s, "\""));
      }
      spec->merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2) {
      spec->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return absl::InvalidArgumentError(absl::StrCat("bad merge ", m.dump()));
    }
  }
  return absl::OkStatus();
}

// Flattens nested Sequences into `steps`.
absl::Status FlattenPreTokenizer(const json& p, std::vector<const json*>* steps) {
  if (TypeOf(p) == "Sequence") {
    for (const json& child : p.at("pretokenizers")) {
      if (auto s = FlattenPreTokenizer(child, steps); !s.ok()) return s;
    }
  } else {
    steps->push_back(&p);
  }
  return absl::OkStatus();
}

absl::Status ParsePreTokenizer(const json& p, HfBpeSpec* spec) {
  std::vector<const json*> steps;
  if (!p.is_null()) {
    if (auto s = FlattenPreTokenizer(p, &steps); !s.ok()) return s;
  }
  bool byte_level = false;
  for (const json* step : steps) byte_level = byte_level || TypeOf(*step) == "ByteLevel";
  if (!byte_level) return ParseSentencePiecePreTokenizer(steps, spec);
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& step = *steps[i];
    const std::string type = TypeOf(step);
    const bool last = i + 1 == steps.size();
    if (type == "Split" && !last) {
      const std::string behavior = step.value("behavior", "Isolated");
      if (behavior != "Isolated") {
        return Unsupported("pre_tokenizer",
                           absl::StrCat("Split behavior \"", behavior, "\" (only Isolated)"));
      }
      if (BoolOr(step, "invert", false)) {
        return Unsupported("pre_tokenizer", "Split with invert = true");
      }
      const json& pattern = step.at("pattern");
      const bool literal = pattern.contains("String");
      const std::string text = literal ? pattern.at("String").get<std::string>()
                                       : pattern.at("Regex").get<std::string>();
      auto splitter = RegexSplitter::Create(text, literal);
      if (!splitter.ok()) return splitter.status();
      spec->splits.push_back(*std::move(splitter));
    } else if (type == "ByteLevel" && last) {
      spec->add_prefix_space = BoolOr(step, "add_prefix_space", true);
      spec->byte_level_regex = BoolOr(step, "use_regex", true);
      if (spec->byte_level_regex) {
        auto splitter = RegexSplitter::Create(kGpt2Pattern, /*literal=*/false);
        if (!splitter.ok()) return splitter.status();
        spec->splits.push_back(*std::move(splitter));
      }
    } else {
      return Unsupported("pre_tokenizer",
                         absl::StrCat("\"", type, "\" at step ", i,
                                      " (supported: Split(Isolated)... followed by ByteLevel)"));
    }
  }
  if (steps.empty()) return Unsupported("pre_tokenizer", "empty Sequence");
  return absl::OkStatus();
}

// Id of a token named by the post-processor or tokenizer_config.json.
std::optional<int32_t> FindTokenId(const HfBpeSpec& spec, const std::string& content) {
  for (const AddedToken& t : spec.added_tokens) {
    if (t.content == content) return t.id;
  }
  auto it = spec.vocab.find(content);
  if (it != spec.vocab.end()) return it->second;
  return std::nullopt;
}

absl::Status ParsePostProcessor(const json& p, HfBpeSpec* spec) {
  if (p.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(p);
  if (type == "ByteLevel") return absl::OkStatus();  // only changes offsets
  if (type == "Sequence") {
    for (const json& child : p.at("processors")) {
      if (auto s = ParsePostProcessor(child, spec); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    // {"cls": [token, id], "sep": [token, id]}: cls $A sep.
    absl::StatusOr<int32_t> cls = TokenId(p.at("cls").at(1));
    if (!cls.ok()) return cls.status();
    absl::StatusOr<int32_t> sep = TokenId(p.at("sep").at(1));
    if (!sep.ok()) return sep.status();
    spec->prefix_ids.push_back(*cls);
    spec->suffix_ids.push_back(*sep);
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return Unsupported("post_processor", absl::StrCat("\"", type, "\""));
  }
  const json& special = p.value("special_tokens", json::object());
  bool seen_a = false;
  for (const json& piece : p.at("single")) {
    if (piece.contains("Sequence")) {
      const std::string seq = piece.at("Sequence").at("id").get<std::string>();
      if (seq != "A" || seen_a) {
        return Unsupported("post_processor", absl::StrCat("TemplateProcessing single template "
                                                          "with sequence ",
                                                          seq));
      }
      seen_a = true;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    std::vector<int32_t> ids;
    if (auto it = special.find(name); it != special.end()) {
      ids = it->at("ids").get<std::vector<int32_t>>();
    } else if (auto id = FindTokenId(*spec, name); id.has_value()) {
      ids.push_back(*id);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("TemplateProcessing names unknown special token \"", name, "\""));
    }
    std::vector<int32_t>& target = seen_a ? spec->suffix_ids : spec->prefix_ids;
    target.insert(target.end(), ids.begin(), ids.end());
  }
  return absl::OkStatus();
}

absl::Status ParseByteLevelDecoder(const json& d) {
  const std::string type = d.is_null() ? "null" : TypeOf(d);
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence" && d.at("decoders").size() == 1) {
    return ParseByteLevelDecoder(d.at("decoders")[0]);
  }
  return Unsupported("decoder",
                     absl::StrCat("\"", type, "\" (a ByteLevel pre_tokenizer needs ByteLevel)"));
}

absl::Status ParseDecoder(const json& d, HfBpeSpec* spec) {
  if (spec->byte_level) {
    if (spec->bpe.byte_fallback) {
      return Unsupported("BPE option", "byte_fallback = true with a ByteLevel pre_tokenizer");
    }
    return ParseByteLevelDecoder(d);
  }
  return ParseSentencePieceDecoder(d, &spec->decoder);
}

absl::Status ParseAddedTokens(const json& added, HfBpeSpec* spec) {
  if (added.is_null()) return absl::OkStatus();
  for (const json& t : added) {
    AddedToken token;
    KVSERVE_ASSIGN_OR_RETURN(token.id, TokenId(t.at("id")));
    token.content = t.at("content").get<std::string>();
    token.single_word = BoolOr(t, "single_word", false);
    token.lstrip = BoolOr(t, "lstrip", false);
    token.rstrip = BoolOr(t, "rstrip", false);
    token.special = BoolOr(t, "special", false);
    token.normalized = BoolOr(t, "normalized", !token.special);
    spec->added_tokens.push_back(std::move(token));
  }
  return absl::OkStatus();
}

json Field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? json() : *it;
}

// bos_token / eos_token: a string, {"content": ...}, or null.
std::optional<std::string> TokenName(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content")) return j.at("content").get<std::string>();
  return std::nullopt;
}

}  // namespace

absl::StatusOr<HfBpeSpec> ParseHfBpeSpec(const std::string& json_text) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("not a valid JSON object");
  }
  HfBpeSpec spec;
  try {
    // Order matters: the post-processor looks up added tokens.
    if (auto s = ParseModel(Field(j, "model"), &spec); !s.ok()) return s;
    if (auto s = ParseAddedTokens(Field(j, "added_tokens"), &spec); !s.ok()) return s;
    if (auto s = ParseNormalizer(Field(j, "normalizer"), &spec); !s.ok()) return s;
    if (auto s = ParsePreTokenizer(Field(j, "pre_tokenizer"), &spec); !s.ok()) return s;
    if (auto s = ParsePostProcessor(Field(j, "post_processor"), &spec); !s.ok()) return s;
    if (auto s = ParseDecoder(Field(j, "decoder"), &spec); !s.ok()) return s;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed tokenizer.json: ", e.what()));
  }
  if (!spec.prefix_ids.empty()) spec.bos = spec.prefix_ids.front();
  if (!spec.suffix_ids.empty()) spec.eos = spec.suffix_ids.back();
  return spec;
}

absl::Status ApplyTokenizerConfig(const std::string& json_text, const std::string& model_type,
                                  HfBpeSpec* spec) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("not a valid JSON object");
  }
  try {
    const json tokenizer_class = Field(j, "tokenizer_class");
    if (tokenizer_class.is_string() &&
        UsesLlamaTokenizerClass(tokenizer_class.get<std::string>(), model_type, spec->byte_level)) {
      const json prefix_space = Field(j, "add_prefix_space");
      ApplyLlamaTokenizerClass(BoolOr(j, "legacy", false),
                               prefix_space.is_boolean() ? prefix_space.get<bool>() : true, spec);
    }
    // The config names the tokens the model was trained to start and stop
    // with; it wins over what the post-processor suggests. Names that are
    // not tokens are ignored.
    std::optional<int32_t> bos, eos;
    if (auto name = TokenName(Field(j, "bos_token")); name.has_value()) {
      bos = FindTokenId(*spec, *name);
      if (bos.has_value()) spec->bos = bos;
    }
    if (auto name = TokenName(Field(j, "eos_token")); name.has_value()) {
      eos = FindTokenId(*spec, *name);
      if (eos.has_value()) spec->eos = eos;
    }
    // Either flag present: transformers rebuilds the post-processor as
    // "[bos] $A [eos]" (TokenizersBackend.update_post_processor).
    if (j.contains("add_bos_token") || j.contains("add_eos_token")) {
      spec->prefix_ids.clear();
      spec->suffix_ids.clear();
      if (BoolOr(j, "add_bos_token", false) && bos.has_value()) spec->prefix_ids.push_back(*bos);
      if (BoolOr(j, "add_eos_token", false) && eos.has_value()) spec->suffix_ids.push_back(*eos);
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed tokenizer_config.json: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine
