// Filters, tests and global functions of the Jinja subset.
#include "chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "chat/jinja_helpers.h"

namespace minfer::jinja {
namespace {

int64_t length_of(const Value& v, int line) {
  switch (v.kind()) {
    case Value::Kind::String: return static_cast<int64_t>(code_points(v.as_string(), line).size());
    case Value::Kind::List: return static_cast<int64_t>(v.as_list().size());
    case Value::Kind::Map: return static_cast<int64_t>(v.as_map().items.size());
    case Value::Kind::Undefined: return 0;
    default: template_fail(line, "length: {} has no length", kind_name(v.kind()));
  }
}

Value attribute_path(const Value& v, const std::string& path, int line) {
  Value cur = v;
  size_t i = 0;
  while (i <= path.size()) {
    const size_t j = std::min(path.find('.', i), path.size());
    const std::string part = path.substr(i, j - i);
    if (cur.is_undefined()) return cur;
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) cur = get_item(cur, Value(static_cast<int64_t>(std::stoll(part))), line);
    else cur = get_item(cur, Value(part), line);
    i = j + 1;
  }
  return cur;
}

// select/reject/selectattr/rejectattr
Value select_filter(const Value& v, CallArgs& a, bool by_attr, bool keep) {
  size_t p = 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty() || !a.pos[0].is_string()) template_fail(a.line, "selectattr/rejectattr need an attribute name");
    attr = a.pos[0].as_string();
    p = 1;
  }
  std::string test = p < a.pos.size() && a.pos[p].is_string() ? a.pos[p].as_string() : "";
  CallArgs targs;
  targs.line = a.line;
  for (size_t k = p + 1; k < a.pos.size(); ++k) targs.pos.push_back(a.pos[k]);
  ValueList out;
  for (const Value& item : iterate(v, a.line)) {
    const Value x = by_attr ? attribute_path(item, attr, a.line) : item;
    const bool ok = test.empty() ? truthy(x) : apply_test(test, x, targs);
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, CallArgs& a) {
  const int line = a.line;
  if (name == "length" || name == "count") return Value(length_of(v, line));
  if (name == "tojson") {
    // json.dumps's indent: None is one line; an integer N pretty-prints with N spaces a level
    // (0 or negative: newlines only). N is checked before any indentation is made.
    const Value* ind = arg(a, 0, "indent");
    int64_t indent = -1;
    if (ind && !ind->is_none() && !ind->is_undefined()) {
      if (ind->kind() != Value::Kind::Int) template_fail(line, "tojson: indent must be an integer, not {}", kind_name(ind->kind()));
      indent = std::max<int64_t>(0, ind->as_int());
      if (static_cast<uint64_t>(indent) > kMaxOutputBytes)
        template_fail(line, "tojson: indent={} exceeds the {}-byte output limit", ind->as_int(), kMaxOutputBytes);
    }
    return Value(to_json(v, indent, line));
  }
  if (name == "safe") return v;
  if (name == "string") return Value(to_str(v, line));
  if (name == "trim") return Value(strip(to_str(v, line), arg(a, 0, "chars"), true, true));
  if (name == "lower" || name == "upper") return Value(ascii_case(to_str(v, line), name == "upper"));
  if (name == "capitalize") return Value(capitalize(to_str(v, line)));
  if (name == "title") return Value(title_case(to_str(v, line)));
  if (name == "default" || name == "d") {
    const Value* def = arg(a, 0, "default_value");
    const Value* boolean = arg(a, 1, "boolean");
    const bool use = v.is_undefined() || (boolean && truthy(*boolean) && !truthy(v));
    return use ? (def ? *def : Value("")) : v;
  }
  if (name == "first" || name == "last") {
    ValueList items = iterate(v, line);
    if (items.empty()) return Value::undefined(name);
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::list(iterate(v, line));
  if (name == "reverse") {
    if (v.is_string()) {
      auto cps = code_points(v.as_string(), line);
      std::string s;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) s += *it;
      return Value(std::move(s));
    }
    ValueList items = iterate(v, line);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "join") {
    const Value* sep = arg(a, 0, "d");
    const Value* attr = arg(a, 1, "attribute");
    std::string out;
    bool first = true;
    const std::string sep_text = sep ? to_str(*sep, line) : std::string();
    for (const Value& item : iterate(v, line)) {
      const std::string text = to_str(attr && attr->is_string() ? attribute_path(item, attr->as_string(), line) : item, line);
      if (out.size() + sep_text.size() + text.size() > kMaxOutputBytes)
        template_fail(line, "join: the result would exceed {} bytes", kMaxOutputBytes);
      if (!first) out += sep_text;
      out += text;
      first = false;
    }
    return Value(std::move(out));
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::list();
    if (!v.is_map()) template_fail(line, "items: expected a dict, not {}", kind_name(v.kind()));
    ValueList l;
    for (const auto& [k, x] : v.as_map().items) l.push_back(Value::list({key_value(v.as_map(), k), x}));
    return Value::list(std::move(l));
  }
  if (name == "replace") {
    const Value* c = arg(a, 2, "count");
    return Value(replace_all(to_str(v, line), str_arg(a, 0, "old", "replace"), str_arg(a, 1, "new", "replace"),
                             c && c->kind() == Value::Kind::Int ? c->as_int() : -1, line));
  }
  if (name == "int") {
    // Jinja's do_int: int(value, base) for strings, int(value) otherwise, and on ValueError or
    // TypeError int(float(value)) ("42.23"|int is 42), else the default. A value outside int64
    // (Python would give a big integer) is an error, and so is an infinite float value (Python's
    // OverflowError, which do_int catches only on its second try, for strings).
    const Value* def = arg(a, 0, "default");
    const Value* base_v = arg(a, 1, "base");
    int64_t base = 10;
    if (base_v) {
      if (base_v->kind() != Value::Kind::Int || (base_v->as_int() != 0 && (base_v->as_int() < 2 || base_v->as_int() > 36)))
        template_fail(line, "int: base must be 0 or 2..36, not {}", repr(*base_v));
      base = base_v->as_int();
    }
    if (v.kind() == Value::Kind::Int) return v;
    if (v.kind() == Value::Kind::Bool) return Value(static_cast<int64_t>(v.as_bool()));
    std::optional<int64_t> r;
    if (v.kind() == Value::Kind::Float) r = float_to_int(v.as_number(), line);
    if (v.is_string()) {
      r = parse_int(v.as_string(), static_cast<int>(base), line);
      if (!r) {
        const std::optional<double> d = parse_float(v.as_string());
        if (d && !std::isinf(*d)) r = float_to_int(*d, line);  // int(float('inf')) is caught: default
      }
    }
    if (r) return Value(*r);
    return def ? *def : Value(int64_t{0});
  }
  if (name == "float") {
    // Jinja's do_float: float(value), else the default (0.0).
    if (v.is_number()) return Value(v.as_number());
    if (v.kind() == Value::Kind::Bool) return Value(v.as_bool() ? 1.0 : 0.0);
    if (v.is_string())
      if (const std::optional<double> d = parse_float(v.as_string())) return Value(*d);
    const Value* def = arg(a, 0, "default");
    return def ? *def : Value(0.0);
  }
  if (name == "abs") {
    if (v.is_number()) return abs_number(v, line);
    template_fail(line, "abs: expected a number, not {}", kind_name(v.kind()));
  }
  if (name == "select") return select_filter(v, a, false, true);
  if (name == "reject") return select_filter(v, a, false, false);
  if (name == "selectattr") return select_filter(v, a, true, true);
  if (name == "rejectattr") return select_filter(v, a, true, false);
  if (name == "map") {
    ValueList out;
    const Value* attr = arg(a, 99, "attribute");
    for (const Value& item : iterate(v, line)) {
      if (attr && attr->is_string()) {
        Value x = attribute_path(item, attr->as_string(), line);
        if (x.is_undefined()) {
          const Value* def = arg(a, 99, "default");
          if (def) x = *def;
        }
        out.push_back(x);
      } else if (!a.pos.empty() && a.pos[0].is_string()) {
        CallArgs rest;
        rest.line = line;
        rest.pos.assign(a.pos.begin() + 1, a.pos.end());
        out.push_back(apply_filter(a.pos[0].as_string(), item, rest));
      } else {
        template_fail(line, "map needs a filter name or attribute=");
      }
    }
    return Value::list(std::move(out));
  }
  if (name == "unique") {
    ValueList out;
    for (const Value& item : iterate(v, line))
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return equals(o, item); })) out.push_back(item);
    return Value::list(std::move(out));
  }
  if (name == "sort" || name == "min" || name == "max" || name == "sum") {
    ValueList items = iterate(v, line);
    const Value* attr = arg(a, name == "sort" ? 2 : name == "sum" ? 99 : 1, "attribute");
    auto key = [&](const Value& x) { return attr && attr->is_string() ? attribute_path(x, attr->as_string(), line) : x; };
    if (name == "sum") {
      Value total = Value(int64_t{0});
      for (const Value& x : items) {
        Value k = key(x);
        if (!k.is_number()) template_fail(line, "sum: expected numbers, found {}", kind_name(k.kind()));
        total = arith_numbers("+", total, k, line);
      }
      return total;
    }
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) { return compare(key(x), key(y), line) < 0; });
    if (name == "min") return items.empty() ? Value::undefined("min") : items.front();
    if (name == "max") return items.empty() ? Value::undefined("max") : items.back();
    const Value* rev = arg(a, 0, "reverse");
    if (rev && truthy(*rev)) std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));
  }
  if (name == "indent") {
    // Jinja's do_indent(s, width=4, first=False, blank=False): width is a string or a number of
    // spaces (' ' * width: negative gives ""). The result size is computed, and checked against
    // kMaxOutputBytes, before the padding or the result is allocated.
    const Value* w = arg(a, 0, "width");
    const Value* first = arg(a, 1, "first");
    if (w && !w->is_string() && w->kind() != Value::Kind::Int)
      template_fail(line, "indent: width must be an integer or a string, not {}", kind_name(w->kind()));
    const int64_t width = w && w->kind() == Value::Kind::Int ? std::max<int64_t>(0, w->as_int()) : 4;
    const std::string s = to_str(v, line);
    const bool pad_first = first && truthy(*first) && !s.empty();
    size_t n_pads = pad_first ? 1 : 0;
    for (size_t i = 0; i + 1 < s.size(); ++i)
      if (s[i] == '\n' && s[i + 1] != '\n') ++n_pads;
    const uint64_t pad_size = w && w->is_string() ? w->as_string().size() : static_cast<uint64_t>(width);
    if (n_pads > 0 && pad_size > (kMaxOutputBytes - std::min<size_t>(s.size(), kMaxOutputBytes)) / n_pads)
      template_fail(line, "indent: width {} on {} lines would exceed the {}-byte output limit",
                    w && w->is_string() ? repr(*w) : std::to_string(w ? w->as_int() : 4), n_pads, kMaxOutputBytes);
    const std::string pad = w && w->is_string() ? w->as_string() : std::string(n_pads ? static_cast<size_t>(width) : 0, ' ');
    std::string out = pad_first ? pad : "";
    out.reserve(s.size() + n_pads * pad.size());
    for (size_t i = 0; i < s.size(); ++i) {
      out += s[i];
      if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') out += pad;
    }
    return Value(std::move(out));
  }
  template_fail(line, "unsupported filter '{}'", name);
}

