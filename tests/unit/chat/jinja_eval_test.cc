// The evaluator: statements, scoping, expressions, undefined, errors. The
// expected texts are what jinja2 renders (tests/oracle/test_chat_template.py
// checks the same constructs against jinja2 itself).
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/unit/chat/jinja_test_util.h"

namespace kvserve::chat::jinja {
namespace {

TEST(JinjaEval, IfElifElse) {
  const std::string t = "{% if x > 2 %}big{% elif x == 2 %}two{% else %}small{% endif %}";
  EXPECT_EQ(R(t, R"({"x": 3})"), "big");
  EXPECT_EQ(R(t, R"({"x": 2.0})"), "two");
  EXPECT_EQ(R(t, R"({"x": 1})"), "small");
}

TEST(JinjaEval, ForLoopVariables) {
  EXPECT_EQ(
      R("{% for i in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
        "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
        R"({"l": ["a", "b"]})"),
      "1021TrueFalse2|2110FalseTrue2|");
  EXPECT_EQ(R("{% for i in l %}{{ loop.previtem }}<{{ i }}>{{ loop.nextitem }},{% endfor %}",
              R"({"l": [1, 2, 3]})"),
            "<1>2,1<2>3,2<3>,");
}

TEST(JinjaEval, ForElseFilterAndUnpacking) {
  const std::string t =
      "{% for i in l if i is odd %}{{ i }}{{ loop.length }} {% else %}none{% endfor %}";
  EXPECT_EQ(R(t, R"({"l": [1, 2, 3]})"), "12 32 ");
  EXPECT_EQ(R(t, R"({"l": [2]})"), "none");
  EXPECT_EQ(R(t, "{}"), "none");  // undefined iterates as empty
  EXPECT_EQ(
      R("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", R"({"d": {"b": 1, "a": 2}})"),
      "b=1;a=2;");  // insertion order, as Python dicts
  EXPECT_EQ(R("{% for c in 'hé' %}[{{ c }}]{% endfor %}"), "[h][é]");
}

TEST(JinjaEval, BreakContinue) {
  EXPECT_EQ(R("{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}"
              "{% break %}{% endif %}{{ i }}{% endfor %}"),
            "023");
  EXPECT_EQ(R("{% break %}"), "ERROR line 1: 'break' outside a for loop");
  // jinja2's else runs unless an iteration reached the end of the body.
  EXPECT_EQ(R("{% for i in [1, 2] %}{{ i }}{% continue %}{% else %}E{% endfor %}"), "12E");
  EXPECT_EQ(
      R("{% for i in [1, 2] %}{{ i }}{% if i == 2 %}{% break %}{% endif %}{% else %}E{% endfor %}"),
      "12");
}

TEST(JinjaEval, ScopingFollowsJinja) {
  // set inside a loop body is per iteration; set inside if is not scoped.
  EXPECT_EQ(R("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"),
            "231");
  EXPECT_EQ(R("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(
      R("{% set messages = messages[1:] %}{{ messages|length }}", R"({"messages": [1, 2, 3]})"),
      "2");
}

TEST(JinjaEval, Namespace) {
  EXPECT_EQ(
      R("{% set ns = namespace(n=0, found=false) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i "
        "%}"
        "{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.found }} "
        "{{ ns.other is defined }}"),
      "6 True False");
  EXPECT_EQ(R("{% set x = 1 %}\n{% set x.a = 2 %}"),
            "ERROR line 2: cannot assign attribute on non-namespace object 'x'");
}

TEST(JinjaEval, MacrosAndSetBlocks) {
  EXPECT_EQ(R("{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ "
              "m(b=3, a=4) }}"
              "{{ m() }}"),
            "<1B><12><43><B>");
  EXPECT_EQ(
      R("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"),
      "321");
  EXPECT_EQ(R("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").substr(0, 13), "ERROR line 1:");
  EXPECT_EQ(R("{% set b %}x{{ 1 + 1 }}{% endset %}[{{ b }}]"), "[x2]");
  EXPECT_EQ(R("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(R("{% macro m(a) %}{% endmacro %}\n{{ m(1, b=2) }}"),
            "ERROR line 2: macro 'm' takes no keyword argument 'b'");
  EXPECT_EQ(R("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
            "ERROR line 1: macro 'm' takes not more than 1 argument(s)");
}

TEST(JinjaEval, DeeplyNestedDataIsAnErrorNotACrash) {
  Json deep = 1;
  for (int i = 0; i < 5000; ++i) deep = Json::array({std::move(deep)});
  const Template t("{{ v }}|{{ v|tojson }}|{{ v == v }}");
  for (const char* src : {"{{ v }}", "{{ v|tojson }}", "{{ v == v }}"}) {
    try {
      Template(src).Render(Json{{"v", deep}});
      ADD_FAILURE() << src;
    } catch (const Error& e) {
      EXPECT_EQ(e.message(), "data nested too deeply") << src;
      EXPECT_EQ(e.line(), 1);
    }
  }
}

TEST(JinjaEval, RendersConcurrently) {
  const Template t(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{% macro tag(r) %}<{{ r }}>{% endmacro %}{{ tag(m.role) }}{{ m.content|trim }}{% endfor "
      "%}{{ ns.n }}");
  const auto context = [](int i) {
    Json messages = Json::array();
    for (int k = 0; k <= i % 7; ++k) {
      std::string role = std::to_string(k);  // GCC 12's -Wrestrict misfires on "r" + std::string
      role.insert(0, 1, 'r');
      messages.push_back({{"role", role}, {"content", " c "}});
    }
    return Json{{"messages", messages}};
  };
  std::vector<std::string> expected;
  for (int i = 0; i < 7; ++i) expected.push_back(t.Render(context(i)));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int i = 0; i < 300; ++i) {
        if (t.Render(context(i + th)) != expected[(i + th) % 7]) ++mismatches[th];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
  EXPECT_EQ(expected[1], "<r0>c<r1>c2");
}

TEST(JinjaEval, Operators) {
  EXPECT_EQ(R("{{ 1 + 2 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 3 }} {{ "
              "4 / 2 }}"),
            "7 3.5 3 -4 2 8 2.0");
  EXPECT_EQ(
      R("{{ 'a' ~ 1 ~ none ~ true ~ missing }} {{ 'x' + 'y' }} {{ 'ab' * 2 }} {{ [1] + [2] }}"),
      "a1NoneTrue xy abab [1, 2]");
  EXPECT_EQ(R("{{ 1 == 1.0 }} {{ true == 1 }} {{ 'b' > 'a' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"),
            "True True True True False");
  EXPECT_EQ(R("{{ 'at' in 'cat' }} {{ 2 not in [1, 2] }} {{ 'k' in d }} {{ 'z' in missing }}",
              R"({"d": {"k": 0}})"),
            "True False True False");
  EXPECT_EQ(R("{{ x and y }}|{{ x or y }}|{{ not x }}|{{ 'a' if x else 'b' }}|{{ 'a' if x }}",
              R"({"x": 0, "y": "s"})"),
            "0|s|True|b|");
  EXPECT_EQ(R("{{ 1 / 0 }}"), "ERROR line 1: division by zero");
  EXPECT_EQ(R("{{ 3 ** 13 }} {{ (-2) ** 63 }} {{ 2 ** 0 }} {{ 2 ** -1 }}"),
            "1594323 -9223372036854775808 1 0.5");
  EXPECT_EQ(R("{{ (2 ** 1000000000000) > 0 }}"), "True");  // no loop of 10^12 steps
  EXPECT_EQ(R("{{ ('x' * 1000000000000)|length }}"), "ERROR line 1: repetition result too large");
  EXPECT_EQ(R("{{ range(100001)|length }}").substr(0, 31), "ERROR line 1: Range too big. Th");
  EXPECT_EQ(R("\n{{ 'a' + 1 }}"),
            "ERROR line 2: unsupported operand type(s) for +: 'str' and 'int'");
  EXPECT_EQ(R("{{ 1 < 'a' }}"),
            "ERROR line 1: '<' not supported between instances of 'int' and 'str'");
}

TEST(JinjaEval, SlicingAndAccess) {
  const std::string ctx = R"({"s": "héllo", "l": [1, 2, 3, 4], "d": {"a": {"b": 1}}})";
  EXPECT_EQ(R("{{ s[1:] }} {{ s[:-1] }} {{ s[::-1] }} {{ s[::2] }} {{ s[-1] }}", ctx),
            "éllo héll olléh hlo o");
  EXPECT_EQ(R("{{ l[1:3] }} {{ l[-2:] }} {{ l[::-1] }} {{ l[9:] }} {{ l[-1] }} {{ l.0 }}", ctx),
            "[2, 3] [3, 4] [4, 3, 2, 1] [] 4 1");
  EXPECT_EQ(
      R("{{ d.a.b }} {{ d['a']['b'] }} [{{ d.x }}] {{ d.x is defined }} {{ l[9] is defined }}",
        ctx),
      "1 1 [] False False");
}

TEST(JinjaEval, UndefinedIsFalsyAndEmptyButAttributeAccessFails) {
  EXPECT_EQ(
      R("[{{ missing }}]{% if missing %}x{% endif %}{{ missing|length }}{{ missing is defined }}"),
      "[]0False");
  EXPECT_EQ(R("a\n{{ missing.attr }}"), "ERROR line 2: 'missing' is undefined");
  EXPECT_EQ(R("{{ d.nope.deeper }}", R"({"d": {}})"),
            "ERROR line 1: 'dict object' has no attribute 'nope'");
  EXPECT_EQ(R("{{ missing + 1 }}").substr(0, 13), "ERROR line 1:");
  EXPECT_EQ(R("{{ missing() }}"), "ERROR line 1: 'missing' is undefined");
}

TEST(JinjaEval, LiteralsAndRepr) {
  EXPECT_EQ(R("{{ [1, 'a', none, true, 1.0, [2]] }} {{ {'k': 'v', 'n': {'m': false}} }}"),
            "[1, 'a', None, True, 1.0, [2]] {'k': 'v', 'n': {'m': False}}");
  EXPECT_EQ(R("{{ [\"it's\", 'say \"hi\"', 'tab\\t'] }}"), "[\"it's\", 'say \"hi\"', 'tab\\t']");
  EXPECT_EQ(R("{{ 0.1 + 0.2 }} {{ 1e20 }} {{ -0.5 }} {{ 1e-5 }}"),
            "0.30000000000000004 1e+20 -0.5 1e-05");
}

TEST(JinjaEval, Globals) {
  EXPECT_EQ(R("{{ range(3) }} {{ range(1, 7, 2) }} {{ range(3, 0, -1) }} {{ dict(a=1) }}"),
            "[0, 1, 2] [1, 3, 5] [3, 2, 1] {'a': 1}");
  EXPECT_EQ(R("{{ strftime_now('%Y')|length }}"), "4");
  EXPECT_EQ(R("x\n{{ raise_exception('Roles must alternate') }}"), "RAISED: Roles must alternate");
  // The line of a raise_exception is kept for logs.
  try {
    Template("x\n\n{{ raise_exception('m') }}").Render(Json::object());
    FAIL();
  } catch (const RaisedError& e) {
    EXPECT_EQ(e.line(), 3);
  }
}

TEST(JinjaEval, ParseErrorsNameTheLine) {
  EXPECT_EQ(R("a\n{% if x %}\nb"),
            "ERROR line 3: unexpected end of template; expected 'elif' or 'else' or 'endif'");
  EXPECT_EQ(R("{{ x | nope }}"), "ERROR line 1: no filter named 'nope'");
  EXPECT_EQ(R("\n{{ x is nope }}"), "ERROR line 2: no test named 'nope'");
  EXPECT_EQ(R("a\n\n{% include 'x.html' %}"), "ERROR line 3: unknown or unsupported tag 'include'");
  EXPECT_EQ(R("{{ (1 }}"), "ERROR line 1: unexpected '}', expected ')'");
  EXPECT_EQ(R("{{ [1,\n 2 "), "ERROR line 1: unclosed '['");
  EXPECT_EQ(R("{{ 1 + }}"),
            "ERROR line 1: unexpected token in expression, got end of print statement");
  EXPECT_EQ(R("\n{{ f(1 2) }}"), "ERROR line 2: expected ',', got '2'");
  EXPECT_EQ(R("{% for x in %}{% endfor %}"),
            "ERROR line 1: unexpected token in expression, got end of statement block");
}

TEST(JinjaEval, FilterBlocks) {
  EXPECT_EQ(R("{% filter upper|trim %} a{{ 'b' }} {% endfilter %}!"), "AB!");
  EXPECT_EQ(R("\n{% filter nope %}x{% endfilter %}"), "ERROR line 2: no filter named 'nope'");
}

TEST(JinjaEval, GenerationBlockRendersItsBody) {
  EXPECT_EQ(R("{% generation %}a{{ 1 }}{% endgeneration %}"), "a1");
}

}  // namespace
}  // namespace kvserve::chat::jinja

namespace kvserve::chat::jinja {
namespace {

// Whatever a (checkpoint-supplied) template does, a render is bounded: nested
// loops and huge outputs stop with an error naming the line.
TEST(JinjaLimits, RenderWorkIsBounded) {
  EXPECT_EQ(R("\n{% for i in range(100000) %}{% for j in range(20) %}{% endfor %}{% endfor %}"),
            "ERROR line 2: the template ran more than 1,000,000 statements and loop iterations");
  EXPECT_EQ(R("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"),
            "ERROR line 1: the template rendered more than 64 MiB");
  EXPECT_EQ(R("{% for i in range(3) %}{{ i }}{% endfor %}"), "012");
}

}  // namespace
}  // namespace kvserve::chat::jinja
