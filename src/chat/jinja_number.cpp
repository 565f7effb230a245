// Numbers of the Jinja subset: arithmetic with Python's semantics on 64-bit integers and IEEE
// doubles, and the int/float conversions of the int and float filters. Python integers are
// unbounded; here an integer result that does not fit int64 is an error naming the operation and
// its operands, never a wrapped value. Division by zero is an error (ZeroDivisionError), as is a
// float power Python rejects (OverflowError, a complex result).
#include <cmath>
#include <cstdlib>
#include <limits>

#include "chat/jinja_builtins.h"
#include "chat/jinja_helpers.h"

namespace minfer::jinja {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

[[noreturn]] void overflow(const char* op, int64_t a, int64_t b, int line) {
  template_fail(line, "integer overflow: {} {} {} does not fit a 64-bit integer", a, op, b);
}

int64_t int_pow(int64_t base, int64_t exp, int line) {
  // Square-and-multiply. A base square that overflows while exponent bits remain means the result
  // (at least that square in magnitude, |base| >= 2) overflows too.
  int64_t r = 1, b = base;
  for (int64_t e = exp; e > 0; e >>= 1) {
    if ((e & 1) && __builtin_mul_overflow(r, b, &r)) overflow("**", base, exp, line);
    if (e > 1 && __builtin_mul_overflow(b, b, &b)) overflow("**", base, exp, line);
  }
  return r;
}

// Python's int / int: the correctly rounded quotient for |a|, |b| <= 2^53 (both exact as doubles,
// one IEEE division); larger operands divide in long double (64-bit mantissa on x86-64) and then
// round to double, which can differ from Python in the last bit only when the long double quotient
// lands on a midpoint between two doubles.
double int_true_div(int64_t a, int64_t b) {
  constexpr int64_t k53 = int64_t{1} << 53;
  if (a >= -k53 && a <= k53 && b >= -k53 && b <= k53) return static_cast<double>(a) / static_cast<double>(b);
  return static_cast<double>(static_cast<long double>(a) / static_cast<long double>(b));
}

// Python's float divmod (the rule of CPython's float_divmod in Objects/floatobject.c): the remainder
// takes the sign of the divisor, and the quotient is rounded so that q * y + r == x holds as
// closely as doubles allow (1 // 0.1 == 9.0, 1 % 0.1 == 0.09999999999999995). y != 0.
void float_divmod(double x, double y, double& q, double& r) {
  r = std::fmod(x, y);
  double d = (x - r) / y;
  if (r != 0.0) {
    if ((y < 0) != (r < 0)) {
      r += y;
      d -= 1.0;
    }
  } else {
    r = std::copysign(0.0, y);
  }
  if (d != 0.0) {
    q = std::floor(d);
    if (d - q > 0.5) q += 1.0;
  } else {
    q = std::copysign(0.0, x / y);
  }
}

Value float_pow(double x, double y, int line) {
  if (x == 0.0 && y < 0.0) template_fail(line, "division by zero: {} ** {}", x, y);
  if (x < 0.0 && std::isfinite(x) && std::isfinite(y) && y != std::floor(y))
    template_fail(line, "{} ** {} is a complex number", x, y);
  const double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
    template_fail(line, "float overflow: {} ** {} is out of range", x, y);
  return Value(r);
}

}  // namespace

Value arith_numbers(const std::string& op, const Value& a, const Value& b, int line) {
  const bool ints = a.kind() == Value::Kind::Int && b.kind() == Value::Kind::Int;
  if (ints) {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) overflow("+", x, y, line);
      return Value(r);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) overflow("-", x, y, line);
      return Value(r);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) overflow("*", x, y, line);
      return Value(r);
    }
    if (op == "**") {
      if (y >= 0) return Value(int_pow(x, y, line));
      return float_pow(static_cast<double>(x), static_cast<double>(y), line);  // 2 ** -1 == 0.5
    }
    if (y == 0) template_fail(line, "division by zero: {} {} {}", x, op, y);
    if (op == "/") return Value(int_true_div(x, y));
    if (op == "//") {
      if (x == kMin && y == -1) overflow("//", x, y, line);
      int64_t q = x / y;
      if (x % y != 0 && ((x < 0) != (y < 0))) --q;
      return Value(q);
    }
    if (op == "%") {
      if (y == -1) return Value(int64_t{0});  // also INT64_MIN % -1, which C++ leaves undefined
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return Value(m);
    }
    template_fail(line, "unknown operator '{}'", op);
  }
  const double x = a.as_number(), y = b.as_number();
  if (op == "+") return Value(x + y);
  if (op == "-") return Value(x - y);
  if (op == "*") return Value(x * y);
  if (op == "**") return float_pow(x, y, line);
  if (y == 0.0) template_fail(line, "division by zero: {} {} {}", repr(a), op, repr(b));
  if (op == "/") return Value(x / y);
  if (op == "//" || op == "%") {
    double q = 0, r = 0;
    float_divmod(x, y, q, r);
    return Value(op == "//" ? q : r);
  }
  template_fail(line, "unknown operator '{}'", op);
}

