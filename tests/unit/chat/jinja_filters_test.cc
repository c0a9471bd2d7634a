// Filters, tests and the Python methods templates call.
#include "gtest/gtest.h"
#include "tests/unit/chat/jinja_test_util.h"

namespace kvserve::chat::jinja {
namespace {

TEST(JinjaFilters, Strings) {
  const std::string ctx = R"({"s": "  hello wOrld. "})";
  EXPECT_EQ(
      R("[{{ s|trim }}][{{ s|upper }}][{{ s|lower }}][{{ s|capitalize }}][{{ s|title }}]", ctx),
      "[hello wOrld.][  HELLO WORLD. ][  hello world. ][  hello world. ][  Hello World. ]");
  EXPECT_EQ(R("{{ s|length }} {{ s|count }} {{ s|replace('l', 'L') }} {{ s|trim('. ') }}", ctx),
            "15 15   heLLo wOrLd.  hello wOrld");
  EXPECT_EQ(R("{{ 'éa'|upper }} {{ 'ÉA'|lower }} {{ 'é'|length }}"), "ÉA éa 1");
  EXPECT_EQ(R("{{ 'x-y z(a'|title }}"), "X-Y Z(A");
}

TEST(JinjaFilters, Sequences) {
  const std::string ctx = R"({"l": [3, 1, 2, 3], "w": ["b", "A", "a"]})";
  EXPECT_EQ(R("{{ l|join(',') }} {{ l|first }} {{ l|last }} {{ l|length }} {{ l|sort }} {{ "
              "l|unique|list }}",
              ctx),
            "3,1,2,3 3 3 4 [1, 2, 3, 3] [3, 1, 2]");
  EXPECT_EQ(R("{{ l|sort(reverse=true) }} {{ w|sort }} {{ w|sort(case_sensitive=true) }} {{ "
              "w|unique|list }}",
              ctx),
            "[3, 3, 2, 1] ['A', 'a', 'b'] ['A', 'a', 'b'] ['b', 'A']");
  EXPECT_EQ(
      R("{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ l|map('string')|join }} {{ l|sum "
        "}} "
        "{{ l|min }} {{ l|max }} {{ l|reverse|list }} {{ 'ab'|list }} {{ []|first is defined }}",
        ctx),
      "[3, 1, 3] [2] 3123 9 1 3 [3, 2, 1, 3] ['a', 'b'] False");
}

TEST(JinjaFilters, Attributes) {
  const std::string ctx = R"({"m": [{"role": "user", "c": "b", "x": {"n": 1}},
                                    {"role": "assistant", "c": "a", "t": [1]},
                                    {"role": "user", "c": "c"}]})";
  EXPECT_EQ(
      R("{{ m|selectattr('role', 'equalto', 'user')|map(attribute='c')|join('/') }} "
        "{{ m|rejectattr('role', 'eq', 'user')|list|length }} {{ m|selectattr('t')|list|length }} "
        "{{ m|selectattr('t', 'defined')|list|length }} {{ m|map(attribute='x.n', default=0)|list "
        "}} "
        "{{ m|sort(attribute='c')|map(attribute='role')|join(',') }} {{ m|join(',', attribute='c') "
        "}}",
        ctx),
      "b/c 1 1 1 [1, 0, 0] assistant,user,user b,a,c");
}

TEST(JinjaFilters, DefaultAndConversions) {
  EXPECT_EQ(
      R("{{ x|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ 0|d(5) }}"),
      "d None d 0");
  EXPECT_EQ(R("{{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ "
              "'2.5'|float }} "
              "{{ 3|float }} {{ 5|string ~ 'x' }}"),
            "42 4 0 7 3 2.5 3.0 5x");
  EXPECT_EQ(R("{{ -3|abs }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(0, "
              "'ceil') }} "
              "{{ 7|round }}"),
            "3 2.57 2.0 4.0 3.0 7");
  EXPECT_EQ(R("{{ d|items|list|length }} {{ d|items|first|first }} {{ d|keys }} {{ d|values }} {{ "
              "x|items|list }}",
              R"({"d": {"b": 1, "a": 2}})"),
            "2 b ['b', 'a'] [1, 2] []");
}

