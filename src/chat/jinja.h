// A Jinja interpreter for the subset chat templates use (Qwen2, Qwen2.5, Qwen3 and similar):
// statements if/elif/else, for (loop variables, loop filter, else), set (including
// namespace attributes and set blocks), break/continue; expressions with literals, lists,
// dicts, attribute/index/slice access, calls, filters, tests, arithmetic, comparisons, `in`,
// and/or/not, conditional expressions. Whitespace handling follows the environment
// transformers uses for chat templates (trim_blocks and lstrip_blocks on, `-` markers honoured).
// Anything outside the subset is a minfer::Error "chat template line N: ..." naming it.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "chat/jinja_value.h"

namespace minfer::jinja {

struct Node;

/// A rendered template: the text, and which parts of it came from caller data.
struct Rendered {
  std::string text;
  DataSpans data;
};

class Template {
 public:
  /// Parses `source`. Throws minfer::Error for syntax outside the subset.
  explicit Template(std::string_view source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  /// Renders with the variables of `context` (a dict Value) on top of the globals.
  /// Throws minfer::Error for run-time errors (undefined values used, type errors,
  /// raise_exception(...) called by the template).
  std::string render(const Value& context) const;

  /// The same render, with the byte ranges of the text that came from caller data: strings of
  /// `context` (except those the caller made with Value(std::string), such as bos_token) and
  /// everything computed from them. Concatenation keeps each part's marks; a filter, method
  /// or call result made from data is data as a whole; printing a list or dict that holds data
  /// is data. Literals and text of the template are not data.
  Rendered render_marked(const Value& context) const;

 private:
  std::unique_ptr<std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace minfer::jinja