bool apply_test(const std::string& name, const Value& v, CallArgs& a) {
  const int line = a.line;
  using K = Value::Kind;
  auto other = [&]() -> const Value& {
    if (a.pos.empty()) template_fail(line, "test '{}' needs an argument", name);
    return a.pos[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == K::Int;
  if (name == "float") return v.kind() == K::Float;
  if (name == "boolean") return v.kind() == K::Bool;
  if (name == "true") return v.kind() == K::Bool && v.as_bool();
  if (name == "false") return v.kind() == K::Bool && !v.as_bool();
  if (name == "mapping") return v.is_map();
  if (name == "sequence") return v.is_list() || v.is_string() || v.is_map();
  if (name == "iterable") return v.is_list() || v.is_string() || v.is_map();
  if (name == "callable") return v.kind() == K::Func;
  if (name == "lower") return v.is_string() && ascii_case(v.as_string(), false) == v.as_string();
  if (name == "upper") return v.is_string() && ascii_case(v.as_string(), true) == v.as_string();
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.kind() != K::Int) template_fail(line, "test '{}' needs an integer, not {}", name, kind_name(v.kind()));
    if (name == "divisibleby") {
      const Value& d = other();
      if (d.kind() != K::Int || d.as_int() == 0) template_fail(line, "divisibleby needs a non-zero integer");
      return d.as_int() == -1 || v.as_int() % d.as_int() == 0;  // INT64_MIN % -1 is undefined in C++
    }
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, other());
  if (name == "ne" || name == "!=") return !equals(v, other());
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, other(), line) < 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, other(), line) > 0;
  if (name == "le" || name == "<=") return compare(v, other(), line) <= 0;
  if (name == "ge" || name == ">=") return compare(v, other(), line) >= 0;
  if (name == "sameas") {
    const Value& o = other();
    if (v.kind() != o.kind()) return false;
    if (v.is_list()) return &v.as_list() == &o.as_list();
    if (v.is_map()) return &v.as_map() == &o.as_map();
    return equals(v, o);
  }
  if (name == "in") {
    const Value& c = other();
    if (c.is_string()) return v.is_string() && c.as_string().find(v.as_string()) != std::string::npos;
    for (const Value& x : iterate(c, line))
      if (equals(x, v)) return true;
    return false;
  }
  template_fail(line, "unsupported test '{}'", name);
}

