// Values of the Jinja subset used by chat templates, with Python/Jinja semantics: truthiness,
// equality, str() (what {{ x }} prints), repr() (how lists print), and tojson as Hugging Face
// transformers defines it for chat templates (json.dumps with ensure_ascii=False, separators
// ", " and ": ", keys in insertion order). Lists and maps are shared by reference, like
// Python objects (a namespace() mutated inside a loop is seen outside it).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace minfer::jinja {

class Value;
using ValueList = std::vector<Value>;

/// Arguments of a call: positional, then keyword, and the template line (for errors).
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  int line = 0;
};
using Function = std::function<Value(CallArgs&)>;

/// Insertion-ordered map (dicts and namespace objects).
struct ValueMap {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  ///< namespace(): attributes may be assigned with {% set ns.x = ... %}
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Map, Func };

  Value() = default;  ///< undefined
  Value(bool b) : kind_(Kind::Bool), b_(b) {}
  Value(int v) : kind_(Kind::Int), i_(v) {}
  Value(int64_t v) : kind_(Kind::Int), i_(v) {}
  Value(double v) : kind_(Kind::Float), f_(v) {}
  Value(std::string s) : kind_(Kind::String), s_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::String), s_(s) {}

  static Value undefined(std::string name);
  static Value none();
  static Value list(ValueList items = {});
  static Value map();
  static Value func(std::string name, Function fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_map() const { return kind_ == Kind::Map; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_number() const { return kind_ == Kind::Int ? static_cast<double>(i_) : f_; }
  const std::string& as_string() const { return s_; }  ///< String; also the name of an Undefined/Func
  ValueList& as_list() const { return *l_; }
  ValueMap& as_map() const { return *m_; }
  const Function& as_func() const { return *fn_; }

 private:
  Kind kind_ = Kind::Undefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0.0;
  std::string s_;
  std::shared_ptr<ValueList> l_;
  std::shared_ptr<ValueMap> m_;
  std::shared_ptr<Function> fn_;
};

/// "undefined", "none", "boolean", "integer", "float", "string", "list", "dict", "function".
const char* kind_name(Value::Kind k);

/// Python truthiness (undefined, none, false, 0, "", [], {} are false).
bool truthy(const Value& v);

/// What {{ v }} prints: strings as they are, True/False/None, Python reprs for lists and dicts,
/// "" for undefined.
std::string to_str(const Value& v);

/// Python repr().
std::string repr(const Value& v);

/// json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: one line). Throws for
/// undefined values and functions.
std::string to_json(const Value& v, int indent, int line);

/// Python ==.
bool equals(const Value& a, const Value& b);

/// -1, 0, 1 for numbers (int/float mixed) and strings (bytewise); minfer::Error otherwise.
int compare(const Value& a, const Value& b, int line);

/// From JSON (objects keep their key order).
Value from_json(const nlohmann::ordered_json& j);

/// Throws minfer::Error "chat template line N: <message>".
template <typename... Args>
[[noreturn]] void template_fail(int line, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format("chat template line {}: {}", line, fmt::format(f, std::forward<Args>(args)...)));
}

/// Work limit of one render: a template may do at most kMaxWorkUnits units of work, where a
/// unit is one for-loop iteration (or loop-filter test) or one item made by range(). Real chat
/// templates loop over the messages and tools (thousands of units at most); the limit stops a
/// hostile template (nested range() loops) within seconds instead of hanging. {% set %} also
/// charges one unit per list item and dict entry of the value it keeps, string concatenation one
/// per KiB of its result (see jinja_eval.cpp).
inline constexpr int64_t kMaxWorkUnits = 2'000'000;

/// Charges `units` to the render running on this thread; throws minfer::Error
/// "chat template line N: ..." once the total passes kMaxWorkUnits.
void charge_work(int64_t units, int line);

/// Restarts the count of charge_work (Template::render calls it first).
void reset_work();

}  // namespace minfer::jinja
