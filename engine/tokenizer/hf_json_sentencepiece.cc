#include "engine/tokenizer/hf_json_sentencepiece.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "engine/tokenizer/utf8.h"

namespace kvserve::engine::hf_json {

using nlohmann::json;

std::string TypeOf(const json& j) {
  if (!j.is_object()) return j.dump();
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string("(no type)");
}

absl::Status Unsupported(const std::string& what, const std::string& detail) {
  return absl::UnimplementedError(absl::StrCat("unsupported ", what, ": ", detail));
}

bool BoolOr(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

namespace {

// A {"String": s} pattern (Replace, Split); Regex patterns are refused.
absl::StatusOr<std::string> LiteralPattern(const json& pattern, const std::string& where) {
  if (pattern.is_object() && pattern.contains("String")) {
    std::string s = pattern.at("String").get<std::string>();
    if (!s.empty()) return s;
  }
  return Unsupported(where, absl::StrCat("pattern ", pattern.dump(), " (only a non-empty String)"));
}

// "always" (the default) | "first" | "never". The older add_prefix_space
// flag may only say false next to "never" (tokenizers refuses the file
// otherwise, even when prepend_scheme is absent).
absl::StatusOr<MetaspaceOptions::Prepend> PrependScheme(const json& j, const std::string& where) {
  MetaspaceOptions::Prepend prepend = MetaspaceOptions::Prepend::kAlways;
  if (auto it = j.find("prepend_scheme"); it != j.end() && !it->is_null()) {
    const std::string scheme = it->get<std::string>();
    if (scheme == "first") {
      prepend = MetaspaceOptions::Prepend::kFirst;
    } else if (scheme == "never") {
      prepend = MetaspaceOptions::Prepend::kNever;
    } else if (scheme != "always") {
      return Unsupported(where, absl::StrCat("Metaspace prepend_scheme \"", scheme, "\""));
    }
  }
  if (!BoolOr(j, "add_prefix_space", true) && prepend != MetaspaceOptions::Prepend::kNever) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": Metaspace add_prefix_space = false does not match prepend_scheme"));
  }
  return prepend;
}

// Metaspace replacement: one code point.
absl::StatusOr<std::string> Replacement(const json& j, const std::string& where) {
  const std::string r = j.value("replacement", std::string("\xE2\x96\x81"));
  size_t pos = 0;
  if (r.empty() || !utf8::IsValid(r) || (utf8::DecodeNext(r, &pos), pos != r.size())) {
    return Unsupported(where, absl::StrCat("Metaspace replacement \"", r, "\" (one character)"));
  }
  return r;
}

}  // namespace

