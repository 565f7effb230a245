// Jinja interpreter: evaluates the syntax tree of jinja_ast.h with Jinja's scoping (each
// for-loop iteration has its own scope; `set` writes the innermost scope; namespace() objects
// carry values out of loops).
#include <cmath>
#include <unordered_map>

#include "chat/jinja.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_builtins.h"

namespace minfer::jinja {
namespace {

// Nesting limit of a value kept by {% set %} (chat messages are a few levels deep).
constexpr int kMaxValueDepth = 100;

enum class Flow { Normal, Break, Continue };

class Interp {
 public:
  explicit Interp(const Value& context) {
    scopes_.emplace_back();
    const Value globals = make_globals();
    for (const auto& [k, v] : globals.as_map().items) scopes_[0][k] = v;
    if (context.is_map())
      for (const auto& [k, v] : context.as_map().items) scopes_[0][k] = v;
  }

  std::string out;
  DataSpans out_spans;  ///< the parts of `out` that came from caller data

  Flow exec(const Body& body) {
    for (const auto& n : body) {
      const Flow f = exec(*n);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

 private:
  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value::undefined(name);
  }

  void emit(std::string_view s, const DataSpans* spans, int line) {
    append_marked(out, out_spans, s, spans);
    if (out.size() > kMaxOutputBytes)
      template_fail(line, "the rendered text exceeds {} bytes; a runaway template?", kMaxOutputBytes);
  }

  void assign(const Node& n, const Value& v) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = v;
      return;
    }
    if (!v.is_list() || v.as_list().size() != n.targets.size())
      template_fail(n.line, "cannot unpack {} into {} names", kind_name(v.kind()), n.targets.size());
    for (size_t i = 0; i < n.targets.size(); ++i) scopes_.back()[n.targets[i]] = v.as_list()[i];
  }

  Flow exec(const Node& n) {
    switch (n.k) {
      case Node::K::Text: emit(n.text, nullptr, n.line); return Flow::Normal;
      case Node::K::Output: {
        const Value v = text_of(eval(*n.expr), n.line);
        emit(v.as_string(), v.data_spans(), n.line);
        return Flow::Normal;
      }
      case Node::K::If:
        for (const auto& [cond, body] : n.branches)
          if (!cond || truthy(eval(*cond))) return exec(body);
        return Flow::Normal;
      case Node::K::For: return exec_for(n);
      case Node::K::Set: {
        Value v = eval(*n.expr);
        if (!n.attr.empty()) {
          Value target = lookup(n.targets[0]);
          if (!target.is_map() || !target.as_map().is_namespace)
            template_fail(n.line, "cannot set attribute '{}' of '{}': it is not a namespace()", n.attr,
                          n.targets[0]);
          check_nesting(v, &target.as_map(), n.line);
          target.as_map().set(n.attr, std::move(v));
          return Flow::Normal;
        }
        check_nesting(v, nullptr, n.line);
        assign(n, v);
        return Flow::Normal;
      }
      case Node::K::SetBlock: {
        std::string saved;
        DataSpans saved_spans;
        saved.swap(out);
        saved_spans.swap(out_spans);
        exec(n.body);
        std::string captured;
        DataSpans captured_spans;
        captured.swap(out);
        captured_spans.swap(out_spans);
        out.swap(saved);
        out_spans.swap(saved_spans);
        assign(n, Value::marked_string(std::move(captured), std::move(captured_spans)));
        return Flow::Normal;
      }
      case Node::K::Break: return Flow::Break;
      case Node::K::Continue: return Flow::Continue;
      case Node::K::Block: return exec(n.body);
    }
    return Flow::Normal;
  }

