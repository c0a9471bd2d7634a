#include "chat/jinja/lexer.h"

#include <cctype>
#include <cstdint>
#include <optional>
#include <utility>

#include "chat/jinja/value.h"

namespace kvserve::chat::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string RStrip(const std::string& s) {
  size_t end = s.size();
  while (end > 0 && IsSpace(s[end - 1])) --end;
  return s.substr(0, end);
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> Run() {
    // jinja2 first normalizes "\r\n" and "\r" to "\n", then drops one
    // trailing newline of the template (keep_trailing_newline=False).
    std::string norm;
    norm.reserve(src_.size());
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\r') {
        norm += '\n';
        if (i + 1 < src_.size() && src_[i + 1] == '\n') ++i;
      } else {
        norm += src_[i];
      }
    }
    src_ = std::move(norm);
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    bool line_starting = true;  // the previous match ended a line (for lstrip_blocks)
    while (pos_ < src_.size()) {
      size_t tag = FindTagStart(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      const int text_line = line_;
      Advance(tag);
      if (tag == src_.size()) {
        Emit(Token::Kind::kData, text, text_line);
        break;
      }
      const char type = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      TrimBeforeTag(sign, type != '{', line_starting, &text);
      Emit(Token::Kind::kData, text, text_line);
      Advance(tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0));
      if (type == '%' && LexRaw(&line_starting)) continue;
      if (type == '#') {
        line_starting = LexCommentEnd();
      } else {
        line_starting = LexTag(type == '%');
      }
    }
    tokens_.push_back({Token::Kind::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  void Advance(size_t to) {
    for (; pos_ < to; ++pos_) {
      if (src_[pos_] == '\n') ++line_;
    }
  }

  void Emit(Token::Kind kind, std::string text, int line) {
    if (kind == Token::Kind::kData && text.empty()) return;
    tokens_.push_back({kind, std::move(text), line});
  }

  // Whitespace before a tag: "-" strips it all; otherwise lstrip_blocks drops
  // spaces and tabs between the line start and a block or comment tag.
  static void TrimBeforeTag(char sign, bool block_or_comment, bool line_starting,
                            std::string* text) {
    if (sign == '-') {
      *text = RStrip(*text);
    } else if (sign != '+' && block_or_comment) {
      const size_t nl = text->rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        if (text->find_first_not_of(" \t", l_pos) == std::string::npos) text->resize(l_pos);
      }
    }
  }

  // At p just inside "{%": the keyword `word` then "%}", "-%}" or (allow_plus) "+%}"?
  // Returns the end sign ('-', '+' or ' ') and the offset past the tag.
  std::optional<std::pair<char, size_t>> MatchKeywordTag(size_t p, const char* word,
                                                         bool allow_plus) const {
    const std::string w(word);
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, w.size(), w) != 0) return std::nullopt;
    p += w.size();
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, 2, "%}") == 0) return std::make_pair(' ', p + 2);
    if (src_.compare(p, 3, "-%}") == 0) return std::make_pair('-', p + 3);
    if (allow_plus && src_.compare(p, 3, "+%}") == 0) return std::make_pair('+', p + 3);
    return std::nullopt;
  }

  // {% raw %}...{% endraw %} (pos_ just inside "{%", its sign consumed): the
  // body is data, whitespace controls applied as jinja2 does (no trim_blocks
  // after "raw", trim_blocks after "endraw"). False when the tag is not raw.
  bool LexRaw(bool* line_starting) {
    const auto begin = MatchKeywordTag(pos_, "raw", /*allow_plus=*/false);  // as jinja2's regex
    if (!begin) return false;
    const int start_line = line_;
    Advance(begin->second);
    if (begin->first == '-') {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) Advance(pos_ + 1);
    }
    bool body_line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    for (size_t at = src_.find("{%", pos_); at != std::string::npos; at = src_.find("{%", at + 2)) {
      const char sign = at + 2 < src_.size() ? src_[at + 2] : '\0';
      const size_t inner = at + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      const auto end = MatchKeywordTag(inner, "endraw", /*allow_plus=*/true);
      if (!end) continue;
      std::string body = src_.substr(pos_, at - pos_);
      TrimBeforeTag(sign, true, body_line_starting, &body);
      Emit(Token::Kind::kData, std::move(body), line_);
      Advance(end->second);
      *line_starting = AfterTagEnd(end->first == '-', end->first != '+');
      return true;
    }
    throw Error("unterminated raw block", start_line);
  }

  // After a tag end: "-" strips all following whitespace; otherwise, for
  // blocks and comments, trim_blocks removes one newline. Returns whether the
  // consumed text ended with a newline.
  bool AfterTagEnd(bool strip, bool trim_newline) {
    bool ended_newline = false;
    if (strip) {
      size_t p = pos_;
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      ended_newline = p > pos_ && src_[p - 1] == '\n';
      Advance(p);
    } else if (trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      Advance(pos_ + 1);
      ended_newline = true;
    }
    return ended_newline;
  }

  bool LexCommentEnd() {
    const int start_line = line_;
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) throw Error("unterminated comment", start_line);
    const bool strip = end > pos_ && src_[end - 1] == '-';
    const bool keep = end > pos_ && src_[end - 1] == '+';  // "+#}" disables trim_blocks
    Advance(end + 2);
    return AfterTagEnd(strip, /*trim_newline=*/!keep);
  }

  // Tokens of one {{ ... }} or {% ... %}; returns line_starting for what follows.
  bool LexTag(bool block) {
    const int start_line = line_;
    Emit(block ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin, "", line_);
    // Open brackets and their lines: "}}" inside a dict literal does not end the tag.
    std::vector<std::pair<char, int>> open;
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) Advance(pos_ + 1);
      if (pos_ >= src_.size()) {
        if (!open.empty()) {
          throw Error(std::string("unclosed '") + open.back().first + "'", open.back().second);
        }
        throw Error(block ? "unterminated {% tag" : "unterminated {{ tag", start_line);
      }
      const size_t depth = open.size();
      const char* end = block ? "%}" : "}}";
      if (depth == 0) {
        if (src_.compare(pos_, 2, end) == 0 || src_.compare(pos_, 3, std::string("-") + end) == 0) {
          const bool strip = src_[pos_] == '-';
          const bool keep = src_[pos_] == '+';  // "+%}" disables trim_blocks
          Emit(block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, "", line_);
          Advance(pos_ + (strip || keep ? 3 : 2));
          return AfterTagEnd(strip, block && !keep);
        }
        if (block && src_.compare(pos_, 3, "+%}") == 0) {
          Emit(Token::Kind::kBlockEnd, "", line_);
          Advance(pos_ + 3);
          return false;
        }
      }
      const char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t p = pos_;
        while (p < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
          ++p;
        Emit(Token::Kind::kName, src_.substr(pos_, p - pos_), line_);
        Advance(p);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        LexNumber();
      } else if (c == '\'' || c == '"') {
        LexString(c);
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "<", ">", "+",
                                     "-",  "*",  "/",  "%",  "~",  "|",  ".", ",", ":",
                                     "(",  ")",  "[",  "]",  "{",  "}",  "="};
        bool found = false;
        for (const char* op : kOps) {
          const std::string s(op);
          if (src_.compare(pos_, s.size(), s) == 0) {
            if (s == "(" || s == "[" || s == "{") open.emplace_back(s[0], line_);
            if ((s == ")" || s == "]" || s == "}") && !open.empty()) {
              const char want = open.back().first == '('   ? ')'
                                : open.back().first == '[' ? ']'
                                                           : '}';
              if (s[0] != want) {
                throw Error("unexpected '" + s + "', expected '" + std::string(1, want) + "'",
                            line_);
              }
              open.pop_back();
            }
            Emit(Token::Kind::kOp, s, line_);
            Advance(pos_ + s.size());
            found = true;
            break;
          }
        }
        if (!found) throw Error(std::string("unexpected character '") + c + "'", line_);
      }
    }
  }

  void LexNumber() {
    size_t p = pos_;
    std::string digits;
    const auto take_digits = [&] {
      while (p < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) {
        if (src_[p] != '_') digits += src_[p];
        ++p;
      }
    };
    take_digits();
    bool is_float = false;
    if (p + 1 < src_.size() && src_[p] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
      is_float = true;
      digits += src_[p++];
      take_digits();
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        digits += src_.substr(p, q - p);
        p = q;
        take_digits();
      }
    }
    Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInt, digits, line_);
    Advance(p);
  }

  // A string literal with Python's backslash escapes.
  void LexString(char quote) {
    const int start_line = line_;
    std::string out;
    size_t p = pos_ + 1;
    while (true) {
      if (p >= src_.size()) throw Error("unterminated string", start_line);
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) throw Error("unterminated string", start_line);
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case 'a':
          out += '\a';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          if (p + n > src_.size())
            throw Error("truncated \\" + std::string(1, e) + " escape", line_);
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k) {
            const char h = src_[p + k];
            if (!std::isxdigit(static_cast<unsigned char>(h))) {
              throw Error("truncated \\" + std::string(1, e) + " escape", line_);
            }
            cp = cp * 16 + (std::isdigit(static_cast<unsigned char>(h))
                                ? h - '0'
                                : (std::tolower(h) - 'a' + 10));
          }
          p += n;
          out += EncodeUtf8(static_cast<char32_t>(cp));
          break;
        }
        default:  // unknown escapes keep the backslash, as Python does
          out += '\\';
          out += e;
      }
    }
    Emit(Token::Kind::kString, std::move(out), start_line);
    Advance(p + 1);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> Lex(const std::string& source) { return Lexer(source).Run(); }

}  // namespace kvserve::chat::jinja
