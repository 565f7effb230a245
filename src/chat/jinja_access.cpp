// Attribute, item and slice access, iteration, and the Python str/dict methods templates call.
#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>

#include "chat/jinja_builtins.h"
#include "chat/jinja_helpers.h"

namespace minfer::jinja {
namespace {

Value string_method(const std::string& s, const std::string& name) {
  auto m = [&](Function f) { return Value::func("str." + name, std::move(f)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return m([s, l, r](CallArgs& a) { return Value(strip(s, arg(a, 0, "chars"), l, r)); });
  }
  if (name == "split")
    return m([s](CallArgs& a) {
      const Value* mx = arg(a, 1, "maxsplit");
      return split(s, arg(a, 0, "sep"), mx && mx->kind() == Value::Kind::Int ? mx->as_int() : -1, a.line);
    });
  if (name == "startswith" || name == "endswith") {
    const bool st = name == "startswith";
    return m([s, st](CallArgs& a) {
      const Value* p = arg(a, 0, "prefix");
      if (!p) template_fail(a.line, "{} needs an argument", st ? "startswith" : "endswith");
      return Value(starts_or_ends(s, *p, st, a.line));
    });
  }
  if (name == "upper") return m([s](CallArgs&) { return Value(ascii_case(s, true)); });
  if (name == "lower") return m([s](CallArgs&) { return Value(ascii_case(s, false)); });
  if (name == "title") return m([s](CallArgs&) { return Value(title_case(s)); });
  if (name == "capitalize") return m([s](CallArgs&) { return Value(capitalize(s)); });
  if (name == "replace")
    return m([s](CallArgs& a) {
      const Value* c = arg(a, 2, "count");
      return Value(replace_all(s, str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"),
                               c && c->kind() == Value::Kind::Int ? c->as_int() : -1, a.line));
    });
  if (name == "find")
    return m([s](CallArgs& a) {
      const size_t p = s.find(str_arg(a, 0, "sub", "find"));
      return Value(p == std::string::npos ? int64_t{-1} : static_cast<int64_t>(p));
    });
  if (name == "count")
    return m([s](CallArgs& a) {
      const std::string& sub = str_arg(a, 0, "sub", "count");
      int64_t n = 0;
      if (sub.empty()) return Value(static_cast<int64_t>(code_points(s, a.line).size() + 1));
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    });
  if (name == "join")
    return m([s](CallArgs& a) {
      const Value* items = arg(a, 0, "iterable");
      if (!items) template_fail(a.line, "join needs an argument");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*items, a.line)) {
        if (!v.is_string()) template_fail(a.line, "str.join: expected strings, found {}", kind_name(v.kind()));
        if (out.size() + s.size() + v.as_string().size() > kMaxOutputBytes)
          template_fail(a.line, "str.join: the result would exceed {} bytes", kMaxOutputBytes);
        if (!first) out += s;
        out += v.as_string();
        first = false;
      }
      return Value(std::move(out));
    });
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
    return m([s, name](CallArgs&) {
      if (s.empty()) return Value(false);
      for (char c : s) {
        const auto u = static_cast<unsigned char>(c);
        const bool ok = name == "isdigit" ? std::isdigit(u) != 0
                        : name == "isalpha" ? std::isalpha(u) != 0
                        : name == "isspace" ? is_py_space(c)
                                            : std::isalnum(u) != 0;
        if (!ok) return Value(false);
      }
      return Value(true);
    });
  }
  return Value::undefined(name);
}

Value dict_method(const Value& d, const std::string& name) {
  auto m = [&](Function f) { return Value::func("dict." + name, std::move(f)); };
  if (name == "items")
    return m([d](CallArgs&) {
      ValueList l;
      for (const auto& [k, v] : d.as_map().items) l.push_back(Value::list({key_value(d.as_map(), k), v}));
      return Value::list(std::move(l));
    });
  if (name == "keys")
    return m([d](CallArgs&) {
      ValueList l;
      for (const auto& [k, v] : d.as_map().items) l.push_back(key_value(d.as_map(), k));
      return Value::list(std::move(l));
    });
  if (name == "values")
    return m([d](CallArgs&) {
      ValueList l;
      for (const auto& [k, v] : d.as_map().items) l.push_back(v);
      return Value::list(std::move(l));
    });
  if (name == "get")
    return m([d](CallArgs& a) {
      const std::string& key = str_arg(a, 0, "key", "get");
      const Value* v = d.as_map().find(key);
      if (v) return *v;
      const Value* def = arg(a, 1, "default");
      return def ? *def : Value::none();
    });
  return Value::undefined(name);
}

}  // namespace