Value make_globals() {
  Value g = Value::map();
  auto& m = g.as_map();
  m.set("namespace", Value::func("namespace", [](CallArgs& a) {
          Value ns = Value::map();
          ns.as_map().is_namespace = true;
          if (!a.pos.empty() && a.pos[0].is_map())
            for (const auto& [k, v] : a.pos[0].as_map().items) ns.as_map().set(k, v);
          for (const auto& [k, v] : a.kw) ns.as_map().set(k, v);
          return ns;
        }));
  m.set("dict", Value::func("dict", [](CallArgs& a) {
          Value d = Value::map();
          for (const auto& [k, v] : a.kw) d.as_map().set(k, v);
          return d;
        }));
  m.set("range", Value::func("range", [](CallArgs& a) {
          int64_t b = 0, e = 0, s = 1;
          for (const Value& v : a.pos)
            if (v.kind() != Value::Kind::Int) template_fail(a.line, "range() arguments must be integers");
          if (a.pos.size() == 1) e = a.pos[0].as_int();
          else if (a.pos.size() >= 2) {
            b = a.pos[0].as_int();
            e = a.pos[1].as_int();
            if (a.pos.size() >= 3) s = a.pos[2].as_int();
          } else template_fail(a.line, "range() needs 1 to 3 arguments");
          if (s == 0) template_fail(a.line, "range() step cannot be zero");
          // Python's length of range(b, e, s), in unsigned arithmetic (e - b can exceed int64 but
          // not uint64), checked before the list is made; b + k * s then stays within [b, e].
          const bool up = s > 0;
          const bool nonempty = up ? b < e : b > e;
          const uint64_t span = !nonempty ? 0 : up ? static_cast<uint64_t>(e) - static_cast<uint64_t>(b)
                                                   : static_cast<uint64_t>(b) - static_cast<uint64_t>(e);
          const uint64_t step = up ? static_cast<uint64_t>(s) : uint64_t{0} - static_cast<uint64_t>(s);
          const uint64_t len = nonempty ? (span - 1) / step + 1 : 0;
          if (len > kMaxListItems)
            template_fail(a.line, "range({}, {}, {}) has more than {} items", b, e, s, kMaxListItems);
          charge_work(static_cast<int64_t>(len), a.line);
          ValueList l;
          l.reserve(static_cast<size_t>(len));
          // b + k * s lies in [b, e] but k * s alone may not fit int64: wrap-around unsigned math.
          for (uint64_t k = 0; k < len; ++k)
            l.emplace_back(static_cast<int64_t>(static_cast<uint64_t>(b) + k * static_cast<uint64_t>(s)));
          return Value::list(std::move(l));
        }));
  m.set("raise_exception", Value::func("raise_exception", [](CallArgs& a) -> Value {
          template_fail(a.line, "the template raised an error: {}", a.pos.empty() ? std::string() : to_str(a.pos[0], a.line));
        }));
  m.set("strftime_now", Value::func("strftime_now", [](CallArgs& a) {
          const std::string& f = str_arg(a, 0, "format", "strftime_now");
          const std::time_t t = std::time(nullptr);
          std::tm tm{};
          localtime_r(&t, &tm);
          char buf[256];
          const size_t n = std::strftime(buf, sizeof buf, f.c_str(), &tm);
          return Value(std::string(buf, n));
        }));
  return g;
}

}  // namespace minfer::jinja