TEST(JinjaFilters, ToJsonIsPythonsJsonDumps) {
  const std::string ctx = R"({"v": {"z": [1, 2.5, "ü\"", null, true, {}], "a": "<&>\n\u0001"}})";
  EXPECT_EQ(R("{{ v|tojson }}", ctx),
            R"({"z": [1, 2.5, "ü\"", null, true, {}], "a": "<&>\n\u0001"})");
  EXPECT_EQ(R("{{ v|tojson(sort_keys=true) }}", ctx),
            R"({"a": "<&>\n\u0001", "z": [1, 2.5, "ü\"", null, true, {}]})");
  EXPECT_EQ(R("{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}"),
            "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
  EXPECT_EQ(R("{{ [1, 2]|tojson(separators=[',', ':']) }} {{ 1.0|tojson }} {{ 'é'|tojson }}"),
            "[1,2] 1.0 \"é\"");
  EXPECT_EQ(R("{{ missing|tojson }}").substr(0, 13), "ERROR line 1:");
}

TEST(JinjaFilters, Indent) {
  const std::string ctx = R"({"s": "a\n\nb"})";
  EXPECT_EQ(R("{{ s|indent }}", ctx), "a\n\n    b");
  EXPECT_EQ(R("{{ s|indent(2, true) }}", ctx), "  a\n\n  b");
  EXPECT_EQ(R("{{ s|indent(width='> ', blank=true) }}", ctx), "a\n> \n> b");
}

TEST(JinjaTests, TypesAndValues) {
  const std::string ctx = R"({"i": 3, "f": 1.5, "b": true, "n": null, "s": "s", "d": {}, "l": []})";
  EXPECT_EQ(
      R("{{ i is defined }}{{ x is undefined }}{{ n is none }}{{ s is string }}{{ d is mapping }}"
        "{{ l is iterable }}{{ s is iterable }}{{ i is iterable }}{{ l is sequence }}",
        ctx),
      "TrueTrueTrueTrueTrueTrueTrueFalseTrue");
  EXPECT_EQ(
      R("{{ i is number }}{{ f is number }}{{ b is number }}{{ s is number }}{{ b is boolean }}"
        "{{ i is integer }}{{ b is integer }}{{ f is float }}",
        ctx),
      "TrueTrueTrueFalseTrueTrueFalseTrue");
  EXPECT_EQ(
      R("{{ i is odd }}{{ i is even }}{{ i is divisibleby 3 }}{{ i is divisibleby(2) }}{{ i is eq "
        "3 }}"
        "{{ i is in [3] }}{{ n is not none }}{{ b is true }}{{ b is false }}{{ 'A' is upper }}",
        ctx),
      "TrueFalseTrueFalseTrueTrueFalseTrueFalseTrue");
}

TEST(JinjaMethods, Strings) {
  const std::string ctx = R"({"s": " hello world "})";
  EXPECT_EQ(R("[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ s.strip(' hd') }}]", ctx),
            "[hello world][hello world ][ hello world][ello worl]");
  EXPECT_EQ(
      R("{{ s.split() }} {{ s.split('l') }} {{ s.split('l', 1) }} {{ 'a,b'.split(',')[-1] }}", ctx),
      "['hello', 'world'] [' he', '', 'o wor', 'd '] [' he', 'lo world '] b");
  EXPECT_EQ(
      R("{{ s.startswith(' h') }} {{ s.endswith(('x', ' ')) }} {{ s.upper() }} {{ s.title() }}",
        ctx),
      "True True  HELLO WORLD   Hello World ");
  EXPECT_EQ(R("{{ s.replace('l', 'L', 2) }}|{{ s.find('o') }}|{{ s.count('l') }}|{{ '-'.join(['a', "
              "'b']) }}",
              ctx),
            " heLLo world |5|3|a-b");
  EXPECT_EQ(R("{{ '{} and {x}'.format(1, x=2) }} {{ '1st x'.title() }} {{ 'aB c'.capitalize() }}"),
            "1 and 2 1St X Ab c");
}

TEST(JinjaMethods, DictsAndLoop) {
  const std::string ctx = R"({"d": {"b": 2, "a": 1}})";
  EXPECT_EQ(R("{{ d.get('a') }} {{ d.get('z', 'dflt') }} {{ d.get('z') }} {{ d.keys()|list }} "
              "{{ d.values()|list }} {{ d.items()|list|length }}",
              ctx),
            "1 dflt None ['b', 'a'] [2, 1] 2");
  EXPECT_EQ(R("{% for i in range(3) %}{{ loop.cycle('x', 'y') }}{% endfor %}"), "xyx");
  EXPECT_EQ(R("{{ 'a'.nope() }}"), "ERROR line 1: 'str object' has no attribute 'nope'");
}

}  // namespace
}  // namespace kvserve::chat::jinja
