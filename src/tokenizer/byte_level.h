// The byte-level alphabet of GPT-2 style BPE vocabularies (Qwen2/Qwen2.5/Qwen3): every byte
// 0..255 is written in token texts as one printable Unicode character. Bytes that are printable
// Latin-1 ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the other 68 bytes, in
// increasing order, map to U+0100, U+0101, ... (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).
// Source: the GPT-2 encoder's bytes_to_unicode table, as used by HF tokenizers' ByteLevel.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace minfer::tok {

/// Code point that stands for byte `b` in token texts.
uint32_t byte_to_codepoint(uint8_t b);

/// The byte that code point `cp` stands for, or nullopt when `cp` is not in the alphabet.
std::optional<uint8_t> codepoint_to_byte(uint32_t cp);

/// Token text (UTF-8 of the byte-level characters) for raw bytes: "Hello world" -> "HelloĠworld".
std::string bytes_to_token_text(std::string_view bytes);

/// Raw bytes of a token text written in the byte-level alphabet. A character outside the
/// alphabet (or invalid UTF-8) is copied through unchanged, as HF's ByteLevel decoder does for
/// such characters; `all_mapped` (when given) is set to false in that case.
std::string token_text_to_bytes(std::string_view text, bool* all_mapped = nullptr);

}  // namespace minfer::tok
