// Jinja parser: statements (if/elif/else, for/else with loop filter, set, set blocks,
// break/continue, generation blocks) and expressions with Jinja's precedence:
// cond-expr < or < and < not < comparisons/in < + - < ~ < * / // % < ** < unary < postfix,
// where filters (|) and tests (is) bind to the postfix expression.
#include <algorithm>

#include "chat/jinja_ast.h"

namespace minfer::jinja {
namespace {

constexpr int kMaxDepth = 256;  // nesting limit, so a hostile template cannot exhaust the stack
// Height limit of one expression tree. Left-associative chains (1+1+..., a~b~..., x.y.z...,
// s|trim|trim...) are parsed by loops, not recursion, so kMaxDepth does not bound them; the
// evaluator and the destructor recurse once per level, so the tree height is bounded here.
// Real chat templates stay far below it (a long `~` chain has tens of terms).
constexpr int kMaxExprHeight = 1000;

class ExprParser {
 public:
  ExprParser(const std::vector<Tok>& toks, size_t pos = 0) : t_(toks), p_(pos) {}

  const Tok& peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  bool at_end() const { return peek().k == Tok::K::End; }
  bool is_op(std::string_view op, size_t k = 0) const { return peek(k).k == Tok::K::Op && peek(k).text == op; }
  bool is_name(std::string_view n, size_t k = 0) const { return peek(k).k == Tok::K::Name && peek(k).text == n; }
  const Tok& next() { return t_[std::min(p_++, t_.size() - 1)]; }
  void expect_op(std::string_view op) {
    if (!is_op(op)) template_fail(peek().line, "expected '{}' but found '{}'", op, describe(peek()));
    ++p_;
  }
  std::string expect_name() {
    if (peek().k != Tok::K::Name) template_fail(peek().line, "expected a name but found '{}'", describe(peek()));
    return next().text;
  }
  void expect_end() {
    if (!at_end()) template_fail(peek().line, "unexpected '{}' at the end of the tag", describe(peek()));
  }
  static std::string describe(const Tok& t) {
    switch (t.k) {
      case Tok::K::End: return "end of tag";
      case Tok::K::String: return "'" + t.text + "'";
      case Tok::K::Int: return std::to_string(t.i);
      case Tok::K::Float: return std::to_string(t.f);
      default: return t.text;
    }
  }

  ExprPtr parse() { return cond_expr(); }

  // Like parse() but without the conditional expression (for the `for ... in X if cond` form).
  ExprPtr parse_or() { return or_expr(); }

 private:
  ExprPtr make(Expr::K k, int line) {
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->line = line;
    return e;
  }
  void enter() {
    if (++depth_ > kMaxDepth) template_fail(peek().line, "expression nested too deeply");
  }
  // Sets e's height from its (already sealed) children; fails past kMaxExprHeight.
  ExprPtr seal(ExprPtr e) {
    int h = 0;
    for (const auto& a : e->args)
      if (a) h = std::max(h, a->height);
    for (const auto& kv : e->kwargs)
      if (kv.second) h = std::max(h, kv.second->height);
    e->height = h + 1;
    if (e->height > kMaxExprHeight)
      template_fail(e->line, "expression too long or nested too deeply (more than {} levels)", kMaxExprHeight);
    return e;
  }

