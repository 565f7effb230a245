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

// Every operator at the int64 edges, against Jinja2's own output (tests/gen_jinja_number_cases.py):
// Python's result where it fits int64, else an error naming the operation; never a wrapped value
// or a SIGFPE (INT64_MIN % -1, INT64_MIN // -1, divisibleby(-1)).
struct NumberCase {
  const char* expr;
  const char* want;  // the rendered text, or a part of the error message
  bool error;
};
constexpr NumberCase kNumberCases[] = {
#include "jinja_number_cases.inc"
};

TEST(JinjaNumbers, ArithmeticAtTheInt64EdgesMatchesPythonOrFails) {
  size_t n_errors = 0;
  for (const NumberCase& c : kNumberCases) {
    const std::string src = std::string("{{ (") + c.expr + ")|string }}";
    if (c.error) {
      ++n_errors;
      const std::string e = error_of(src);
      EXPECT_NE(e.find(c.want), std::string::npos) << c.expr << " -> " << e;
      EXPECT_EQ(e.find('\n'), std::string::npos) << c.expr << ": one line";
    } else {
      const std::string e = error_of(src);
      EXPECT_EQ(e, "(no error)") << c.expr;
      if (e == "(no error)") {
        EXPECT_EQ(render(src), c.want) << c.expr;
      }
    }
  }
  EXPECT_GT(n_errors, 100u);  // the table covers both outcomes
  EXPECT_GT(std::size(kNumberCases) - n_errors, 400u);
}

TEST(JinjaNumbers, OverflowErrorsNameTheOperationAndOperands) {
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("9223372036854775807 + 1 does not fit"), std::string::npos);
  EXPECT_NE(error_of("{{ 2 ** 64 }}").find("2 ** 64 does not fit"), std::string::npos);
  EXPECT_NE(error_of("{{ (-9223372036854775807 - 1) // -1 }}").find("-9223372036854775808 // -1"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 % 0 }}").find("division by zero: 1 % 0"), std::string::npos);
  EXPECT_NE(error_of("{{ 1e300|int }}").find("int: 1e+300 is out of the 64-bit integer range"), std::string::npos)
      << error_of("{{ 1e300|int }}");
  EXPECT_NE(error_of("{{ 'ff'|int(base=37) }}").find("int: base must be 0 or 2..36, not 37"), std::string::npos);
  // The template line is named.
  EXPECT_NE(error_of("\n\n{{ 9223372036854775807 * 2 }}").find("line 3"), std::string::npos);
}

// Python's slice semantics (slice.indices clamping, negative steps) for every combination of
// start, stop and step at the int64 edges and around the length, against Jinja2's output
// (tests/gen_jinja_slice_cases.py). A huge step once overflowed the index loop and read out of
// bounds; [1,2,3,4,5][4::HUGE] gave the reverse list.
struct SliceCase {
  const char* slice;
  const char* list;  // [1, 2, 3, 4, 5][slice]
  const char* str;   // 'h\u00e9llo'[slice] (code points)
};
constexpr SliceCase kSliceCases[] = {
#include "jinja_slice_cases.inc"
};

TEST(JinjaSlices, SliceWithHugeOrEdgeBoundsMatchesPython) {
  const nlohmann::ordered_json ctx = {{"xs", {1, 2, 3, 4, 5}}, {"s", "h\u00e9llo"}};
  for (const SliceCase& c : kSliceCases) {
    EXPECT_EQ(render(std::string("{{ xs[") + c.slice + "] }}", ctx), c.list) << c.slice;
    EXPECT_EQ(render(std::string("{{ s[") + c.slice + "] }}", ctx), c.str) << c.slice;
  }
  EXPECT_GT(std::size(kSliceCases), 1000u);
}

TEST(JinjaSlices, SliceWithHugeStepIsBounded) {
  const nlohmann::ordered_json msgs = {{"messages", {{{"role", "system"}}, {{"role", "user"}}, {{"role", "assistant"}}}}};
  EXPECT_EQ(render("{% for m in messages[1::9223372036854775807] %}{{ m.role }};{% endfor %}", msgs), "user;");
  EXPECT_EQ(render("{{ [1,2,3,4,5][4::9223372036854775807] }}"), "[5]");
  EXPECT_EQ(render("{{ [][::-9223372036854775807] }}"), "[]");
  EXPECT_NE(error_of("{{ [1][::0] }}").find("slice step cannot be zero"), std::string::npos);
}

