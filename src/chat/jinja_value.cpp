#include "chat/jinja_value.h"

#include <cmath>

namespace minfer::jinja {

const Value* ValueMap::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void ValueMap::set(const std::string& key, Value v) {
  for (auto& [k, old] : items)
    if (k == key) {
      old = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value key_value(const ValueMap& m, const std::string& key) {
  return m.keys_are_data ? Value::data_string(key) : Value(key);
}

Value Value::undefined(std::string name) {
  Value v;
  v.s_ = std::move(name);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::List;
  v.l_ = std::make_shared<ValueList>(std::move(items));
  return v;
}
Value Value::map() {
  Value v;
  v.kind_ = Kind::Map;
  v.m_ = std::make_shared<ValueMap>();
  return v;
}
Value Value::func(std::string name, Function fn) {
  Value v;
  v.kind_ = Kind::Func;
  v.s_ = std::move(name);
  v.fn_ = std::make_shared<Function>(std::move(fn));
  return v;
}

Value Value::data_string(std::string s) {
  const size_t n = s.size();
  Value v(std::move(s));
  if (n) v.spans_ = std::make_shared<const DataSpans>(DataSpans{{0, n}});
  return v;
}

Value Value::marked_string(std::string s, DataSpans spans) {
  Value v(std::move(s));
  if (!spans.empty()) v.spans_ = std::make_shared<const DataSpans>(std::move(spans));
  return v;
}

Value Value::as_data() const {
  switch (kind_) {
    case Kind::String: return data_string(s_);
    case Kind::List: {
      ValueList l = *l_;
      for (Value& x : l)
        if (x.is_string() && !x.has_data()) x = data_string(x.s_);
      return list(std::move(l));
    }
    case Kind::Map: {
      Value m = map();
      *m.m_ = *m_;
      m.m_->keys_are_data = true;
      for (auto& kv : m.m_->items)
        if (kv.second.is_string() && !kv.second.has_data()) kv.second = data_string(kv.second.s_);
      return m;
    }
    case Kind::Func: {
      Value f = *this;
      f.spans_ = std::make_shared<const DataSpans>(DataSpans{{0, 1}});
      return f;
    }
    default: return *this;
  }
}

bool contains_data(const Value& v, int depth) {
  if (v.has_data()) return true;
  if (!v.is_list() && !v.is_map()) return false;
  if (depth >= kMaxDataDepth) return true;
  if (v.is_list()) {
    for (const Value& x : v.as_list())
      if (contains_data(x, depth + 1)) return true;
    return false;
  }
  if (v.as_map().keys_are_data && !v.as_map().items.empty()) return true;
  for (const auto& kv : v.as_map().items)
    if (contains_data(kv.second, depth + 1)) return true;
  return false;
}

void append_marked(std::string& out, DataSpans& out_spans, std::string_view s, const DataSpans* spans) {
  const size_t base = out.size();
  out += s;
  if (!spans) return;
  for (const DataSpan& d : *spans) {
    const DataSpan shifted{base + d.begin, base + d.end};
    if (shifted.begin == shifted.end) continue;
    if (!out_spans.empty() && out_spans.back().end == shifted.begin) out_spans.back().end = shifted.end;
    else out_spans.push_back(shifted);
  }
}

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::Undefined: return "undefined";
    case Value::Kind::None: return "none";
    case Value::Kind::Bool: return "boolean";
    case Value::Kind::Int: return "integer";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "string";
    case Value::Kind::List: return "list";
    case Value::Kind::Map: return "dict";
    case Value::Kind::Func: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_number() != 0.0;
    case Value::Kind::String: return !v.as_string().empty();
    case Value::Kind::List: return !v.as_list().empty();
    case Value::Kind::Map: return !v.as_map().items.empty();
    case Value::Kind::Func: return true;
  }
  return false;
}

namespace {

// Python float repr: shortest round-trip digits, always with a '.' or an exponent.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string string_repr(const std::string& s) {
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = use_double ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == q) {
          out += '\\';
          out += c;
        } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += q;
  return out;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F)
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  out += '"';
}

void check_size(const std::string& out, size_t more, const char* what, int line) {
  if (out.size() + more > kMaxOutputBytes)
    template_fail(line, "{}: the text would exceed {} bytes", what, kMaxOutputBytes);
}

