// The text side of one generated stream: token ids in, complete UTF-8 text out, cut at the first
// stop string (which is not output), holding back a tail that may still become one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

class TextStream {
 public:
  TextStream(const tok::Tokenizer& tokenizer, std::vector<std::string> stop);

  /// Adds token `id` (not an end-of-generation token: the caller stops before it). Returns the
  /// text that is now final; sets *stopped when a stop string appeared (the text ends before it,
  /// and nothing more may be pushed).
  std::string push(int32_t id, bool* stopped);
  /// Ends the stream (length limit, end of generation): the held-back text.
  std::string finish();

 private:
  tok::Detokenizer detok_;
  std::vector<std::string> stop_;
  std::string text_;     ///< all text so far
  size_t emitted_ = 0;   ///< bytes of text_ returned
  bool stopped_ = false;
};

}  // namespace minfer::server
