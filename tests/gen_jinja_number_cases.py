#!/usr/bin/env python3
"""Writes tests/jinja_number_cases.inc: the expected result of every arithmetic operator, unary
minus, abs, divisibleby and sum at the int64 edges (INT64_MIN/MAX, -2..2), Python float division
rules, and the int/float filters, as Jinja2 renders them. Integer results outside int64 are
expected as errors (minfer's integers are 64-bit; Python's are unbounded).
Usage: python3 tests/gen_jinja_number_cases.py > tests/jinja_number_cases.inc (needs jinja2)."""
import jinja2, math
env = jinja2.Environment()
MIN, MAX = -2**63, 2**63-1
vals = {"(-9223372036854775807 - 1)": MIN, "(-9223372036854775807)": MIN+1, "-2": -2, "-1": -1, "0": 0, "1": 1, "2": 2, "9223372036854775806": MAX-1, "9223372036854775807": MAX}
def run(expr):
    try:
        r = env.from_string("{{ (" + expr + ")|string }}").render()
        # check int range via eval of python value
        try: v = env.compile_expression(expr)()
        except NameError: v = None
        if isinstance(v, int) and not isinstance(v, bool) and not (MIN <= v <= MAX):
            return ("ERR", "integer overflow")
        return ("OK", r)
    except NameError:
        return ("SKIP", "")
    except ZeroDivisionError:
        return ("ERR", "division by zero")
    except OverflowError as e:
        return ("ERR", "overflow:" + str(e))
rows = []
for op in ["+", "-", "*", "//", "%", "/"]:
    for a in vals:
        for b in vals:
            rows.append((f"{a} {op} {b}",) + run(f"{a} {op} {b}"))
# ** with small exponent set (big exponents on big bases make huge ints: treat as overflow without computing)
for a in vals:
    for b in ["0", "1", "2", "3", "62", "63", "64", "-1", "9223372036854775807"]:
        av, bv = vals[a], int(b)
        if bv > 64 and abs(av) >= 2:
            rows.append((f"{a} ** {b}", "ERR", "integer overflow")); continue
        if bv < 0 and av == 0:
            rows.append((f"{a} ** {b}", "ERR", "division by zero")); continue
        rows.append((f"{a} ** {b}",) + run(f"{a} ** {b}"))
for a in vals:
    rows.append((f"-{a}",) + run(f"-{a}"))
    rows.append((f"{a}|abs",) + run(f"{a}|abs"))
    rows.append((f"{a} is divisibleby(-1)",) + run(f"{a} is divisibleby(-1)"))
    rows.append((f"{a} is divisibleby(2)",) + run(f"{a} is divisibleby(2)"))
    rows.append((f"{a} is divisibleby({a})",) + (run(f"{a} is divisibleby({a})") if vals[a] else ("ERR", "divisibleby")))
rows.append(("[9223372036854775807, 1]|sum",) + run("[9223372036854775807, 1]|sum"))
rows.append(("[9223372036854775807, -1, 1]|sum",) + run("[9223372036854775807, -1, 1]|sum"))
rows.append(("[(-9223372036854775807 - 1), -1]|sum",) + run("[(-9223372036854775807 - 1), -1]|sum"))
floats = ["1 // 0.1", "1 % 0.1", "-1 % 0.1", "-1 // 0.1", "5.5 % -2", "5.5 // -2", "-5.5 % 2", "-0.0 % 1", "0.0 // -1",
          "2 ** 0.5", "2 ** -1", "2.0 ** -1074", "1e308 * 10", "-1e308 - 1e308", "1 / 3", "9223372036854775807 / 1",
          "9007199254740993 / 1", "(-9223372036854775807 - 1) / -1", "1.5 + 2", "7.0 // 2", "1 / 0.0", "1.0 // 0", "1.0 % 0.0",
          "(-8) ** (1/3)", "10.0 ** 400", "0.0 ** -1", "(-2.0) ** 3", "2 ** 1023.5"]
for f in floats:
    try: rows.append((f,) + run(f))
    except ValueError as e: rows.append((f, "ERR", "complex"))
ints = ["'ff'|int(base=16)", "'FF'|int(0, 16)", "'0xff'|int(base=16)", "'0x_f'|int(base=16)", "'0x__f'|int(base=16)",
        "'0o17'|int(base=8)", "'0b101'|int(base=2)", "'0b1'|int(base=16)", "'0x1f'|int(base=0)", "'010'|int(base=0)",
        "'z'|int(base=36)", "'12'|int(base=2)", "' -42 '|int", "'+7'|int", "'1_000'|int", "'1__0'|int", "'_1'|int", "'1_'|int",
        "'42.23'|int", "'-42.9'|int", "'abc'|int", "'abc'|int(7)", "'nan'|int", "'9223372036854775807'|int",
        "'-9223372036854775808'|int", "'9223372036854775808'|int", "'-9223372036854775809'|int", "'1e300'|int", "'inf'|int",
        "1e300|int", "-1e300|int", "9.2233720368547748e18|int", "9.223372036854775808e18|int", "-9.223372036854775808e18|int",
        "(0.0 - 1e308 * 10)|int", "-3.99|int", "true|int", "none|int", "'1e3'|int", "'0x10'|int",
        "'1.5'|float", "'1e400'|float", "'-inf'|float", "'nan'|float|string", "'x'|float", "'x'|float(2.5)", "'1_0.5'|float", "'0x1p3'|float"]
for f in ints:
    try:
        rows.append((f,) + run(f))
    except OverflowError as e:
        rows.append((f, "ERR", "out of the 64-bit"))
    except ValueError as e:
        rows.append((f, "ERR", "ValueError " + str(e)))
rows = [r for r in rows if r[1] != "SKIP"]
rows.append(("(1e308 * 10)|int", "ERR", "integer overflow"))  # Jinja itself cannot constant-fold inf; Python: OverflowError
def want_err(expr, why):
    if why.startswith("overflow:"): return "float overflow"
    if why == "complex": return "complex"
    if why == "divisibleby": return "divisibleby needs a non-zero integer"
    if why == "division by zero": return "division by zero"
    if "|int" in expr: return "out of the 64-bit integer range"
    return "integer overflow"
def c(s): return '"' + s.replace('\\', '\\\\').replace('"', '\\"') + '"'
out = ["// Generated by tests/gen_jinja_number_cases.py with Jinja2 " + jinja2.__version__ + " on Python 3: each expression rendered",
       "// as {{ (EXPR)|string }}; an integer result outside int64 (Python's is unbounded) is expected as an",
       "// error, as is every exception Jinja raises. Do not edit by hand.",]
for expr, kind, val in rows:
    if kind == "OK" and val.endswith("j)"): kind, val = "ERR", "complex"
    if kind == "OK": out.append("{" + c(expr) + ", " + c(val) + ", false},")
    else: out.append("{" + c(expr) + ", " + c(want_err(expr, val)) + ", true},")
print("\n".join(out))