  Flow exec_for(const Node& n) {
    ValueList items = iterate(eval(*n.expr), n.line);
    auto bind = [&](const Value& item) {
      if (n.targets.size() == 1) {
        scopes_.back()[n.targets[0]] = item;
        return;
      }
      if (!item.is_list() || item.as_list().size() != n.targets.size())
        template_fail(n.line, "cannot unpack {} into {} loop variables", kind_name(item.kind()),
                      n.targets.size());
      for (size_t i = 0; i < n.targets.size(); ++i) scopes_.back()[n.targets[i]] = item.as_list()[i];
    };
    if (n.cond) {  // the loop filter runs before loop.index etc. are counted
      ValueList kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        charge_work(1, n.line);
        bind(item);
        const bool keep = truthy(eval(*n.cond));
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      scopes_.emplace_back();
      const Flow f = exec(n.else_body);
      scopes_.pop_back();
      return f == Flow::Break || f == Flow::Continue ? Flow::Normal : f;
    }
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      charge_work(1, n.line);
      scopes_.emplace_back();
      Value loop = Value::map();
      auto& m = loop.as_map();
      m.set("index", Value(i + 1));
      m.set("index0", Value(i));
      m.set("revindex", Value(len - i));
      m.set("revindex0", Value(len - i - 1));
      m.set("first", Value(i == 0));
      m.set("last", Value(i == len - 1));
      m.set("length", Value(len));
      m.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("loop.previtem"));
      m.set("nextitem", i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value::undefined("loop.nextitem"));
      m.set("cycle", Value::func("loop.cycle", [i](CallArgs& a) -> Value {
              if (a.pos.empty()) template_fail(a.line, "loop.cycle() needs at least one value");
              return a.pos[static_cast<size_t>(i) % a.pos.size()];
            }));
      scopes_.back()["loop"] = loop;
      bind(items[static_cast<size_t>(i)]);
      const Flow f = exec(n.body);
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  // Values kept by {% set %} outlive the expression that made them; a loop that wraps a value
  // in itself ({% set ns.x = [ns.x] %}) or a namespace stored in itself ({% set ns.x = ns %})
  // would otherwise make printing, comparing and freeing it recurse without bound. Walks `v`
  // (charging the work) and fails when it is nested more than kMaxValueDepth levels or
  // contains `self`.
  static void check_nesting(const Value& v, const ValueMap* self, int line, int depth = 0) {
    if (!v.is_list() && !v.is_map()) return;
    if (depth >= kMaxValueDepth)
      template_fail(line, "a value nested more than {} levels deep", kMaxValueDepth);
    if (v.is_map()) {
      if (&v.as_map() == self) template_fail(line, "a namespace cannot contain itself");
      charge_work(static_cast<int64_t>(v.as_map().items.size()), line);
      for (const auto& kv : v.as_map().items) check_nesting(kv.second, self, line, depth + 1);
      return;
    }
    charge_work(static_cast<int64_t>(v.as_list().size()), line);
    for (const Value& x : v.as_list()) check_nesting(x, self, line, depth + 1);
  }

  // a + b for strings, bounded like the output so that a loop cannot grow a string without end,
  // and charged one work unit per KiB copied (a loop that appends to a string copies it each
  // time, quadratic work that the iteration count alone does not bound).
  // The data spans of both parts are kept (shifted for b).
  static Value join_limited(const Value& a, const Value& b, int line) {
    const std::string &x = a.as_string(), &y = b.as_string();
    if (x.size() + y.size() > kMaxOutputBytes)
      template_fail(line, "a string longer than {} bytes; a runaway template?", kMaxOutputBytes);
    charge_work(static_cast<int64_t>((x.size() + y.size()) >> 10), line);
    std::string s;
    DataSpans spans;
    s.reserve(x.size() + y.size());
    append_marked(s, spans, x, a.data_spans());
    append_marked(s, spans, y, b.data_spans());
    return Value::marked_string(std::move(s), std::move(spans));
  }

  // {{ v }} and `~`: strings as they are (with their data spans), other values printed, all
  // data when they hold any caller data.
  static Value text_of(const Value& v, int line) {
    if (v.is_string()) return v;
    std::string s = to_str(v, line);
    return contains_data(v) ? Value::data_string(std::move(s)) : Value(std::move(s));
  }

  // A value computed from caller data (a filter, a method of a data string, a call with data
  // arguments) is data: its strings are marked unless they already carry marks.
  static Value derived(Value r, bool from_data) {
    if (!from_data) return r;
    if (r.is_string()) return r.has_data() ? r : Value::data_string(r.as_string());
    if (r.is_list() || r.kind() == Value::Kind::Func) return r.as_data();
    return r;
  }

  static bool args_have_data(const CallArgs& a) {
    for (const Value& v : a.pos)
      if (contains_data(v)) return true;
    for (const auto& kv : a.kw)
      if (contains_data(kv.second)) return true;
    return false;
  }

  [[noreturn]] static void undefined_error(const Value& v, int line) {
    template_fail(line, "'{}' is undefined", v.as_string().empty() ? "value" : v.as_string());
  }