// Filters and functions that make a value of a size the template chooses check the size against
// the output limit (8 MiB) or the list limit before allocating, and name the filter and the size.
TEST(JinjaSizes, SizeTakingFiltersCheckTheLimitBeforeAllocating) {
  auto fails_with = [](const std::string& src, const std::string& want) {
    const std::string e = error_of(src);
    EXPECT_NE(e.find(want), std::string::npos) << src << " -> " << e;
  };
  fails_with("{{ 'a\nb'|indent(9223372036854775807) }}", "indent: width 9223372036854775807 on 1 lines would exceed");
  fails_with("{{ 'a\nb'|indent(100000000)|length }}", "indent: width 100000000 on 1 lines would exceed");
  fails_with("{{ [1]|tojson(indent=100000000)|length }}", "tojson: indent=100000000 exceeds the 8388608-byte output limit");
  // Once truncated to int: 2^32 + 2 printed with indent 2.
  fails_with("{{ [1]|tojson(indent=4294967298) }}", "tojson: indent=4294967298 exceeds");
  fails_with("{{ ('x' * 4000000) * 3 }}", "string repetition: 3 copies of 4000000 bytes exceed 8388608 bytes");
  fails_with("{{ (['x' * 4000000] * 50)|length }}", "list repetition: 50 copies of 1 items (4000000 bytes of strings)");
  fails_with("{{ ([0] * 1000) * 1001 }}", "list repetition: 1001 copies of 1000 items");
  fails_with("{{ range(9223372036854775807)|length }}", "range(0, 9223372036854775807, 1) has more than 1000000 items");
  fails_with("{{ ('x' * 8000000)|replace('x', 'yy')|length }}", "replace: the result would exceed 8388608 bytes");
  fails_with("{{ ('x' * 8000000).replace('x', 'yy')|length }}", "replace: the result would exceed 8388608 bytes");
  fails_with("{% set s = 'x' * 4000000 %}{{ [s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s]|join|length }}",
             "join: the result would exceed 8388608 bytes");
  fails_with("{% set s = 'x' * 4000000 %}{{ ''.join([s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s])|length }}",
             "str.join: the result would exceed 8388608 bytes");
  // A list holding one 4 MB string, referenced 100 times: printing it would make 400 MB.
  fails_with("{% set a = ['x' * 4000000] %}{{ ([a] * 100)|string|length }}", "printing a value: the text would exceed");
  fails_with("{% set a = ['x' * 4000000] %}{{ ([a] * 100)|tojson|length }}", "tojson: the text would exceed");
  // Indexing a long string in a loop scans it each time: the scans count as work.
  fails_with("{% set s = 'x' * 8000000 %}{% for i in range(1000000) %}{{ s[-1] }}{% endfor %}", "too much work");
  // Building large strings in a loop counts as work too (this loop ran for about 30 hours).
  fails_with("{% for i in range(1000) %}{% for j in range(1000) %}{% set y = 'x' * 8000000 %}{% endfor %}{% endfor %}",
             "too much work");
  EXPECT_EQ(render("{{ ('ab' * 3000000)|length }}|{{ ('abc' * 5)[-4:] }}"), "6000000|cabc");
}

TEST(JinjaSizes, EmptyOperandsRepeatInstantly) {
  EXPECT_EQ(render("[{{ '' * 9223372036854775807 }}]"), "[]");
  EXPECT_EQ(render("{{ [] * 9223372036854775807 }}"), "[]");
  EXPECT_EQ(render("{{ 'ab' * -3 }}|{{ [1] * 0 }}|{{ [1, 2] * 2 }}"), "|[]|[1, 2, 1, 2]");
}

TEST(JinjaSizes, RangeAtTheInt64EdgesMatchesPython) {
  // Python: list(range(...)) for each.
  EXPECT_EQ(render("{{ range(9223372036854775806, 9223372036854775807, 10)|list }}"), "[9223372036854775806]");
  EXPECT_EQ(render("{{ range(-9223372036854775807 - 1, 9223372036854775807, 9223372036854775807)|list }}"),
            "[-9223372036854775808, -1, 9223372036854775806]");
  EXPECT_EQ(render("{{ range(9223372036854775807, -9223372036854775807 - 1, -9223372036854775807 - 1)|list }}"),
            "[9223372036854775807, -1]");
  EXPECT_EQ(render("{{ range(5, 0, -2)|list }}{{ range(0)|list }}{{ range(3, 1)|list }}"), "[5, 3, 1][][]");
}

TEST(JinjaSizes, ReplaceAndIndentFollowPython) {
  EXPECT_EQ(render("{{ 'ab'|replace('', '-') }} {{ 'ab'.replace('', '-', 2) }} {{ 'h\u00e9llo'|replace('', '|') }}"),
            "-a-b- -a-b |h|\u00e9|l|l|o|");
  EXPECT_EQ(render("{{ 'aXbXc'.replace('X', '--', 1) }} {{ 'aaa'|replace('a', 'aa') }}"), "a--bXc aaaaaa");
  // Jinja2 3.1.6: indent(-2) pads with ' ' * -2 == ''; json.dumps(indent=-1) inserts newlines only.
  EXPECT_EQ(render("{{ 'a\nb'|indent(-2) }}|{{ [1]|tojson(indent=-1) }}|{{ 'x'|indent(3, true) }}|{{ 'a\n\nb\n'|indent(2, true) }}"),
            "a\nb|[\n1\n]|   x|  a\n\n  b\n");
}

}  // namespace
}  // namespace minfer::jinja