absl::Status ParseNormalizer(const json& n, HfBpeSpec* spec) {
  if (n.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(n);
  using Kind = NormalizerStep::Kind;
  if (type == "NFC" || type == "NFKC") {
    spec->normalizer.push_back({type == "NFC" ? Kind::kNfc : Kind::kNfkc, "", ""});
    return absl::OkStatus();
  }
  if (type == "Prepend") {
    spec->normalizer.push_back({Kind::kPrepend, n.at("prepend").get<std::string>(), ""});
    return absl::OkStatus();
  }
  if (type == "Replace") {
    auto pattern = LiteralPattern(n.at("pattern"), "normalizer Replace");
    if (!pattern.ok()) return pattern.status();
    spec->normalizer.push_back({Kind::kReplace, *pattern, n.at("content").get<std::string>()});
    return absl::OkStatus();
  }
  if (type == "Sequence") {
    for (const json& child : n.at("normalizers")) {
      if (auto s = ParseNormalizer(child, spec); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  return Unsupported("normalizer",
                     absl::StrCat("\"", type,
                                  "\" (supported: null, NFC, NFKC, Prepend, Replace(String), "
                                  "Sequence of those)"));
}

// The SentencePiece pipeline's pre-tokenizer: nothing, Metaspace, or a
// literal Split merged with the previous piece.
absl::Status ParseSentencePiecePreTokenizer(const std::vector<const json*>& steps,
                                            HfBpeSpec* spec) {
  spec->byte_level = false;
  if (steps.empty()) return absl::OkStatus();
  const json& step = *steps[0];
  const std::string type = TypeOf(step);
  if (steps.size() > 1) {
    return Unsupported("pre_tokenizer",
                       absl::StrCat("Sequence of ", steps.size(),
                                    " steps without ByteLevel (supported: one Metaspace or "
                                    "Split)"));
  }
  if (type == "Metaspace") {
    MetaspaceOptions options;
    KVSERVE_ASSIGN_OR_RETURN(options.replacement, Replacement(step, "pre_tokenizer"));
    KVSERVE_ASSIGN_OR_RETURN(options.prepend, PrependScheme(step, "pre_tokenizer"));
    options.split = BoolOr(step, "split", true);
    spec->metaspace = options;
    return absl::OkStatus();
  }
  if (type == "Split") {
    const std::string behavior = step.value("behavior", "Isolated");
    if (behavior != "MergedWithPrevious" || BoolOr(step, "invert", false)) {
      return Unsupported("pre_tokenizer",
                         absl::StrCat("Split behavior \"", behavior,
                                      "\" without ByteLevel (only MergedWithPrevious, "
                                      "invert false)"));
    }
    KVSERVE_ASSIGN_OR_RETURN(spec->split_merged_with_previous,
                             LiteralPattern(step.at("pattern"), "pre_tokenizer Split"));
    return absl::OkStatus();
  }
  return Unsupported("pre_tokenizer",
                     absl::StrCat("\"", type,
                                  "\" (supported: ByteLevel pipelines, null, Metaspace, "
                                  "Split(String, MergedWithPrevious))"));
}

// The chain of hf_decoder.h, in its order: per-token steps, ByteFallback,
// Fuse, Strip.
absl::Status ParseSentencePieceDecoder(const json& d, HfDecoderSpec* spec) {
  if (d.is_null()) {
    return Unsupported("decoder", "null (tokens would be joined with spaces)");
  }
  std::vector<json> chain;
  if (TypeOf(d) == "Sequence") {
    for (const json& child : d.at("decoders")) chain.push_back(child);
  } else {
    chain.push_back(d);
  }
  enum Stage { kPerToken, kByteFallback, kFuse, kStrip } stage = kPerToken;
  auto order_error = [](const std::string& type) {
    return Unsupported("decoder", absl::StrCat("\"", type,
                                               "\" out of order (supported: Replace/Metaspace..., "
                                               "ByteFallback, Fuse, Strip)"));
  };
  for (const json& step : chain) {
    const std::string type = TypeOf(step);
    if (type == "Replace" || type == "Metaspace") {
      if (stage != kPerToken) return order_error(type);
      HfDecoderSpec::Step s;
      if (type == "Replace") {
        KVSERVE_ASSIGN_OR_RETURN(s.pattern, LiteralPattern(step.at("pattern"), "decoder Replace"));
        s.content = step.at("content").get<std::string>();
      } else {
        s.metaspace = true;
        KVSERVE_ASSIGN_OR_RETURN(s.pattern, Replacement(step, "decoder"));
        auto prepend = PrependScheme(step, "decoder");
        if (!prepend.ok()) return prepend.status();
        s.metaspace_drop_first = *prepend != MetaspaceOptions::Prepend::kNever;
      }
      spec->per_token.push_back(std::move(s));
    } else if (type == "ByteFallback") {
      if (stage >= kByteFallback) return order_error(type);
      spec->byte_fallback = true;
      stage = kByteFallback;
    } else if (type == "Fuse") {
      if (stage >= kFuse) return order_error(type);
      stage = kFuse;
    } else if (type == "Strip") {
      if (stage != kFuse) return order_error("Strip (without Fuse before it)");
      const std::string content = step.value("content", std::string(" "));
      size_t pos = 0;
      if (content.empty() || !utf8::IsValid(content) ||
          (utf8::DecodeNext(content, &pos), pos != content.size())) {
        return Unsupported("decoder", absl::StrCat("Strip content \"", content, "\""));
      }
      if (step.value("stop", 0) != 0) {
        return Unsupported("decoder", absl::StrCat("Strip stop = ", step.at("stop").dump()));
      }
      spec->strip_content = content;
      spec->strip_start = step.value("start", 0);
      if (spec->strip_start < 0) return Unsupported("decoder", "Strip start < 0");
      stage = kStrip;
    } else {
      return Unsupported("decoder", absl::StrCat("\"", type,
                                                 "\" (supported: ByteLevel, or Replace, Metaspace, "
                                                 "ByteFallback, Fuse, Strip)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine::hf_json
