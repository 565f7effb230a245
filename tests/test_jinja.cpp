// The Jinja subset: each test renders a small template and compares with the text Jinja
// (with transformers' trim_blocks/lstrip_blocks environment) produces by its documented rules.
#include <gtest/gtest.h>

#include "chat/jinja.h"
#include "core/error.h"

namespace minfer::jinja {
namespace {

std::string render(std::string_view src, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  return Template(src).render(from_json(ctx));
}

std::string error_of(std::string_view src, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  try {
    render(src, ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Jinja, PrintsExpressionsAndLiterals) {
  EXPECT_EQ(render("a{{ 1 + 2 }}b{{ 'x' ~ 3 }}{{ \"q\" }}"), "a3bx3q");
  EXPECT_EQ(render("{{ name }}!", {{"name", "Qwen"}}), "Qwen!");
  EXPECT_EQ(render("[{{ missing }}]"), "[]");
  EXPECT_EQ(render("{{ true }} {{ none }} {{ 2.5 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 1 / 2 }}"),
            "True None 2.5 3 -4 1 0.5");
  EXPECT_EQ(render("{{ [1, 'a'] }} {{ {'k': 'v'} }}"), "[1, 'a'] {'k': 'v'}");
}

TEST(Jinja, StringEscapesInLiterals) {
  EXPECT_EQ(render(R"({{ 'a\nb\t\'c\'' }})"), "a\nb\t'c'");
}

TEST(Jinja, IfElifElse) {
  const char* t = "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(t, {{"x", 1}}), "one");
  EXPECT_EQ(render(t, {{"x", 2}}), "two");
  EXPECT_EQ(render(t, {{"x", 5}}), "many");
}

TEST(Jinja, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index0 }}{{ x }}{% if loop.first %}F{% endif %}"
                   "{% if loop.last %}L{% endif %}{{ loop.length }},{% endfor %}",
                   {{"xs", {"a", "b", "c"}}}),
            "0aF3,1b3,2cL3,");
  EXPECT_EQ(render("{% for x in xs if x > 1 %}{{ loop.index }}:{{ x }} {% endfor %}", {{"xs", {1, 2, 3}}}),
            "1:2 2:3 ");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"a", 1}, {"b", 2}}}}),
            "a=1;b=2;");
  EXPECT_EQ(render("{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}"
                   "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
}

TEST(Jinja, SetInsideALoopDoesNotLeakButNamespaceDoes) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1,2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1,2] %}{% set ns.x = i %}{% endfor %}{{ ns.x }}"),
            "2");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set s %}in{{ 1 }}{% endset %}[{{ s }}]"), "[in1]");
}

TEST(Jinja, WhitespaceControlTrimAndLstripBlocks) {
  // trim_blocks removes the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  // "-" strips all whitespace on that side, newlines included.
  EXPECT_EQ(render("a  \n{{- 'b' -}}  \n c"), "abc");
  EXPECT_EQ(render("x {#- comment -#} y"), "xy");
  // An expression tag does not trim the newline after it.
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");
  // "+" keeps the indentation that lstrip_blocks would remove.
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
}

TEST(Jinja, StringMethodsAndSlicing) {
  EXPECT_EQ(render("{{ s.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
                   {{"s", "<think>\nplan\n</think>\n\nanswer"}}),
            "plan");
  EXPECT_EQ(render("{{ s.strip() }}|{{ s.startswith(' a') }}|{{ s.endswith(('x', 'c ')) }}", {{"s", " abc "}}),
            "abc|True|True");
  EXPECT_EQ(render("{{ xs[::-1] }} {{ xs[1:] }} {{ 'héllo'[1:3] }} {{ xs[-1] }}", {{"xs", {1, 2, 3}}}),
            "[3, 2, 1] [2, 3] él 3");
  EXPECT_EQ(render("{{ 'a,b'.split(',') }} {{ 'x y  z'.split() }} {{ '-'.join(['a','b']) }}"),
            "['a', 'b'] ['x', 'y', 'z'] a-b");
  EXPECT_EQ(render("{{ 'AbC'.lower() }}{{ 'abc'.upper() }}{{ 'a-b'.replace('-', '+') }}"), "abcABCa+b");
}

TEST(Jinja, FiltersAndTests) {
  EXPECT_EQ(render("{{ xs | length }} {{ xs | first }} {{ xs | last }} {{ xs | join('/') }}",
                   {{"xs", {"a", "b"}}}),
            "2 a b a/b");
  EXPECT_EQ(render("{{ missing | default('d') }} {{ '' | default('e', true) }} {{ '  t ' | trim }}"),
            "d e t");
  EXPECT_EQ(render("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }}",
                   {{"ms", {{{"role", "user"}, {"content", "q"}}, {{"role", "assistant"}, {"content", "a"}}}}}),
            "['q']");
  EXPECT_EQ(render("{{ x is defined }} {{ y is defined }} {{ x is string }} {{ n is number }} "
                   "{{ none is none }} {{ f is false }} {{ x is not none }}",
                   {{"x", "s"}, {"n", 3}, {"f", false}}),
            "True False True True True True True");
  EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 in [1,2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"),
            "True True True True");
  EXPECT_EQ(render("{{ 1 if x else 2 }}{{ x or 'fallback' }}{{ 0 and 1 }}", {{"x", ""}}), "2fallback0");
}

TEST(Jinja, TojsonFollowsPythonJsonDumps) {
  nlohmann::ordered_json v = {{"name", "f"}, {"args", {{"a", 1}, {"b", {true, nullptr, 1.5}}}}, {"s", "é\"\n"}};
  EXPECT_EQ(render("{{ v | tojson }}", {{"v", v}}),
            "{\"name\": \"f\", \"args\": {\"a\": 1, \"b\": [true, null, 1.5]}, \"s\": \"é\\\"\\n\"}");
  EXPECT_EQ(render("{{ [1] | tojson(indent=2) }}"), "[\n  1\n]");
}

TEST(Jinja, UnsupportedConstructsAreErrorsThatNameThem) {
  EXPECT_NE(error_of("{% macro m() %}x{% endmacro %}").find("unsupported statement '{% macro %}'"), std::string::npos);
  EXPECT_NE(error_of("{% include 'x' %}").find("'{% include %}'"), std::string::npos);
  EXPECT_NE(error_of("{{ x | frobnicate }}").find("unsupported filter 'frobnicate'"), std::string::npos);
  EXPECT_NE(error_of("{{ x is frob }}").find("unsupported test 'frob'"), std::string::npos);
  EXPECT_NE(error_of("\n{% if x %}").find("line 2: missing {% elif or else or endif %}"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("unsupported operand types for +: string and integer"),
            std::string::npos);
  EXPECT_NE(error_of("{{ foo.bar }}").find("'foo' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ raise_exception('no tools here') }}").find("no tools here"), std::string::npos);
  EXPECT_NE(error_of("{{ 'unterminated }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of("{% set x = 1 %}{{ x.y.z }}").find("'y' is undefined"), std::string::npos);
}

TEST(Jinja, HostileNestingIsAnErrorNotACrash) {
  std::string deep(5000, '(');
  EXPECT_THROW(Template("{{ " + deep + "1" + std::string(5000, ')') + " }}"), Error);
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  EXPECT_THROW(Template{blocks}, Error);
}

}  // namespace
}  // namespace minfer::jinja
