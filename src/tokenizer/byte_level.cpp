#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace minfer::tok {
namespace {

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 512> from_cp{};  // every code point of the alphabet is < 0x200
  Tables() {
    from_cp.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : next++;
      to_cp[static_cast<size_t>(b)] = cp;
      from_cp[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return tables().to_cp[b]; }

std::optional<uint8_t> codepoint_to_byte(uint32_t cp) {
  if (cp >= tables().from_cp.size() || tables().from_cp[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(tables().from_cp[cp]);
}

std::string bytes_to_token_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8_append(out, byte_to_codepoint(static_cast<uint8_t>(c)));
  return out;
}

std::string token_text_to_bytes(std::string_view text, bool* all_mapped) {
  std::string out;
  out.reserve(text.size());
  if (all_mapped) *all_mapped = true;
  const Tables& tb = tables();
  size_t pos = 0;
  while (pos < text.size()) {
    // Fast paths for the two forms every byte-level character takes (the results are those of
    // the general path below): ASCII, which is its own byte when printable ('!'..'~') and
    // otherwise copied through; and two-byte characters below U+0200, looked up directly.
    const auto c0 = static_cast<uint8_t>(text[pos]);
    if (c0 < 0x80) {
      out.push_back(static_cast<char>(c0));
      if (all_mapped && tb.from_cp[c0] < 0) *all_mapped = false;
      ++pos;
      continue;
    }
    if (c0 >= 0xC2 && c0 <= 0xC7 && pos + 1 < text.size() && (static_cast<uint8_t>(text[pos + 1]) & 0xC0) == 0x80) {
      const uint32_t cp = (uint32_t{c0} & 0x1Fu) << 6 | (static_cast<uint8_t>(text[pos + 1]) & 0x3Fu);
      if (const int16_t b = tb.from_cp[cp]; b >= 0) {
        out.push_back(static_cast<char>(b));
      } else {
        out.append(text.substr(pos, 2));
        if (all_mapped) *all_mapped = false;
      }
      pos += 2;
      continue;
    }
    const size_t n = utf8_char_len(text, pos);
    if (n == 0) {  // invalid UTF-8 in a token text: keep the byte as it is
      out.push_back(text[pos]);
      if (all_mapped) *all_mapped = false;
      ++pos;
      continue;
    }
    const auto b = codepoint_to_byte(utf8_decode(text, pos, n));
    if (b) {
      out.push_back(static_cast<char>(*b));
    } else {
      out.append(text.substr(pos, n));
      if (all_mapped) *all_mapped = false;
    }
    pos += n;
  }
  return out;
}

}  // namespace minfer::tok
