// Syntax of the Jinja subset: lexer tokens, template segments, expression and statement nodes.
// Internal to src/chat (jinja.h is the public interface).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace minfer::jinja {

struct Tok {
  enum class K { Name, String, Int, Float, Op, End };
  K k = K::End;
  std::string text;  ///< name, operator, or the decoded string literal
  int64_t i = 0;
  double f = 0.0;
  int line = 0;
};

/// Template source cut into text, {{ expression }} and {% statement %} pieces, with the
/// whitespace control of Jinja (`-` markers) and of HF's environment (trim_blocks and
/// lstrip_blocks on) already applied to the text pieces. Comments are dropped.
struct Segment {
  enum class K { Text, Expr, Stmt };
  K k = K::Text;
  std::string text;
  std::vector<Tok> toks;  ///< Expr/Stmt: the tag's tokens, ending with an End token
  int line = 1;
};

/// Throws minfer::Error naming the line for unterminated tags, strings or bad characters.
std::vector<Segment> lex_template(std::string_view source);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class K {
    Literal,  // value
    Name,     // name
    List,     // args
    Dict,     // kwargs-like: args alternate key, value
    Attr,     // args[0].name
    Index,    // args[0][args[1]]
    Slice,    // args[0][args[1]:args[2]:args[3]] (null = omitted)
    Call,     // args[0](args[1..], kwargs)
    Filter,   // args[0] | name(args[1..], kwargs)
    Test,     // args[0] is [not] name(args[1..])
    Unary,    // name = "-", "+", "not"
    Binary,   // args[0] name args[1]; name in + - * / // % ** ~ == != < > <= >= in notin
    And,
    Or,
    Cond,     // args[1] if args[0] else args[2] (args[2] may be null)
  };
  K k = K::Literal;
  int line = 0;
  int height = 1;  ///< levels in this subtree (1 for a leaf); the parser bounds it
  Value value;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class K { Text, Output, If, For, Set, SetBlock, Break, Continue, Block };
  K k = K::Text;
  int line = 0;
  std::string text;                              ///< Text
  ExprPtr expr;                                  ///< Output, Set value, For iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  ///< If: (condition or null for else, body)
  std::vector<std::string> targets;              ///< For loop variables; Set/SetBlock names
  std::string attr;                              ///< Set: {% set targets[0].attr = ... %}
  ExprPtr cond;                                  ///< For: the `if` filter
  Body body, else_body;                          ///< For (else: when empty); SetBlock; Block
};

/// Parses the whole template. Throws minfer::Error "chat template line N: ..." naming the
/// construct it cannot parse (e.g. an unsupported statement such as macro or include).
Body parse_template(std::string_view source);

}  // namespace minfer::jinja
