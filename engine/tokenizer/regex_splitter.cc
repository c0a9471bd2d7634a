#include "engine/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace kvserve::engine {

struct RegexSplitter::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

namespace {

std::string PcreMessage(int error) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(error, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Frees a match data block on scope exit.
struct MatchData {
  pcre2_match_data* data;
  ~MatchData() { pcre2_match_data_free(data); }
};

// Unicode White_Space, which \s means in Oniguruma (the engine of Hugging
// Face tokenizers). PCRE2's \s with UCP differs: it also matches U+180E
// MONGOLIAN VOWEL SEPARATOR (no longer a space since Unicode 6.3).
constexpr char kWhiteSpace[] =
    R"(\t\n\x{0B}\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F})"
    R"(\x{205F}\x{3000})";

// Rewrites \s to [White_Space] and \S to [^White_Space]. Inside a character
// class \s becomes the list of White_Space; \S there is left to PCRE2 (a
// class cannot subtract), which differs from Oniguruma only at U+180E.
std::string RewriteWhitespaceClasses(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : absl::StrCat("[", kWhiteSpace, "]");
      } else if (e == 'S' && !in_class) {
        out += absl::StrCat("[^", kWhiteSpace, "]");
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

absl::StatusOr<RegexSplitter> RegexSplitter::Create(std::string_view pattern, bool literal) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_LITERAL does not combine with PCRE2_UCP (nor does it need it).
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  const std::string source = literal ? std::string(pattern) : RewriteWhitespaceClasses(pattern);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot compile regex \"", std::string(pattern),
                                                   "\" at offset ", offset, ": ",
                                                   PcreMessage(error)));
  }
  auto owned = std::make_shared<Code>();
  owned->code = code;
  // JIT is an optimisation only; without it pcre2_match interprets.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return RegexSplitter(std::move(owned));
}

absl::Status RegexSplitter::SplitIsolated(std::string_view text,
                                          std::vector<std::string_view>* pieces) const {
  MatchData md{pcre2_match_data_create_from_pattern(code_->code, nullptr)};
  if (md.data == nullptr) return absl::ResourceExhaustedError("pcre2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t gap_start = 0;  // end of the last piece appended
  size_t search = 0;     // where the next match attempt starts
  while (search < text.size()) {
    const int rc = pcre2_match(code_->code, subject, text.size(), search, PCRE2_NO_UTF_CHECK,
                               md.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return absl::InternalError(absl::StrCat("regex match: ", PcreMessage(rc)));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
    const size_t start = ov[0];
    const size_t end = ov[1];
    if (start == end) {
      // Empty match: step over one code point and look again.
      search = start + 1;
      while (search < text.size() && (static_cast<unsigned char>(text[search]) & 0xC0) == 0x80) {
        ++search;
      }
      continue;
    }
    if (start > gap_start) pieces->push_back(text.substr(gap_start, start - gap_start));
    pieces->push_back(text.substr(start, end - start));
    gap_start = search = end;
  }
  if (gap_start < text.size()) pieces->push_back(text.substr(gap_start));
  return absl::OkStatus();
}

}  // namespace kvserve::engine