ValueList iterate(const Value& v, int line) {
  switch (v.kind()) {
    case Value::Kind::List: return v.as_list();
    case Value::Kind::Map: {
      ValueList keys;
      for (const auto& [k, x] : v.as_map().items) keys.push_back(key_value(v.as_map(), k));
      return keys;
    }
    case Value::Kind::String: {
      ValueList chars;
      for (auto& c : code_points(v.as_string(), line))
        chars.push_back(v.has_data() ? Value::data_string(std::move(c)) : Value(std::move(c)));
      return chars;
    }
    case Value::Kind::Undefined: return {};
    default: template_fail(line, "{} is not iterable", kind_name(v.kind()));
  }
}

Value get_attr(const Value& obj, const std::string& name, int line) {
  if (obj.is_undefined()) template_fail(line, "'{}' is undefined", obj.as_string());
  if (obj.is_map()) {
    if (!obj.as_map().is_namespace) {
      Value m = dict_method(obj, name);
      if (!m.is_undefined()) return m;
    }
    const Value* v = obj.as_map().find(name);
    return v ? *v : Value::undefined(name);
  }
  if (obj.is_string()) return string_method(obj.as_string(), name);
  return Value::undefined(name);
}

Value get_item(const Value& obj, const Value& key, int line) {
  if (obj.is_undefined()) template_fail(line, "'{}' is undefined", obj.as_string());
  if (obj.is_map()) {
    if (!key.is_string()) return Value::undefined(to_str(key, line));
    const Value* v = obj.as_map().find(key.as_string());
    return v ? *v : Value::undefined(key.as_string());
  }
  if ((obj.is_list() || obj.is_string()) && key.kind() == Value::Kind::Int) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto n = static_cast<int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(fmt::format("index {}", key.as_int()));
      return obj.as_list()[static_cast<size_t>(i)];
    }
    // Walks the code points without copying them (a loop may index a long string); a negative
    // index counts them first.
    const std::string& s = obj.as_string();
    auto next = [&](size_t pos) {
      const size_t n = tok::utf8_char_len(s, pos);
      return pos + (n == 0 ? 1 : n);
    };
    if (i < 0) {
      int64_t n = 0;
      for (size_t pos = 0; pos < s.size(); pos = next(pos)) ++n;
      charge_scan(s.size(), line);
      i += n;
      if (i < 0) return Value::undefined(fmt::format("index {}", key.as_int()));
    }
    size_t pos = 0;
    for (int64_t k = 0; k < i && pos < s.size(); ++k) pos = next(pos);
    charge_scan(pos, line);
    if (pos >= s.size()) return Value::undefined(fmt::format("index {}", key.as_int()));
    return Value(s.substr(pos, next(pos) - pos));
  }
  if (key.is_string()) return get_attr(obj, key.as_string(), line);
  return Value::undefined(to_str(key, line));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line) {
  auto as_opt = [&](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (v.kind() != Value::Kind::Int) template_fail(line, "slice {} must be an integer", what);
    return v.as_int();
  };
  // Python's slice.indices (CPython PySlice_Unpack + PySlice_AdjustIndices): a step below
  // -INT64_MAX counts as -INT64_MAX so that its negation exists; start and stop are clamped to
  // [0, n] for a positive step and [-1, n - 1] for a negative one; the length is computed from
  // them, so no index is ever formed outside the sequence and nothing overflows.
  int64_t st = as_opt(step, "step").value_or(1);
  if (st == 0) template_fail(line, "slice step cannot be zero");
  if (st < -std::numeric_limits<int64_t>::max()) st = -std::numeric_limits<int64_t>::max();
  ValueList items;
  const bool is_str = obj.is_string();
  if (is_str) {
    for (auto& c : code_points(obj.as_string(), line)) items.emplace_back(std::move(c));
  } else if (obj.is_list()) {
    items = obj.as_list();
  } else {
    template_fail(line, "cannot slice {}", kind_name(obj.kind()));
  }
  const auto n = static_cast<int64_t>(items.size());
  auto adjust = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) {
      x += n;  // no overflow: x < 0 <= n
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  const int64_t b = adjust(as_opt(start, "start"), st > 0 ? 0 : n - 1);
  const int64_t e = adjust(as_opt(stop, "stop"), st > 0 ? n : -1);
  int64_t count = 0;  // b, e in [-1, n]: the differences cannot overflow
  if (st > 0 && b < e) count = (e - b - 1) / st + 1;
  if (st < 0 && e < b) count = (b - e - 1) / -st + 1;
  ValueList out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) out.push_back(items[static_cast<size_t>(b + k * st)]);  // |k * st| <= |e - b|
  if (is_str) {
    std::string s;
    for (const Value& c : out) s += c.as_string();
    return Value(std::move(s));
  }
  return Value::list(std::move(out));
}

}  // namespace minfer::jinja