  static Value arith(const std::string& op, const Value& a, const Value& b, int line) {
    if (a.is_undefined()) undefined_error(a, line);
    if (b.is_undefined()) undefined_error(b, line);
    if (op == "+") {
      if (a.is_string() && b.is_string()) return join_limited(a, b, line);
      if (a.is_list() && b.is_list()) {
        ValueList l = a.as_list();
        l.insert(l.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(l));
      }
    }
    if (op == "*" && ((a.is_string() || a.is_list()) && b.kind() == Value::Kind::Int)) {
      // The size is checked before anything is allocated; an empty operand gives an empty result
      // at once (the copy loop would otherwise run n times for nothing).
      const int64_t n = std::max<int64_t>(0, b.as_int());
      if (a.is_string()) {
        const std::string& s = a.as_string();
        if (s.empty() || n == 0) return Value(std::string());
        if (static_cast<uint64_t>(n) > kMaxOutputBytes / s.size())
          template_fail(line, "string repetition: {} copies of {} bytes exceed {} bytes", n, s.size(), kMaxOutputBytes);
        const size_t total = s.size() * static_cast<size_t>(n);
        // One work unit per KiB built (as join_limited charges): a loop of large repetitions is
        // bounded by the work limit, not only each result by the output limit.
        charge_work(static_cast<int64_t>(total >> 10), line);
        std::string r;
        r.reserve(total);
        r += s;
        while (r.size() < total) r.append(r, 0, std::min(r.size(), total - r.size()));  // doubling copies
        return a.has_data() ? Value::data_string(std::move(r)) : Value(std::move(r));
      }
      const ValueList& items = a.as_list();
      if (items.empty() || n == 0) return Value::list();
      // Strings are copied with the list (lists and dicts inside it are shared): both the item
      // count and the copied string bytes are bounded.
      size_t bytes = 0;
      for (const Value& x : items) bytes += x.is_string() ? x.as_string().size() : 0;
      if (static_cast<uint64_t>(n) > kMaxListItems / items.size() ||
          (bytes > 0 && static_cast<uint64_t>(n) > kMaxOutputBytes / bytes))
        template_fail(line, "list repetition: {} copies of {} items ({} bytes of strings) exceed {} items or {} bytes",
                      n, items.size(), bytes, kMaxListItems, kMaxOutputBytes);
      ValueList l;
      l.reserve(items.size() * static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) l.insert(l.end(), items.begin(), items.end());
      charge_work(static_cast<int64_t>(l.size()), line);
      return Value::list(std::move(l));
    }
    if (!a.is_number() || !b.is_number())
      template_fail(line, "unsupported operand types for {}: {} and {}", op, kind_name(a.kind()),
                    kind_name(b.kind()));
    return arith_numbers(op, a, b, line);
  }

  static bool contains(const Value& container, const Value& item, int line) {
    if (container.is_string()) {
      if (!item.is_string())
        template_fail(line, "'in <string>' needs a string on the left, not {}", kind_name(item.kind()));
      return container.as_string().find(item.as_string()) != std::string::npos;
    }
    if (container.is_list()) {
      for (const Value& v : container.as_list())
        if (equals(v, item)) return true;
      return false;
    }
    if (container.is_map()) return item.is_string() && container.as_map().find(item.as_string()) != nullptr;
    if (container.is_undefined()) return false;
    template_fail(line, "'in' needs a string, list or dict on the right, not {}", kind_name(container.kind()));
  }

