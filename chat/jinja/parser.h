// Parses the lexer's tokens into statements. Unknown tags, filters and tests
// are errors here (as jinja2 reports them when compiling), naming the line.
#ifndef KVSERVE_CHAT_JINJA_PARSER_H_
#define KVSERVE_CHAT_JINJA_PARSER_H_

#include <vector>

#include "chat/jinja/ast.h"
#include "chat/jinja/lexer.h"

namespace kvserve::chat::jinja {

// Throws jinja::Error with the line of the offending token.
Body Parse(const std::vector<Token>& tokens);

}  // namespace kvserve::chat::jinja

#endif  // KVSERVE_CHAT_JINJA_PARSER_H_
