// Jinja lexer with the environment transformers renders chat templates in:
// trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False, plus
// the explicit controls {%- -%} {{- -}} {#- -#} and {%+ (no lstrip).
#ifndef KVSERVE_CHAT_JINJA_LEXER_H_
#define KVSERVE_CHAT_JINJA_LEXER_H_

#include <string>
#include <vector>

namespace kvserve::chat::jinja {

struct Token {
  enum class Kind {
    kData,        // template text, whitespace control already applied
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,
    kString,  // text: the decoded literal
    kInt,
    kFloat,
    kOp,  // text: the operator, e.g. "==", "(", "|"
    kEof,
  };
  Kind kind;
  std::string text;
  int line;
};

// Throws jinja::Error (with the line) on an unterminated tag or string, or a
// character no token starts with.
std::vector<Token> Lex(const std::string& source);

}  // namespace kvserve::chat::jinja

#endif  // KVSERVE_CHAT_JINJA_LEXER_H_