  CallArgs eval_args(const Expr& e, size_t first) {
    CallArgs a;
    a.line = e.line;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(eval(*e.args[i]));
    for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v));
    return a;
  }

  Value eval(const Expr& e) {
    switch (e.k) {
      case Expr::K::Literal: return e.value;
      case Expr::K::Name: return lookup(e.name);
      case Expr::K::List: {
        ValueList l;
        for (const auto& a : e.args) l.push_back(eval(*a));
        return Value::list(std::move(l));
      }
      case Expr::K::Dict: {
        Value m = Value::map();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value k = eval(*e.args[i]);
          if (!k.is_string()) template_fail(e.line, "dict keys must be strings, not {}", kind_name(k.kind()));
          if (k.has_data()) m.as_map().keys_are_data = true;
          m.as_map().set(k.as_string(), eval(*e.args[i + 1]));
        }
        return m;
      }
      case Expr::K::Attr: {
        Value obj = eval(*e.args[0]);
        if (obj.is_undefined()) undefined_error(obj, e.line);
        Value r = get_attr(obj, e.name, e.line);
        if (r.is_undefined()) r = Value::undefined(e.name);
        if (obj.is_string() && obj.has_data()) r = derived(std::move(r), true);  // str methods
        return r;
      }
      case Expr::K::Index: {
        Value obj = eval(*e.args[0]);
        if (obj.is_undefined()) undefined_error(obj, e.line);
        Value key = eval(*e.args[1]);
        Value r = get_item(obj, key, e.line);
        return obj.is_string() ? derived(std::move(r), obj.has_data()) : r;
      }
      case Expr::K::Slice: {
        Value obj = eval(*e.args[0]);
        if (obj.is_undefined()) undefined_error(obj, e.line);
        auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i]) : Value::none(); };
        Value r = get_slice(obj, part(1), part(2), part(3), e.line);
        return obj.is_string() ? derived(std::move(r), obj.has_data()) : r;
      }
      case Expr::K::Call: {
        Value f = eval(*e.args[0]);
        if (f.is_undefined()) template_fail(e.line, "'{}' is undefined (cannot call it)", f.as_string());
        if (f.kind() != Value::Kind::Func) template_fail(e.line, "{} is not callable", kind_name(f.kind()));
        CallArgs a = eval_args(e, 1);
        const bool from_data = f.has_data() || args_have_data(a);
        return derived(f.as_func()(a), from_data);
      }
      case Expr::K::Filter: {
        Value v = eval(*e.args[0]);
        CallArgs a = eval_args(e, 1);
        Value r = apply_filter(e.name, v, a);
        // Filters that return their input or items of it (default, first, select, sort, ...)
        // keep the marks those values have; new strings made from data are data.
        if (r.is_string() && r.has_data()) return r;
        if (!r.is_string() && !r.is_list()) return r;
        return derived(std::move(r), contains_data(v) || args_have_data(a));
      }
      case Expr::K::Test: {
        Value v = eval(*e.args[0]);
        CallArgs a = eval_args(e, 1);
        return Value(apply_test(e.name, v, a) != e.negated);
      }
      case Expr::K::Unary: {
        Value v = eval(*e.args[0]);
        if (e.name == "not") return Value(!truthy(v));
        if (v.is_undefined()) undefined_error(v, e.line);
        if (!v.is_number()) template_fail(e.line, "bad operand type for unary {}: {}", e.name, kind_name(v.kind()));
        if (e.name == "+") return v;
        return negate_number(v, e.line);
      }
      case Expr::K::Binary: {
        Value a = eval(*e.args[0]);
        Value b = eval(*e.args[1]);
        const std::string& op = e.name;
        if (op == "==") return Value(equals(a, b));
        if (op == "!=") return Value(!equals(a, b));
        if (op == "in") return Value(contains(b, a, e.line));
        if (op == "notin") return Value(!contains(b, a, e.line));
        if (op == "~") return join_limited(text_of(a, e.line), text_of(b, e.line), e.line);
        if (op == "<" || op == ">" || op == "<=" || op == ">=") {
          if (a.is_undefined()) undefined_error(a, e.line);
          if (b.is_undefined()) undefined_error(b, e.line);
          const int c = compare(a, b, e.line);
          return Value(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
        }
        return arith(op, a, b, e.line);
      }
      case Expr::K::And: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? eval(*e.args[1]) : a;
      }
      case Expr::K::Or: {
        Value a = eval(*e.args[0]);
        return truthy(a) ? a : eval(*e.args[1]);
      }
      case Expr::K::Cond: {
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("");
      }
    }
    return Value::undefined("");
  }

  std::vector<std::unordered_map<std::string, Value>> scopes_;
};

}  // namespace

Template::Template(std::string_view source)
    : body_(std::make_unique<Body>(parse_template(source))) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

Rendered Template::render_marked(const Value& context) const {
  reset_work();
  Interp in(context);
  if (in.exec(*body_) != Flow::Normal) fail("chat template: break or continue outside a for loop");
  return Rendered{std::move(in.out), std::move(in.out_spans)};
}

std::string Template::render(const Value& context) const { return render_marked(context).text; }

}  // namespace minfer::jinja
