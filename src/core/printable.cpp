#include "core/printable.h"

#include <fmt/format.h>

#include <cstdint>

namespace minfer {
namespace {

// Length of the valid UTF-8 sequence starting at s[i] (RFC 3629), or 0 when it is not one;
// `cp` is set to its code point when it is one.
size_t valid_utf8_len(std::string_view s, size_t i, uint32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  size_t n;
  cp = b0;
  if (b0 < 0x80) return 1;
  if (b0 >= 0xc2 && b0 <= 0xdf) n = 2, cp = b0 & 0x1f;
  else if (b0 >= 0xe0 && b0 <= 0xef) n = 3, cp = b0 & 0x0f;
  else if (b0 >= 0xf0 && b0 <= 0xf4) n = 4, cp = b0 & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;  // overlong, too big
  if (cp >= 0xd800 && cp <= 0xdfff) return 0;                                           // surrogate
  return n;
}

// Unicode bidirectional formatting characters (Unicode UAX #9, "Explicit Directional
// Embeddings/Overrides/Isolates" and the implicit marks): they reorder how the rest of the line
// is displayed, so a file name can show as another one.
bool is_bidi_control(uint32_t cp) {
  return (cp >= 0x202a && cp <= 0x202e) ||  // LRE RLE PDF LRO RLO
         (cp >= 0x2066 && cp <= 0x2069) ||  // LRI RLI FSI PDI
         cp == 0x200e || cp == 0x200f ||    // LRM RLM
         cp == 0x061c;                      // ALM
}

}  // namespace

std::string printable(std::string_view s, bool escape_quotes) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    uint32_t cp = 0;
    const size_t n = valid_utf8_len(s, i, cp);
    if (n == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    if (n == 1) {
      if (c == '\n') out += "\\n";
      else if (c == '\r') out += "\\r";
      else if (c == '\t') out += "\\t";
      else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
      else if (escape_quotes && (c == '"' || c == '\\')) out += {'\\', static_cast<char>(c)};
      else out += static_cast<char>(c);
    } else if ((cp >= 0x80 && cp <= 0x9f) || is_bidi_control(cp)) {
      out += fmt::format("\\u{:04x}", cp);  // a C1 control (U+0080..U+009F) or a bidi control
    } else {
      out.append(s, i, n);
    }
    i += n;
  }
  return out;
}

}  // namespace minfer
