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

/// A byte range [begin, end) of a string that came from the caller (message content, roles,
/// tools, any value of the render context other than bos_token/eos_token), as opposed to the
/// template's own text. The chat tokenizer parses special tokens only outside these ranges.
struct DataSpan {
  size_t begin = 0;
  size_t end = 0;
};
/// Sorted, non-overlapping, non-empty, not touching (adjacent ranges are merged).
using DataSpans = std::vector<DataSpan>;

/// Appends `s` (marked by `spans`, relative to s) to `out` (marked by `out_spans`), merging a
/// span that touches the previous one.
void append_marked(std::string& out, DataSpans& out_spans, std::string_view s, const DataSpans* spans);

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
  bool keys_are_data = false;  ///< the keys came from the caller (iterating gives data strings)
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);
};

/// A key of `m` as a string Value, marked as data when the map's keys came from the caller.
Value key_value(const ValueMap& m, const std::string& key);

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
  /// A string that came from the caller: all of it is data.
  static Value data_string(std::string s);
  /// A string with the given data spans (empty: template text).
  static Value marked_string(std::string s, DataSpans spans);

  /// Data spans of a string (nullptr or empty: none). A Func bound to a data string (its
  /// methods) carries one span too, so that what it returns is marked.
  const DataSpans* data_spans() const { return spans_.get(); }
  /// True when this string (or bound method) holds caller data.
  bool has_data() const { return spans_ && !spans_->empty(); }
  /// This value with every string in it marked as data: strings whole, lists and dicts copied
  /// one level (their string items marked), other values unchanged.
  Value as_data() const;

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
  std::shared_ptr<const DataSpans> spans_;
};

/// True when `v` holds caller data anywhere: a marked string, a dict with data keys, or a list
/// or dict containing one (walked to kMaxDataDepth levels; deeper counts as data).
bool contains_data(const Value& v, int depth = 0);
inline constexpr int kMaxDataDepth = 64;

/// "undefined", "none", "boolean", "integer", "float", "string", "list", "dict", "function".
const char* kind_name(Value::Kind k);

/// Python truthiness (undefined, none, false, 0, "", [], {} are false).
bool truthy(const Value& v);

/// Output limit of one render, in bytes, and the longest string any operation may make. A chat
/// prompt this long (about 2M tokens at ~4 bytes per token) fits no context window; a runaway
/// template stops with an error instead of filling memory and handing the tokenizer tens of
/// megabytes. Every filter or function that makes a string of a size the template chooses
/// (indent, tojson(indent=N), 'x' * N, replace, join, printing a list) checks it against this
/// limit before allocating.
inline constexpr size_t kMaxOutputBytes = 8u << 20;
/// The longest list an operation may make (range(), list repetition).
inline constexpr size_t kMaxListItems = 1'000'000;

/// What {{ v }} prints: strings as they are, True/False/None, Python reprs for lists and dicts,
/// "" for undefined. Throws minfer::Error "chat template line LINE: ..." when the text would
/// exceed kMaxOutputBytes (a list holding itself by reference many times over).
std::string to_str(const Value& v, int line = 0);

/// Python repr(); the same limit as to_str.
std::string repr(const Value& v, int line = 0);

/// json.dumps(v, ensure_ascii=False, indent=indent): indent < 0 for None (one line, ", " and
/// ": " separators), 0 or more for pretty-printing with "," and ": ". Throws for undefined values
/// and functions, and when the text would exceed kMaxOutputBytes (checked as it grows, before
/// each indentation is appended).
std::string to_json(const Value& v, int64_t indent, int line);

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
