#include "tokenizer/utf8.h"

#include "core/error.h"

namespace minfer::tok {

size_t utf8_char_len(std::string_view s, size_t pos) {
  const size_t n = s.size();
  if (pos >= n) return 0;
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return 1;
  auto cont = [&](size_t k) { return pos + k < n && (static_cast<uint8_t>(s[pos + k]) & 0xC0) == 0x80; };
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    const auto b1 = static_cast<uint8_t>(s[pos + 1]);
    if (b0 == 0xE0 && b1 < 0xA0) return 0;  // overlong
    if (b0 == 0xED && b1 > 0x9F) return 0;  // surrogate
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    const auto b1 = static_cast<uint8_t>(s[pos + 1]);
    if (b0 == 0xF0 && b1 < 0x90) return 0;  // overlong
    if (b0 == 0xF4 && b1 > 0x8F) return 0;  // > U+10FFFF
    return 4;
  }
  return 0;  // continuation byte, C0/C1, F5..FF
}

bool utf8_is_valid(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    // ASCII fast path
    if (static_cast<uint8_t>(s[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t len = utf8_char_len(s, pos);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

std::string utf8_sanitize(std::string_view s) {
  if (utf8_is_valid(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t len = utf8_char_len(s, pos);
    if (len == 0) {
      out.append(kReplacementChar);
      ++pos;
    } else {
      out.append(s.substr(pos, len));
      pos += len;
    }
  }
  return out;
}

void utf8_append(std::string& out, uint32_t cp) {
  MINFER_ASSERT(cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF));
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t utf8_decode(std::string_view s, size_t pos, size_t n) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[pos + k])); };
  switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    default: MINFER_ASSERT(false && "utf8_decode: bad length");
  }
  return 0;
}

}  // namespace minfer::tok