void json_value(std::string& out, const Value& v, int64_t indent, int depth, int line) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    const size_t pad = static_cast<size_t>(indent) * static_cast<size_t>(d);  // indent <= kMaxOutputBytes
    check_size(out, pad + 1, "tojson", line);
    out += '\n';
    out.append(pad, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::Undefined: template_fail(line, "tojson: value '{}' is undefined", v.as_string());
    case Value::Kind::Func: template_fail(line, "tojson: cannot serialize function '{}'", v.as_string());
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double d = v.as_number();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
      return;
    }
    case Value::Kind::String:
      json_string(out, v.as_string());
      check_size(out, 0, "tojson", line);
      return;
    case Value::Kind::List: {
      check_size(out, 0, "tojson", line);
      const auto& l = v.as_list();
      if (l.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        json_value(out, l[i], indent, depth + 1, line);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::Map: {
      check_size(out, 0, "tojson", line);
      const auto& m = v.as_map().items;
      if (m.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < m.size(); ++i) {
        if (i) out += indent < 0 ? ", " : ",";
        newline(depth + 1);
        json_string(out, m[i].first);
        out += ": ";
        json_value(out, m[i].second, indent, depth + 1, line);
      }
      newline(depth);
      out += '}';
      return;
    }
  }
}

}  // namespace

namespace {

void repr_into(std::string& out, const Value& v, int line) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return;
    case Value::Kind::None: out += "None"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "True" : "False"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: out += float_repr(v.as_number()); return;
    case Value::Kind::String: out += string_repr(v.as_string()); break;
    case Value::Kind::List: {
      out += '[';
      const auto& l = v.as_list();
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += ", ";
        repr_into(out, l[i], line);
      }
      out += ']';
      break;
    }
    case Value::Kind::Map: {
      out += '{';
      const auto& m = v.as_map().items;
      for (size_t i = 0; i < m.size(); ++i) {
        if (i) out += ", ";
        out += string_repr(m[i].first);
        out += ": ";
        repr_into(out, m[i].second, line);
      }
      out += '}';
      break;
    }
    case Value::Kind::Func: out += "<function " + v.as_string() + ">"; return;
  }
  check_size(out, 0, "printing a value", line);
}

}  // namespace

std::string repr(const Value& v, int line) {
  std::string out;
  repr_into(out, v, line);
  return out;
}

std::string to_str(const Value& v, int line) {
  if (v.is_string()) return v.as_string();
  return repr(v, line);
}

std::string to_json(const Value& v, int64_t indent, int line) {
  std::string out;
  json_value(out, v, indent, 0, line);
  return out;
}

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.kind() == K::Int && b.kind() == K::Int) return a.as_int() == b.as_int();
    return a.as_number() == b.as_number();
  }
  if ((a.kind() == K::Bool && b.is_number()) || (a.is_number() && b.kind() == K::Bool)) {
    const double x = a.kind() == K::Bool ? (a.as_bool() ? 1.0 : 0.0) : a.as_number();
    const double y = b.kind() == K::Bool ? (b.as_bool() ? 1.0 : 0.0) : b.as_number();
    return x == y;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case K::Undefined:
    case K::None: return true;
    case K::Bool: return a.as_bool() == b.as_bool();
    case K::String: return a.as_string() == b.as_string();
    case K::List: {
      const auto &x = a.as_list(), &y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case K::Map: {
      const auto &x = a.as_map().items, &y = b.as_map().items;
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* w = b.as_map().find(k);
        if (!w || !equals(v, *w)) return false;
      }
      return true;
    }
    case K::Func: return &a.as_func() == &b.as_func();
    default: return false;
  }
}

int compare(const Value& a, const Value& b, int line) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Value::Kind::Int && b.kind() == Value::Kind::Int)
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    const double x = a.as_number(), y = b.as_number();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  template_fail(line, "cannot compare {} with {}", kind_name(a.kind()), kind_name(b.kind()));
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::json::value_t::string: return Value::data_string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList l;
      for (const auto& e : j) l.push_back(from_json(e));
      return Value::list(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      Value m = Value::map();
      m.as_map().keys_are_data = true;
      for (const auto& [k, e] : j.items()) m.as_map().set(k, from_json(e));
      return m;
    }
    default: return Value::none();
  }
}

namespace {
thread_local int64_t g_work_done = 0;  // per thread: renders on different threads are independent
}  // namespace

void charge_work(int64_t units, int line) {
  g_work_done += units;
  if (g_work_done > kMaxWorkUnits)
    template_fail(line, "the template does too much work (more than {} loop iterations and range() items); "
                        "it would not finish in reasonable time",
                  kMaxWorkUnits);
}

void reset_work() { g_work_done = 0; }

}  // namespace minfer::jinja
