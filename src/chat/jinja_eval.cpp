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

// Output limit of one render. A chat prompt this long (about 2M tokens at ~4 bytes per token)
// fits no context window; a runaway template stops here with an error instead of filling memory
// and handing the tokenizer tens of megabytes.
constexpr size_t kMaxOutputBytes = 8u << 20;
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

  void emit(std::string_view s, int line) {
    out += s;
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
      case Node::K::Text: emit(n.text, n.line); return Flow::Normal;
      case Node::K::Output: emit(to_str(eval(*n.expr)), n.line); return Flow::Normal;
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
        saved.swap(out);
        exec(n.body);
        std::string captured;
        captured.swap(out);
        out.swap(saved);
        assign(n, Value(std::move(captured)));
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
  static std::string join_limited(const std::string& a, const std::string& b, int line) {
    if (a.size() + b.size() > kMaxOutputBytes)
      template_fail(line, "a string longer than {} bytes; a runaway template?", kMaxOutputBytes);
    charge_work(static_cast<int64_t>((a.size() + b.size()) >> 10), line);
    return a + b;
  }

  [[noreturn]] static void undefined_error(const Value& v, int line) {
    template_fail(line, "'{}' is undefined", v.as_string().empty() ? "value" : v.as_string());
  }

  static Value arith(const std::string& op, const Value& a, const Value& b, int line) {
    if (a.is_undefined()) undefined_error(a, line);
    if (b.is_undefined()) undefined_error(b, line);
    const bool ints = a.kind() == Value::Kind::Int && b.kind() == Value::Kind::Int;
    if (op == "+") {
      if (a.is_string() && b.is_string()) return Value(join_limited(a.as_string(), b.as_string(), line));
      if (a.is_list() && b.is_list()) {
        ValueList l = a.as_list();
        l.insert(l.end(), b.as_list().begin(), b.as_list().end());
        return Value::list(std::move(l));
      }
    }
    if (op == "*" && ((a.is_string() || a.is_list()) && b.kind() == Value::Kind::Int)) {
      const int64_t n = std::max<int64_t>(0, b.as_int());
      if (a.is_string()) {
        if (static_cast<double>(n) * static_cast<double>(a.as_string().size()) > kMaxOutputBytes)
          template_fail(line, "string repetition too large");
        std::string s;
        for (int64_t k = 0; k < n; ++k) s += a.as_string();
        return Value(std::move(s));
      }
      if (static_cast<double>(n) * static_cast<double>(a.as_list().size()) > 1e6)
        template_fail(line, "list repetition too large");
      ValueList l;
      for (int64_t k = 0; k < n; ++k) l.insert(l.end(), a.as_list().begin(), a.as_list().end());
      return Value::list(std::move(l));
    }
    if (!a.is_number() || !b.is_number())
      template_fail(line, "unsupported operand types for {}: {} and {}", op, kind_name(a.kind()),
                    kind_name(b.kind()));
    const double x = a.as_number(), y = b.as_number();
    if (op == "+") return ints ? Value(a.as_int() + b.as_int()) : Value(x + y);
    if (op == "-") return ints ? Value(a.as_int() - b.as_int()) : Value(x - y);
    if (op == "*") return ints ? Value(a.as_int() * b.as_int()) : Value(x * y);
    if (op == "**") {
      if (ints && b.as_int() >= 0) {
        int64_t r = 1;
        for (int64_t k = 0; k < b.as_int() && k < 64; ++k) r *= a.as_int();
        return Value(r);
      }
      return Value(std::pow(x, y));
    }
    if (y == 0.0) template_fail(line, "division by zero");
    if (op == "/") return Value(x / y);
    if (op == "//") {
      if (ints) {
        int64_t q = a.as_int() / b.as_int();
        if ((a.as_int() % b.as_int() != 0) && ((a.as_int() < 0) != (b.as_int() < 0))) --q;
        return Value(q);
      }
      return Value(std::floor(x / y));
    }
    if (op == "%") {
      if (ints) {
        int64_t r = a.as_int() % b.as_int();
        if (r != 0 && ((r < 0) != (b.as_int() < 0))) r += b.as_int();
        return Value(r);
      }
      return Value(x - y * std::floor(x / y));
    }
    template_fail(line, "unknown operator '{}'", op);
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
          m.as_map().set(k.as_string(), eval(*e.args[i + 1]));
        }
        return m;
      }
      case Expr::K::Attr: {
        Value obj = eval(*e.args[0]);
        if (obj.is_undefined()) undefined_error(obj, e.line);
        Value r = get_attr(obj, e.name, e.line);
        if (r.is_undefined()) r = Value::undefined(e.name);
        return r;
      }
      case Expr::K::Index: {
        Value obj = eval(*e.args[0]);
        if (obj.is_undefined()) undefined_error(obj, e.line);
        return get_item(obj, eval(*e.args[1]), e.line);
      }
      case Expr::K::Slice: {
        Value obj = eval(*e.args[0]);
        if (obj.is_undefined()) undefined_error(obj, e.line);
        auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i]) : Value::none(); };
        return get_slice(obj, part(1), part(2), part(3), e.line);
      }
      case Expr::K::Call: {
        Value f = eval(*e.args[0]);
        if (f.is_undefined()) template_fail(e.line, "'{}' is undefined (cannot call it)", f.as_string());
        if (f.kind() != Value::Kind::Func) template_fail(e.line, "{} is not callable", kind_name(f.kind()));
        CallArgs a = eval_args(e, 1);
        return f.as_func()(a);
      }
      case Expr::K::Filter: {
        Value v = eval(*e.args[0]);
        CallArgs a = eval_args(e, 1);
        return apply_filter(e.name, v, a);
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
        return v.kind() == Value::Kind::Int ? Value(-v.as_int()) : Value(-v.as_number());
      }
      case Expr::K::Binary: {
        Value a = eval(*e.args[0]);
        Value b = eval(*e.args[1]);
        const std::string& op = e.name;
        if (op == "==") return Value(equals(a, b));
        if (op == "!=") return Value(!equals(a, b));
        if (op == "in") return Value(contains(b, a, e.line));
        if (op == "notin") return Value(!contains(b, a, e.line));
        if (op == "~") return Value(join_limited(to_str(a), to_str(b), e.line));
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

std::string Template::render(const Value& context) const {
  reset_work();
  Interp in(context);
  if (in.exec(*body_) != Flow::Normal) fail("chat template: break or continue outside a for loop");
  return std::move(in.out);
}

}  // namespace minfer::jinja