  ExprPtr cond_expr() {
    enter();
    ExprPtr body = or_expr();
    if (is_name("if")) {
      const int line = next().line;
      auto e = make(Expr::K::Cond, line);
      ExprPtr test = or_expr();
      ExprPtr other;
      if (is_name("else")) {
        next();
        other = cond_expr();
      }
      e->args.push_back(std::move(test));
      e->args.push_back(std::move(body));
      e->args.push_back(std::move(other));
      body = seal(std::move(e));
    }
    --depth_;
    return body;
  }
  ExprPtr or_expr() {
    ExprPtr l = and_expr();
    while (is_name("or")) {
      auto e = make(Expr::K::Or, next().line);
      e->args.push_back(std::move(l));
      e->args.push_back(and_expr());
      l = seal(std::move(e));
    }
    return l;
  }
  ExprPtr and_expr() {
    ExprPtr l = not_expr();
    while (is_name("and")) {
      auto e = make(Expr::K::And, next().line);
      e->args.push_back(std::move(l));
      e->args.push_back(not_expr());
      l = seal(std::move(e));
    }
    return l;
  }
  ExprPtr not_expr() {
    if (is_name("not")) {
      enter();
      auto e = make(Expr::K::Unary, next().line);
      e->name = "not";
      e->args.push_back(not_expr());
      --depth_;
      return seal(std::move(e));
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr l = math1();
    while (true) {
      std::string op;
      if (peek().k == Tok::K::Op &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = peek().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "notin";
        next();
        next();
      } else {
        return l;
      }
      auto e = make(Expr::K::Binary, peek().line);
      e->name = op;
      e->args.push_back(std::move(l));
      e->args.push_back(math1());
      l = seal(std::move(e));
    }
  }
  ExprPtr binary_level(ExprPtr (ExprParser::*sub)(), std::initializer_list<std::string_view> ops) {
    ExprPtr l = (this->*sub)();
    while (true) {
      bool matched = false;
      for (auto op : ops)
        if (is_op(op)) {
          auto e = make(Expr::K::Binary, next().line);
          e->name = std::string(op);
          e->args.push_back(std::move(l));
          e->args.push_back((this->*sub)());
          l = seal(std::move(e));
          matched = true;
          break;
        }
      if (!matched) return l;
    }
  }
  ExprPtr math1() { return binary_level(&ExprParser::concat, {"+", "-"}); }
  ExprPtr concat() { return binary_level(&ExprParser::math2, {"~"}); }
  ExprPtr math2() { return binary_level(&ExprParser::power, {"*", "/", "//", "%"}); }
  ExprPtr power() { return binary_level(&ExprParser::signed_operand, {"**"}); }
  ExprPtr signed_operand() { return unary(true); }
  // As Jinja's parse_unary: the sign binds tighter than filters and tests (-2|abs is 2,
  // -2 is divisibleby(2) tests -2), so the operand of a sign takes no filters itself.
  ExprPtr unary(bool with_filters = true) {
    if (is_op("-") || is_op("+")) {
      enter();
      auto e = make(Expr::K::Unary, peek().line);
      e->name = next().text;
      e->args.push_back(unary(false));
      --depth_;
      ExprPtr u = seal(std::move(e));
      if (!with_filters) return u;
      return filters(std::move(u));
    }
    ExprPtr p = postfix(primary());
    if (!with_filters) return p;
    return filters(std::move(p));
  }

  void call_args(Expr& e) {  // after '('
    while (!is_op(")")) {
      if (peek().k == Tok::K::Name && is_op("=", 1)) {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse());
      } else {
        e.args.push_back(parse());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr filters(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        const int line = next().line;
        auto f = make(Expr::K::Filter, line);
        f->name = expect_name();
        f->args.push_back(std::move(e));
        if (is_op("(")) {
          next();
          call_args(*f);
        }
        e = seal(std::move(f));
      } else if (is_name("is")) {
        const int line = next().line;
        auto t = make(Expr::K::Test, line);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        t->name = expect_name();
        t->args.push_back(std::move(e));
        if (is_op("(")) {
          next();
          call_args(*t);
        } else if (peek().k == Tok::K::String || peek().k == Tok::K::Int ||
                   peek().k == Tok::K::Float || (peek().k == Tok::K::Name && !is_name("and") &&
                                                 !is_name("or") && !is_name("else") && !is_name("if"))) {
          t->args.push_back(primary());  // `is sameas x`, `is divisibleby 3`
        }
        e = seal(std::move(t));
      } else {
        return e;
      }
    }
  }

  ExprPtr postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const int line = next().line;
        auto a = make(Expr::K::Attr, line);
        if (peek().k == Tok::K::Int) {  // x.0 is x[0] in Jinja
          a->k = Expr::K::Index;
          auto idx = make(Expr::K::Literal, line);
          idx->value = Value(next().i);
          a->args.push_back(std::move(e));
          a->args.push_back(std::move(idx));
        } else {
          a->name = expect_name();
          a->args.push_back(std::move(e));
        }
        e = seal(std::move(a));
      } else if (is_op("[")) {
        const int line = next().line;
        ExprPtr parts[3];
        int n_colons = 0;
        if (!is_op(":")) parts[0] = parse();
        while (is_op(":") && n_colons < 2) {
          next();
          ++n_colons;
          if (!is_op(":") && !is_op("]")) parts[n_colons] = parse();
        }
        expect_op("]");
        auto s = make(n_colons ? Expr::K::Slice : Expr::K::Index, line);
        s->args.push_back(std::move(e));
        if (n_colons) {
          for (auto& p : parts) s->args.push_back(std::move(p));
        } else {
          if (!parts[0]) template_fail(line, "empty subscript []");
          s->args.push_back(std::move(parts[0]));
        }
        e = seal(std::move(s));
      } else if (is_op("(")) {
        const int line = next().line;
        auto c = make(Expr::K::Call, line);
        c->args.push_back(std::move(e));
        call_args(*c);
        e = seal(std::move(c));
      } else {
        return e;
      }
    }
  }

