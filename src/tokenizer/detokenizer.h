// Streaming detokenizer: takes generated token ids one at a time and returns only complete,
// valid UTF-8 text, so a caller can print each return value as it comes. A multi-byte character
// split across tokens is held until its last byte arrives; bytes that can never form a valid
// character are replaced by U+FFFD (one per maximal ill-formed subsequence, the Unicode
// "best practice" of section 3.9), never dropped.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace minfer::tok {

class Detokenizer {
 public:
  /// `render_special`: whether Control tokens (e.g. <|im_end|>) appear as their text.
  explicit Detokenizer(const Tokenizer& tokenizer, bool render_special = false)
      : tok_(&tokenizer), render_special_(render_special) {}

  /// Adds token `id`; returns the text that is now complete (possibly empty). Throws
  /// minfer::Error for an id outside the vocabulary.
  std::string push(int32_t id);

  /// Adds raw bytes (what push() does with a token's piece).
  std::string push_bytes(std::string_view bytes);

  /// Ends the stream: returns the held bytes, an unfinished character replaced by U+FFFD.
  std::string flush();

  /// Bytes held back, waiting for the rest of a character (0..3).
  size_t pending() const { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  bool render_special_;
  std::string pending_;
};

/// Valid UTF-8 from any bytes, with the replacement rule above (what a Detokenizer fed all of
/// `bytes` and then flushed returns).
std::string utf8_replace_invalid(std::string_view bytes);

}  // namespace minfer::tok
