// Jinja lexer: template text and tags, whitespace control (Jinja's "-" and "+" markers;
// trim_blocks and lstrip_blocks, which transformers turns on for chat templates).
#include <algorithm>
#include <cctype>

#include "chat/jinja_ast.h"

namespace minfer::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

class Lexer {
 public:
  explicit Lexer(std::string_view src) : s_(src) {}

  std::vector<Segment> run() {
    std::vector<Segment> out;
    bool strip_next = false;  // a "-" closed the previous tag
    bool trim_newline = false;  // trim_blocks after a %} or #}
    while (pos_ < s_.size()) {
      const size_t open = find_open(pos_);
      std::string text(s_.substr(pos_, open - pos_));
      if (strip_next) {
        size_t k = 0;
        while (k < text.size() && is_ws(text[k])) ++k;
        text.erase(0, k);
      } else if (trim_newline) {
        if (text.rfind("\r\n", 0) == 0) text.erase(0, 2);
        else if (!text.empty() && text[0] == '\n') text.erase(0, 1);
      }
      strip_next = trim_newline = false;
      const int text_line = line_at(pos_);
      if (open == s_.size()) {
        push_text(out, std::move(text), text_line);
        break;
      }
      const char kind = s_[open + 1];  // '{', '%' or '#'
      size_t p = open + 2;
      const char marker = p < s_.size() ? s_[p] : '\0';
      if (marker == '-') {
        while (!text.empty() && is_ws(text.back())) text.pop_back();
        ++p;
      } else if (marker == '+') {
        ++p;
      } else if (kind != '{') {
        // lstrip_blocks: drop spaces and tabs between the line start and a block/comment tag
        // (decided on the source, as Jinja's lexer does).
        const size_t raw_start = pos_;
        size_t k = open;
        while (k > raw_start && (s_[k - 1] == ' ' || s_[k - 1] == '\t')) --k;
        if (k == 0 || s_[k - 1] == '\n') text.erase(text.size() - std::min(text.size(), open - k));
      }
      push_text(out, std::move(text), text_line);
      const int line = line_at(open);
      if (kind == '#') {
        const size_t close = s_.find("#}", p);
        if (close == std::string_view::npos) template_fail(line, "unterminated comment {{#");
        strip_next = close > p && s_[close - 1] == '-';
        trim_newline = !strip_next && !(close > p && s_[close - 1] == '+');
        pos_ = close + 2;
        continue;
      }
      Segment seg;
      seg.k = kind == '{' ? Segment::K::Expr : Segment::K::Stmt;
      seg.line = line;
      pos_ = p;
      const char end_char = kind == '{' ? '}' : '%';
      lex_tag(seg.toks, end_char, strip_next, trim_newline);
      if (kind == '{') trim_newline = false;
      out.push_back(std::move(seg));
    }
    return out;
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t i = from; i + 1 < s_.size(); ++i)
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return s_.size();
  }

  int line_at(size_t pos) {
    while (line_pos_ < pos && line_pos_ < s_.size()) {
      if (s_[line_pos_] == '\n') ++line_;
      ++line_pos_;
    }
    return line_;
  }

  static void push_text(std::vector<Segment>& out, std::string text, int line) {
    if (text.empty()) return;
    Segment seg;
    seg.k = Segment::K::Text;
    seg.text = std::move(text);
    seg.line = line;
    out.push_back(std::move(seg));
  }

  // Tokens up to the closing "}}" or "%}" (bracket depth 0), with an optional "-"/"+" marker.
  void lex_tag(std::vector<Tok>& toks, char end_char, bool& strip_next, bool& trim_newline) {
    int depth = 0;
    const int start_line = line_at(pos_);
    while (true) {
      while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
      if (pos_ >= s_.size())
        template_fail(start_line, "unterminated tag (missing '{}}}')", end_char == '}' ? "}" : "%");
      const int line = line_at(pos_);
      auto at = [&](std::string_view t) { return s_.substr(pos_, t.size()) == t; };
      const std::string close = std::string(1, end_char) + "}";
      if (depth == 0 && (at("-" + close) || at("+" + close) || at(close))) {
        strip_next = at("-" + close);
        trim_newline = end_char == '%' && !strip_next && !at("+" + close);
        pos_ += at(close) ? 2 : 3;
        toks.push_back(Tok{Tok::K::End, "", 0, 0.0, line});
        return;
      }
      const char c = s_[pos_];
      Tok t;
      t.line = line;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
        t.k = Tok::K::Name;
        t.text = std::string(s_.substr(pos_, e - pos_));
        pos_ = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(t);
      } else if (c == '\'' || c == '"') {
        lex_string(t, c);
      } else {
        static const char* const ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/",
                                          "%",  "~",  "<",  ">",  "=",  "(",  ")", "[", "]", "{",
                                          "}",  ",",  ":",  ".",  "|"};
        bool found = false;
        for (const char* op : ops) {
          if (at(op)) {
            t.k = Tok::K::Op;
            t.text = op;
            pos_ += t.text.size();
            found = true;
            break;
          }
        }
        if (!found) template_fail(line, "unexpected character '{}' in a tag", c);
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if ((t.text == ")" || t.text == "]" || t.text == "}") && depth > 0) --depth;
      }
      toks.push_back(std::move(t));
    }
  }

  void lex_number(Tok& t) {
    size_t e = pos_;
    while (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) ++e;
    bool is_float = false;
    if (e + 1 < s_.size() && s_[e] == '.' && std::isdigit(static_cast<unsigned char>(s_[e + 1]))) {
      is_float = true;
      ++e;
      while (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) ++e;
    }
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t k = e + 1;
      if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
      if (k < s_.size() && std::isdigit(static_cast<unsigned char>(s_[k]))) {
        is_float = true;
        e = k;
        while (e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e]))) ++e;
      }
    }
    const std::string num(s_.substr(pos_, e - pos_));
    try {
      if (is_float) {
        t.k = Tok::K::Float;
        t.f = std::stod(num);
      } else {
        t.k = Tok::K::Int;
        t.i = std::stoll(num);
      }
    } catch (const std::exception&) {
      template_fail(t.line, "number '{}' is out of range", num);
    }
    pos_ = e;
  }

  void lex_string(Tok& t, char q) {
    t.k = Tok::K::String;
    size_t i = pos_ + 1;
    while (true) {
      if (i >= s_.size()) template_fail(t.line, "unterminated string literal");
      const char c = s_[i];
      if (c == q) break;
      if (c == '\\' && i + 1 < s_.size()) {
        const char e = s_[i + 1];
        i += 2;
        switch (e) {
          case 'n': t.text += '\n'; break;
          case 't': t.text += '\t'; break;
          case 'r': t.text += '\r'; break;
          case '\\': t.text += '\\'; break;
          case '\'': t.text += '\''; break;
          case '"': t.text += '"'; break;
          case '0': t.text += '\0'; break;
          case '\n': break;  // line continuation
          default: t.text += '\\'; t.text += e; break;  // Python keeps unknown escapes
        }
        continue;
      }
      t.text += c;
      ++i;
    }
    pos_ = i + 1;
  }

  std::string_view s_;
  size_t pos_ = 0;
  size_t line_pos_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Segment> lex_template(std::string_view source) { return Lexer(source).run(); }

}  // namespace minfer::jinja