  ExprPtr primary() {
    enter();
    const Tok& t = peek();
    const int line = t.line;
    ExprPtr e;
    if (t.k == Tok::K::String) {
      e = make(Expr::K::Literal, line);
      std::string s = next().text;
      while (peek().k == Tok::K::String) s += next().text;  // adjacent literals concatenate
      e->value = Value(std::move(s));
    } else if (t.k == Tok::K::Int) {
      e = make(Expr::K::Literal, line);
      e->value = Value(next().i);
    } else if (t.k == Tok::K::Float) {
      e = make(Expr::K::Literal, line);
      e->value = Value(next().f);
    } else if (t.k == Tok::K::Name) {
      const std::string n = next().text;
      e = make(Expr::K::Literal, line);
      if (n == "true" || n == "True") e->value = Value(true);
      else if (n == "false" || n == "False") e->value = Value(false);
      else if (n == "none" || n == "None") e->value = Value::none();
      else {
        e->k = Expr::K::Name;
        e->name = n;
      }
    } else if (is_op("(")) {
      next();
      ExprPtr inner = parse();
      if (is_op(",")) {  // tuple: evaluated as a list
        e = make(Expr::K::List, line);
        e->args.push_back(std::move(inner));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          e->args.push_back(parse());
        }
      } else {
        e = std::move(inner);
      }
      expect_op(")");
    } else if (is_op("[")) {
      next();
      e = make(Expr::K::List, line);
      while (!is_op("]")) {
        e->args.push_back(parse());
        if (!is_op(",")) break;
        next();
      }
      expect_op("]");
    } else if (is_op("{")) {
      next();
      e = make(Expr::K::Dict, line);
      while (!is_op("}")) {
        e->args.push_back(parse());
        expect_op(":");
        e->args.push_back(parse());
        if (!is_op(",")) break;
        next();
      }
      expect_op("}");
    } else {
      template_fail(line, "unexpected '{}' in an expression", describe(t));
    }
    --depth_;
    return seal(std::move(e));
  }

  const std::vector<Tok>& t_;
  size_t p_;
  int depth_ = 0;
};

class Parser {
 public:
  explicit Parser(std::vector<Segment> segs) : segs_(std::move(segs)) {}

