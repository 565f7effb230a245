// Jinja built-ins of the chat-template subset: filters, tests, attribute/item access (with the
// Python str/dict methods templates call), and the global functions (namespace, range,
// raise_exception, dict, strftime_now). Internal to src/chat.
#pragma once

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

}  // namespace minfer::jinja
