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

std::string chain(const std::string& head, const std::string& link, int links) {
  std::string s = head;
  for (int i = 0; i < links; ++i) s += link;
  return s;
}

// Left-associative chains are built by loops in the parser, so only a bound on the tree height
// keeps evaluation (and destruction) from recursing 30,000 levels deep and overflowing the stack.
TEST(Jinja, LongExpressionChainsAreAnErrorNotAStackOverflow) {
  const std::string too_deep = "too long or nested too deeply";
  for (int links : {30000, 200000}) {
    EXPECT_NE(error_of("{{ " + chain("1", "+1", links) + " }}").find(too_deep), std::string::npos);
    EXPECT_NE(error_of("{{ " + chain("'a'", "~'a'", links) + " }}").find(too_deep), std::string::npos);
    EXPECT_NE(error_of("{{ " + chain("x", ".y", links) + " }}").find(too_deep), std::string::npos);
    EXPECT_NE(error_of("{{ " + chain("' a '", "|trim", links) + " }}").find(too_deep), std::string::npos);
    EXPECT_NE(error_of("{{ " + chain("true", " and true", links) + " }}").find(too_deep), std::string::npos);
    EXPECT_NE(error_of("{% set x = " + chain("1", "+1", links) + " %}").find(too_deep), std::string::npos);
  }
  // Chains far longer than real templates use still render.
  EXPECT_EQ(render("{{ " + chain("1", "+1", 499) + " }}"), "500");
  EXPECT_EQ(render("{{ " + chain("'a'", "~'a'", 499) + " }}"), std::string(500, 'a'));
  EXPECT_EQ(render("{{ " + chain("' a '", "|trim", 400) + " }}"), "a");
}

// Values kept by set that contain themselves or nest without bound would make printing and
// freeing them overflow the stack.
TEST(Jinja, SelfContainingOrDeeplyNestedValuesAreAnErrorNotACrash) {
  const std::string cycle = "{% set ns = namespace(x=none) %}{% set ns.x = ns %}{{ ns }}";
  EXPECT_NE(error_of(cycle).find("a namespace cannot contain itself"), std::string::npos) << error_of(cycle);
  const std::string indirect =
      "{% set ns = namespace(x=none) %}{% set other = namespace(y=[ns]) %}{% set ns.x = other %}{{ ns }}";
  EXPECT_NE(error_of(indirect).find("a namespace cannot contain itself"), std::string::npos) << error_of(indirect);
  const std::string nest =
      "{% set ns = namespace(x=[]) %}{% for i in range(900000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|length }}";
  EXPECT_NE(error_of(nest).find("nested more than 100 levels"), std::string::npos) << error_of(nest);
  // Ordinary nesting is kept.
  EXPECT_EQ(render("{% set ns = namespace(x=[]) %}{% for i in range(3) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}"),
            "[[[[]]]]");
}

TEST(Jinja, RunawayLoopsStopAtTheWorkLimit) {
  const std::string nested =
      "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}";
  EXPECT_NE(error_of(nested).find("too much work"), std::string::npos) << error_of(nested);
  const std::string loop_filter = "{% for i in range(1000000) if i > 0 %}{% for j in range(1000000) if j %}"
                                  "{% endfor %}{% endfor %}";
  EXPECT_NE(error_of(loop_filter).find("too much work"), std::string::npos) << error_of(loop_filter);
  // 900,000 iterations of 64 bytes: 58 MB of text, stopped at the output limit.
  const std::string big = "{% for i in range(900000) %}" + std::string(64, 'x') + "{% endfor %}";
  EXPECT_NE(error_of(big).find("exceeds"), std::string::npos) << error_of(big);
  // A string grown by a loop copies it each time: the copies count as work.
  const std::string grow = "{% set ns = namespace(s='') %}{% for i in range(200000) %}"
                           "{% set ns.s = ns.s ~ '" + std::string(64, 'y') + "' %}{% endfor %}{{ ns.s|length }}";
  EXPECT_NE(error_of(grow).find("too much work"), std::string::npos) << error_of(grow);
  // One string past the limit.
  const std::string huge = "{{ ('x' * 5000000) ~ ('y' * 5000000) }}";
  EXPECT_NE(error_of(huge).find("a string longer than 8388608 bytes"), std::string::npos) << error_of(huge);
  // Ordinary loops are untouched: 1000 x 100 iterations render.
  EXPECT_EQ(render("{% for i in range(1000) %}{% for j in range(100) %}{% endfor %}{% endfor %}ok"), "ok");
  // The limit is per render: the same Template renders again after a large render.
  const Template t("{% for i in range(900000) %}{% endfor %}done");
  EXPECT_EQ(t.render(from_json(nlohmann::ordered_json::object())), "done");
  EXPECT_EQ(t.render(from_json(nlohmann::ordered_json::object())), "done");
}

}  // namespace
}  // namespace minfer::jinja
