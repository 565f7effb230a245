// Attribute, item and slice access, iteration, and the Python str/dict methods templates call.
#include <algorithm>
#include <cctype>
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
                               c && c->kind() == Value::Kind::Int ? c->as_int() : -1));
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
      if (sub.empty()) return Value(static_cast<int64_t>(code_points(s).size() + 1));
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
      for (const auto& [k, v] : d.as_map().items) l.push_back(Value::list({Value(k), v}));
      return Value::list(std::move(l));
    });
  if (name == "keys")
    return m([d](CallArgs&) {
      ValueList l;
      for (const auto& [k, v] : d.as_map().items) l.emplace_back(k);
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
      for (const auto& [k, x] : v.as_map().items) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::String: {
      ValueList chars;
      for (auto& c : code_points(v.as_string())) chars.emplace_back(std::move(c));
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
    if (!key.is_string()) return Value::undefined(to_str(key));
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
    const auto cps = code_points(obj.as_string());
    const auto n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::undefined(fmt::format("index {}", key.as_int()));
    return Value(cps[static_cast<size_t>(i)]);
  }
  if (key.is_string()) return get_attr(obj, key.as_string(), line);
  return Value::undefined(to_str(key));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line) {
  auto as_opt = [&](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (v.kind() != Value::Kind::Int) template_fail(line, "slice {} must be an integer", what);
    return v.as_int();
  };
  const int64_t st = as_opt(step, "step").value_or(1);
  if (st == 0) template_fail(line, "slice step cannot be zero");
  ValueList items;
  const bool is_str = obj.is_string();
  if (is_str) {
    for (auto& c : code_points(obj.as_string())) items.emplace_back(std::move(c));
  } else if (obj.is_list()) {
    items = obj.as_list();
  } else {
    template_fail(line, "cannot slice {}", kind_name(obj.kind()));
  }
  const auto n = static_cast<int64_t>(items.size());
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v < 0 ? *v + n : *v;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t b = clamp(as_opt(start, "start"), st > 0 ? 0 : n - 1);
  const int64_t e = clamp(as_opt(stop, "stop"), st > 0 ? n : -1);
  ValueList out;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(items[static_cast<size_t>(i)]);
  if (is_str) {
    std::string s;
    for (const Value& c : out) s += c.as_string();
    return Value(std::move(s));
  }
  return Value::list(std::move(out));
}

}  // namespace minfer::jinja
