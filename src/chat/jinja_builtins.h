// Jinja built-ins of the chat-template subset: filters, tests, attribute/item access (with the
// Python str/dict methods templates call), and the global functions (namespace, range,
// raise_exception, dict, strftime_now). Internal to src/chat.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "chat/jinja_value.h"

namespace minfer::jinja {

/// `obj.name`: a dict key, or a bound method of str/dict (strip, split, startswith, items, get,
/// ...). Missing -> undefined. Throws when obj itself is undefined (Jinja's UndefinedError).
Value get_attr(const Value& obj, const std::string& name, int line);

/// `obj[key]`: list/str index (negative from the end), dict key; missing -> undefined.
Value get_item(const Value& obj, const Value& key, int line);

/// `obj[start:stop:step]` for lists and strings (code points); null Values mean omitted.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line);

/// `value | name(args)`. Throws minfer::Error naming an unknown filter.
Value apply_filter(const std::string& name, const Value& value, CallArgs& args);

/// `value is name(args)`. Throws minfer::Error naming an unknown test.
bool apply_test(const std::string& name, const Value& value, CallArgs& args);

/// The global functions, as a dict of Func values.
Value make_globals();

/// Items of an iterable for `for` and filters: list items, dict keys, string characters
/// (UTF-8 code points), nothing for undefined. Throws for none/numbers/functions.
ValueList iterate(const Value& v, int line);

// Numbers (jinja_number.cpp). Python semantics on int64 and double; an integer result outside
// int64 and a division by zero throw minfer::Error "chat template line N: ..." naming the
// operation and its operands.

/// `a op b` for op in + - * / // % ** with a and b numbers (int or float).
Value arith_numbers(const std::string& op, const Value& a, const Value& b, int line);
/// Unary minus of a number.
Value negate_number(const Value& v, int line);
/// abs() of a number.
Value abs_number(const Value& v, int line);
/// int(d): truncation toward zero; nullopt for NaN (Python's ValueError); throws outside int64.
std::optional<int64_t> float_to_int(double d, int line);
/// Python's int(text, base) for base 0 or 2..36 (whitespace, sign, 0x/0o/0b prefix, single
/// underscores between digits); nullopt when Python raises ValueError; throws when the value is
/// outside int64.
std::optional<int64_t> parse_int(const std::string& text, int base, int line);
/// Python's float(text) for decimal text, inf/infinity/nan; nullopt when Python raises ValueError.
std::optional<double> parse_float(const std::string& text);

}  // namespace minfer::jinja
