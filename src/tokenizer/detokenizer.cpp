#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"

namespace minfer::tok {
namespace {

// Length of the longest prefix of s[pos..] that is the start of some valid character (the
// "maximal subpart" of Unicode 3.9), 0 when s[pos] cannot start one. Only called where
// utf8_char_len(s, pos) == 0, so the result is shorter than the full character.
size_t valid_prefix_len(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  size_t k = 1;
  for (; k < need && pos + k < s.size(); ++k) {
    const auto b = static_cast<uint8_t>(s[pos + k]);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b & 0xC0) == 0x80;
    if (!ok) break;
  }
  return k;
}

// Moves the complete part of `buf` to the result; keeps an unfinished character at the end
// unless `final`.
std::string drain(std::string& buf, bool final) {
  std::string out;
  out.reserve(buf.size());
  size_t pos = 0;
  while (pos < buf.size()) {
    const auto b = static_cast<uint8_t>(buf[pos]);
    if (b < 0x80) {
      out.push_back(buf[pos++]);
      continue;
    }
    const size_t n = utf8_char_len(buf, pos);
    if (n > 0) {
      out.append(buf, pos, n);
      pos += n;
      continue;
    }
    const size_t k = valid_prefix_len(buf, pos);
    if (k > 0 && pos + k == buf.size() && !final) break;  // may still be completed
    out.append(kReplacementChar);
    pos += k > 0 ? k : 1;
  }
  buf.erase(0, pos);
  return out;
}

}  // namespace

std::string Detokenizer::push(int32_t id) { return push_bytes(tok_->token_to_piece(id, render_special_)); }

std::string Detokenizer::push_bytes(std::string_view bytes) {
  pending_.append(bytes);
  return drain(pending_, false);
}

std::string Detokenizer::flush() { return drain(pending_, true); }

std::string utf8_replace_invalid(std::string_view bytes) {
  std::string buf(bytes);
  return drain(buf, true);
}

}  // namespace minfer::tok
