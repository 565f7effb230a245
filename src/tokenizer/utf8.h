// UTF-8 helpers for the tokenizer: strict validation (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF), replacement of invalid bytes by U+FFFD, and the length of the valid
// prefix that ends on a character boundary (for streaming output).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace minfer::tok {

/// The UTF-8 encoding of U+FFFD REPLACEMENT CHARACTER.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

/// Length in bytes (1..4) of the valid UTF-8 character that starts at s[pos], or 0 when the
/// bytes at pos do not start a complete valid character (invalid lead byte, bad continuation,
/// overlong form, surrogate, > U+10FFFF, or truncated by the end of `s`).
size_t utf8_char_len(std::string_view s, size_t pos);

/// True when `s` is entirely valid UTF-8.
bool utf8_is_valid(std::string_view s);

/// Copy of `s` where each byte that is not part of a valid character is replaced by U+FFFD
/// (one replacement per offending byte, the way llama.cpp's unicode_cpts_from_utf8 does).
/// Valid input is returned unchanged.
std::string utf8_sanitize(std::string_view s);

/// Appends the UTF-8 encoding of code point `cp` (must be <= 0x10FFFF and not a surrogate).
void utf8_append(std::string& out, uint32_t cp);

/// Decodes the valid character at s[pos] (caller checked utf8_char_len(s, pos) == n > 0).
uint32_t utf8_decode(std::string_view s, size_t pos, size_t n);

}  // namespace minfer::tok