Value negate_number(const Value& v, int line) {
  if (v.kind() == Value::Kind::Int) {
    if (v.as_int() == kMin) template_fail(line, "integer overflow: -({}) does not fit a 64-bit integer", v.as_int());
    return Value(-v.as_int());
  }
  return Value(-v.as_number());
}

Value abs_number(const Value& v, int line) {
  if (v.kind() == Value::Kind::Int) {
    if (v.as_int() == kMin) template_fail(line, "integer overflow: abs({}) does not fit a 64-bit integer", v.as_int());
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  return Value(std::fabs(v.as_number()));
}

std::optional<int64_t> float_to_int(double d, int line) {
  if (std::isnan(d)) return std::nullopt;  // Python: ValueError (the int filter's default)
  // [-2^63, 2^63) are the doubles whose truncation fits int64.
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0))
    template_fail(line, "int: {} is out of the 64-bit integer range", repr(Value(d)));
  return static_cast<int64_t>(d);
}

namespace {

int digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'z') return c - 'a' + 10;
  if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
  return 99;
}

}  // namespace

std::optional<int64_t> parse_int(const std::string& text, int base, int line) {
  size_t b = 0, e = text.size();
  while (b < e && is_py_space(text[b])) ++b;
  while (e > b && is_py_space(text[e - 1])) --e;
  bool neg = false;
  if (b < e && (text[b] == '+' || text[b] == '-')) neg = text[b++] == '-';
  // Prefix 0x/0o/0b: allowed when it names the base, and required to pick it when base is 0.
  bool prefixed = false;
  if (e - b >= 2 && text[b] == '0') {
    const char p = static_cast<char>(text[b + 1] | 0x20);
    const int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (pb != 0 && (base == pb || base == 0)) {
      base = pb;
      b += 2;
      prefixed = true;
    }
  }
  const bool auto_decimal = base == 0;
  if (base == 0) base = 10;
  // Digits, with single underscores between them (and, after a prefix, one before the first).
  uint64_t mag = 0;
  bool overflowed = false, any = false, last_underscore = prefixed;
  bool all_zero = true;
  const size_t first_digit = b;
  for (size_t i = b; i < e; ++i) {
    const char c = text[i];
    if (c == '_') {
      if (last_underscore && !(prefixed && i == first_digit)) return std::nullopt;
      if (!any && !prefixed) return std::nullopt;
      last_underscore = true;
      continue;
    }
    const int d = digit_value(c);
    if (d >= base) return std::nullopt;
    if (d != 0) all_zero = false;
    any = true;
    last_underscore = false;
    if (__builtin_mul_overflow(mag, static_cast<uint64_t>(base), &mag) ||
        __builtin_add_overflow(mag, static_cast<uint64_t>(d), &mag))
      overflowed = true;
  }
  if (!any || last_underscore) return std::nullopt;
  // Base 0 rejects a decimal with leading zeros ("010"), as Python does.
  if (auto_decimal && !prefixed && text[first_digit] == '0' && !all_zero) return std::nullopt;
  const uint64_t limit = neg ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  if (overflowed || mag > limit)
    template_fail(line, "int: '{}' is out of the 64-bit integer range", text);
  if (neg) return mag == (uint64_t{1} << 63) ? kMin : -static_cast<int64_t>(mag);
  return static_cast<int64_t>(mag);
}

std::optional<double> parse_float(const std::string& text) {
  size_t b = 0, e = text.size();
  while (b < e && is_py_space(text[b])) ++b;
  while (e > b && is_py_space(text[e - 1])) --e;
  if (b == e) return std::nullopt;
  std::string s;
  for (size_t i = b; i < e; ++i) {
    const char c = text[i];
    const bool digit = c >= '0' && c <= '9';
    if (c == '_') {  // Python: underscores only between digits
      if (i == b || i + 1 == e || !(text[i - 1] >= '0' && text[i - 1] <= '9') ||
          !(text[i + 1] >= '0' && text[i + 1] <= '9'))
        return std::nullopt;
      continue;
    }
    // strtod also reads hex floats and "infinityX" prefixes; Python's float() takes decimal
    // digits, '.', an exponent, a sign, and the words inf/infinity/nan.
    if (!digit && c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-' &&
        std::string_view("infatyINFATY").find(c) == std::string_view::npos)
      return std::nullopt;
    s += c;
  }
  const char* p = s.c_str();
  char* end = nullptr;
  const double d = std::strtod(p, &end);  // out of range: +-inf or 0 with ERANGE, as Python's float()
  if (end != p + s.size()) return std::nullopt;
  return d;
}

}  // namespace minfer::jinja
