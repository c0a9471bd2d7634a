// Whitespace handling as transformers' jinja2 environment does it:
// trim_blocks and lstrip_blocks on, explicit -/+ controls, trailing newline
// dropped, newlines normalized.
#include "chat/jinja/lexer.h"
#include "gtest/gtest.h"
#include "tests/unit/chat/jinja_test_util.h"

namespace kvserve::chat::jinja {
namespace {

TEST(JinjaLexer, TrimBlocksRemovesOneNewlineAfterABlockTag) {
  EXPECT_EQ(R("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(R("{% if true %}\n\nA{% endif %}"), "\nA");  // only one newline
  EXPECT_EQ(R("{{ 'x' }}\nA"), "x\nA");                  // not after {{ }}
  EXPECT_EQ(R("{# c #}\nA"), "A");                       // comments too
}

TEST(JinjaLexer, LstripBlocksRemovesIndentBeforeBlockTagsOnly) {
  EXPECT_EQ(R("  {% if true %}A{% endif %}"), "A");
  EXPECT_EQ(R("x\n    {% if true %}\n    A\n    {% endif %}\ny"), "x\n    A\ny");
  EXPECT_EQ(R("x {% if true %}A{% endif %}"), "x A");  // text before the tag on its line
  EXPECT_EQ(R("  {{ 'v' }}"), "  v");                  // never before {{
  EXPECT_EQ(R("\t{# c #}A"), "A");
}

TEST(JinjaLexer, ExplicitControls) {
  EXPECT_EQ(R("a  \n {{- 'b' -}} \n  c"), "abc");
  EXPECT_EQ(R("a\n\n{%- if true -%}\n\n b {%- endif %}"), "ab");
  EXPECT_EQ(R("a {#- c -#}  b"), "ab");
  EXPECT_EQ(R("  {%+ if true %}A{% endif %}"), "  A");  // + keeps the indent
  EXPECT_EQ(R("{% if true +%}\nA{% endif %}"), "\nA");  // +%} keeps the newline
}

TEST(JinjaLexer, NewlinesAndTrailingNewline) {
  EXPECT_EQ(R("a\n"), "a");  // keep_trailing_newline=False drops one
  EXPECT_EQ(R("a\n\n"), "a\n");
  EXPECT_EQ(R("a\r\nb\rc"), "a\nb\nc");
  EXPECT_EQ(R("{% if true %}\r\nA{% endif %}"), "A");
}

TEST(JinjaLexer, StringLiteralsAndNumbers) {
  EXPECT_EQ(R(R"({{ 'a\nb' ~ "\t" ~ '\'' ~ "\"" ~ '\u00e9\x41' }})"), "a\nb\t'\"éA");
  EXPECT_EQ(R("{{ 'a' \"b\" 'c' }}"), "abc");
  EXPECT_EQ(R("{{ 1_000 + 1 }} {{ 1.5e2 }} {{ 2E-1 }}"), "1001 150.0 0.2");
  EXPECT_EQ(R("{{ '}}' ~ '%}' }}"), "}}%}");
  EXPECT_EQ(R("{{ {'a': {'b': 1}}['a']['b'] }}"), "1");  // }} inside a dict literal
}

TEST(JinjaLexer, RawBlocks) {
  EXPECT_EQ(R("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(R("a {%- raw -%} \n {{ x }} \n {%- endraw -%} \n b"), "a{{ x }}b");
  EXPECT_EQ(R("{% raw %}\nx\n  {% endraw %}\ny"), "\nx\ny");  // lstrip before endraw, trim after
  EXPECT_EQ(R("\n{% raw %}never closed"), "ERROR line 2: unterminated raw block");
}

TEST(JinjaLexer, ErrorsNameTheLine) {
  EXPECT_EQ(R("a\n{{ 'unterminated }}"), "ERROR line 2: unterminated string");
  EXPECT_EQ(R("a\nb\n{% if x"), "ERROR line 3: unterminated {% tag");
  EXPECT_EQ(R("{# never closed"), "ERROR line 1: unterminated comment");
  EXPECT_EQ(R("\n{{ a $ b }}"), "ERROR line 2: unexpected character '$'");
}

TEST(JinjaLexer, TokensCarryLines) {
  const std::vector<Token> tokens = Lex("a\n{{ x\n + y }}");
  ASSERT_GE(tokens.size(), 6u);
  EXPECT_EQ(tokens[0].kind, Token::Kind::kData);
  EXPECT_EQ(tokens[0].text, "a\n");
  EXPECT_EQ(tokens[2].text, "x");
  EXPECT_EQ(tokens[2].line, 2);
  EXPECT_EQ(tokens[3].text, "+");
  EXPECT_EQ(tokens[3].line, 3);
  EXPECT_EQ(tokens.back().kind, Token::Kind::kEof);
}

}  // namespace
}  // namespace kvserve::chat::jinja
