// Small helpers shared by the Jinja built-ins (argument access, Python string operations).
// Internal to src/chat.
#pragma once

#include <cctype>
#include <string>
#include <vector>

#include "chat/jinja_builtins.h"
#include "tokenizer/utf8.h"

namespace minfer::jinja {

inline const Value* arg(const CallArgs& a, size_t pos, std::string_view kw) {
  for (const auto& [k, v] : a.kw)
    if (k == kw) return &v;
  return pos < a.pos.size() ? &a.pos[pos] : nullptr;
}

inline const std::string& str_arg(const CallArgs& a, size_t pos, std::string_view kw, std::string_view fn) {
  const Value* v = arg(a, pos, kw);
  if (!v || !v->is_string())
    template_fail(a.line, "{}: argument '{}' must be a string{}", fn, kw, v ? std::string(", not ") + kind_name(v->kind()) : "");
  return v->as_string();
}

/// Work units charged for scanning `bytes` bytes of a string: one per 256 bytes, so that a loop
/// that indexes, slices or measures a long string cannot scan it without bound (2M units: 512 MB).
inline void charge_scan(size_t bytes, int line) { charge_work(static_cast<int64_t>(bytes >> 8), line); }

/// The UTF-8 code points of `s` (an invalid byte is one code point); charges the scan.
inline std::vector<std::string> code_points(const std::string& s, int line) {
  charge_scan(s.size(), line);
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t n = tok::utf8_char_len(s, pos);
    if (n == 0) n = 1;
    out.push_back(s.substr(pos, n));
    pos += n;
  }
  return out;
}

inline bool is_py_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

inline std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto in_set = [&](char c) {
    return chars && chars->is_string() ? chars->as_string().find(c) != std::string::npos : is_py_space(c);
  };
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && in_set(s[b])) ++b;
  if (right)
    while (e > b && in_set(s[e - 1])) --e;
  return s.substr(b, e - b);
}

inline std::string ascii_case(std::string s, bool upper) {
  for (char& c : s)
    if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    else if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  return s;
}

inline Value split(const std::string& s, const Value* sep_v, int64_t maxsplit, int line) {
  ValueList out;
  if (!sep_v || sep_v->is_none()) {  // runs of whitespace, no empty strings
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_py_space(s[i])) ++i;
      if (i >= s.size()) break;
      size_t j = i;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.emplace_back(s.substr(i));
        break;
      }
      while (j < s.size() && !is_py_space(s[j])) ++j;
      out.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return Value::list(std::move(out));
  }
  if (!sep_v->is_string() || sep_v->as_string().empty()) template_fail(line, "split: empty or non-string separator");
  const std::string& sep = sep_v->as_string();
  size_t i = 0;
  while (true) {
    const size_t j = s.find(sep, i);
    if (j == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.emplace_back(s.substr(i));
      break;
    }
    out.emplace_back(s.substr(i, j - i));
    i = j + sep.size();
  }
  return Value::list(std::move(out));
}

inline bool starts_or_ends(const std::string& s, const Value& what, bool starts, int line) {
  auto one = [&](const Value& p) {
    if (!p.is_string()) template_fail(line, "{}: expected a string, not {}", starts ? "startswith" : "endswith", kind_name(p.kind()));
    const std::string& x = p.as_string();
    if (x.size() > s.size()) return false;
    return starts ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (what.is_list()) {
    for (const Value& p : what.as_list())
      if (one(p)) return true;
    return false;
  }
  return one(what);
}

/// Python's str.replace(from, to, count) (count < 0: all; an empty `from` matches before each
/// code point and at the end). Builds the result in one pass and fails before it grows past
/// kMaxOutputBytes.
inline std::string replace_all(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                               int line) {
  std::string out;
  int64_t done = 0;
  auto put = [&](std::string_view piece) {
    if (out.size() + piece.size() > kMaxOutputBytes)
      template_fail(line, "replace: the result would exceed {} bytes", kMaxOutputBytes);
    out += piece;
  };
  if (from.empty()) {
    size_t pos = 0;
    while (pos < s.size()) {
      if (count < 0 || done < count) {
        put(to);
        ++done;
      }
      size_t n = tok::utf8_char_len(s, pos);
      if (n == 0) n = 1;
      put(std::string_view(s).substr(pos, n));
      pos += n;
    }
    if (count < 0 || done < count) put(to);
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    put(std::string_view(s).substr(pos, hit - pos));
    put(to);
    pos = hit + from.size();
    ++done;
  }
  put(std::string_view(s).substr(pos));
  return out;
}

inline std::string title_case(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (alpha) c = start ? static_cast<char>(std::toupper(static_cast<unsigned char>(c)))
                         : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    start = !alpha;
  }
  return out;
}

inline std::string capitalize(const std::string& s) {
  std::string out = ascii_case(s, false);
  if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  return out;
}

}  // namespace minfer::jinja
