// Safe printing of strings that come from files (GGUF metadata, tensor names, token texts,
// template text): a model file must not be able to send escape sequences to the terminal,
// split a one-line message over several lines or reorder how it is displayed.
#pragma once

#include <string>
#include <string_view>

namespace minfer {

/// `s` with every byte that a terminal could act on escaped, the rest unchanged:
/// - C0 control characters and DEL: "\n", "\r", "\t", or "\xNN" (two lowercase hex digits);
/// - C1 control characters U+0080..U+009F (UTF-8 bytes C2 80..C2 9F): "\u0080".."\u009f";
/// - Unicode bidirectional controls, which reorder the display of the rest of the line (UAX #9):
///   U+202A..U+202E (LRE RLE PDF LRO RLO), U+2066..U+2069 (LRI RLI FSI PDI), U+200E, U+200F
///   (LRM RLM) and U+061C (ALM): "\u202e" and so on (four lowercase hex digits);
/// - bytes that are not part of a valid UTF-8 sequence (RFC 3629: no overlong forms, no
///   surrogates, nothing above U+10FFFF): "\xNN" each.
/// With `escape_quotes`, '"' and '\\' are escaped too ("\"", "\\\\"), for quoted output.
/// Valid printable UTF-8 (including all non-ASCII letters) is copied as it is.
std::string printable(std::string_view s, bool escape_quotes = false);

}  // namespace minfer