  Body parse_all() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  // Parses nodes until a statement whose keyword is in `ends` (returned in `end`, its segment
  // left current), or the end of the template when `ends` is empty.
  Body parse_body(std::initializer_list<std::string_view> ends, std::string& end) {
    if (++depth_ > kMaxDepth) template_fail(line(), "blocks nested too deeply");
    Body body;
    while (i_ < segs_.size()) {
      Segment& s = segs_[i_];
      if (s.k == Segment::K::Text) {
        auto n = node(Node::K::Text, s.line);
        n->text = std::move(s.text);
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      if (s.k == Segment::K::Expr) {
        ExprParser p(s.toks);
        auto n = node(Node::K::Output, s.line);
        n->expr = p.parse();
        p.expect_end();
        body.push_back(std::move(n));
        ++i_;
        continue;
      }
      if (s.toks.empty() || s.toks[0].k != Tok::K::Name) template_fail(s.line, "empty or malformed {{% %}} tag");
      const std::string kw = s.toks[0].text;
      for (auto e : ends)
        if (kw == e) {
          end = kw;
          --depth_;
          return body;
        }
      body.push_back(statement(kw));
    }
    if (ends.size() > 0) {
      std::string list;
      for (auto e : ends) list += (list.empty() ? "" : " or ") + std::string(e);
      template_fail(line(), "missing {{% {} %}}", list);
    }
    --depth_;
    return body;
  }

  NodePtr statement(const std::string& kw) {
    Segment& s = segs_[i_];
    ExprParser p(s.toks, 1);
    const int ln = s.line;
    if (kw == "if") {
      auto n = node(Node::K::If, ln);
      ExprPtr cond = p.parse();
      p.expect_end();
      ++i_;
      while (true) {
        std::string end;
        Body body = parse_body({"elif", "else", "endif"}, end);
        n->branches.emplace_back(std::move(cond), std::move(body));
        Segment& e = segs_[i_];
        ExprParser ep(e.toks, 1);
        if (end == "elif") {
          cond = ep.parse();
          ep.expect_end();
          ++i_;
          continue;
        }
        ep.expect_end();
        ++i_;
        if (end == "else") {
          std::string end2;
          Body else_body = parse_body({"endif"}, end2);
          ExprParser(segs_[i_].toks, 1).expect_end();
          ++i_;
          n->branches.emplace_back(nullptr, std::move(else_body));
        }
        return n;
      }
    }
    if (kw == "for") {
      auto n = node(Node::K::For, ln);
      n->targets.push_back(p.expect_name());
      while (p.is_op(",")) {
        p.next();
        n->targets.push_back(p.expect_name());
      }
      if (!p.is_name("in")) template_fail(ln, "expected 'in' in the for statement");
      p.next();
      n->expr = p.parse_or();
      if (p.is_name("if")) {
        p.next();
        n->cond = p.parse_or();
      }
      if (p.is_name("recursive")) template_fail(ln, "recursive for loops are not supported");
      p.expect_end();
      ++i_;
      std::string end;
      n->body = parse_body({"else", "endfor"}, end);
      ExprParser(segs_[i_].toks, 1).expect_end();
      ++i_;
      if (end == "else") {
        n->else_body = parse_body({"endfor"}, end);
        ExprParser(segs_[i_].toks, 1).expect_end();
        ++i_;
      }
      return n;
    }
    if (kw == "set") {
      std::vector<std::string> names{p.expect_name()};
      std::string attr;
      if (p.is_op(".")) {
        p.next();
        attr = p.expect_name();
      }
      while (attr.empty() && p.is_op(",")) {
        p.next();
        names.push_back(p.expect_name());
      }
      if (p.at_end() && attr.empty() && names.size() == 1) {  // {% set x %}...{% endset %}
        auto n = node(Node::K::SetBlock, ln);
        n->targets = std::move(names);
        ++i_;
        std::string end;
        n->body = parse_body({"endset"}, end);
        ExprParser(segs_[i_].toks, 1).expect_end();
        ++i_;
        return n;
      }
      p.expect_op("=");
      auto n = node(Node::K::Set, ln);
      n->targets = std::move(names);
      n->attr = std::move(attr);
      n->expr = p.parse();
      if (p.is_op(",")) template_fail(ln, "tuple values in set are not supported");
      p.expect_end();
      ++i_;
      return n;
    }
    if (kw == "break" || kw == "continue") {
      p.expect_end();
      ++i_;
      return node(kw == "break" ? Node::K::Break : Node::K::Continue, ln);
    }
    if (kw == "generation") {  // transformers' AssistantTracker extension: renders its body
      p.expect_end();
      ++i_;
      auto n = node(Node::K::Block, ln);
      std::string end;
      n->body = parse_body({"endgeneration"}, end);
      ++i_;
      return n;
    }
    template_fail(ln, "unsupported statement '{{% {} %}}' (minfer renders the Jinja subset of "
                      "chat templates: if, for, set, break, continue)", kw);
  }

  int line() const { return i_ < segs_.size() ? segs_[i_].line : (segs_.empty() ? 1 : segs_.back().line); }
  static NodePtr node(Node::K k, int line) {
    auto n = std::make_unique<Node>();
    n->k = k;
    n->line = line;
    return n;
  }

  std::vector<Segment> segs_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(lex_template(source)).parse_all(); }

}  // namespace minfer::jinja
