// The pre-tokenizer: splits text into words with the vocabulary's regex (PCRE2, UTF + UCP, JIT)
// before byte-level BPE runs on each word.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace minfer::tok {

/// The regex source used for `kind` (PCRE2 syntax). For Qwen2 it is the tokenizer.json pattern
///   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
/// with two faithful rewrites, both matching llama.cpp 80fb11ac (src/llama-vocab.cpp,
/// src/unicode.cpp): the contractions are spelled with ASCII classes ('[sS] ...) because a
/// Unicode caseless 's' would also match U+017F; and \s / \S become the Unicode White_Space set
/// [\t\n\x0B\f\r\x{85}\p{Z}] because PCRE2's UCP \s also matches U+180E. Llama-3's pattern
/// differs from Qwen2's only in \p{N}{1,3} for \p{N}, and gets the same rewrites.
const char* pre_tokenizer_pattern(PreTokenizer kind);

/// Compiled pre-tokenizer regex. Thread-safe: split() may be called concurrently.
class PreTokenizerRegex {
 public:
  /// Compiles and JIT-compiles the pattern. Throws minfer::Error with PCRE2's message if it fails.
  explicit PreTokenizerRegex(PreTokenizer kind);
  ~PreTokenizerRegex();
  PreTokenizerRegex(const PreTokenizerRegex&) = delete;
  PreTokenizerRegex& operator=(const PreTokenizerRegex&) = delete;

  /// Appends the words of `text` to `words` (views into `text`, in order, covering it exactly:
  /// matches and any text between matches). `text` must be valid UTF-8 (the caller sanitizes
  /// it; the UTF check is skipped for speed). Any length: PCRE2's match limit grows with the
  /// text (a 10M-character whitespace run splits as a short one does). Throws minfer::Error if
  /// PCRE2 reports a match error (e.g. its JIT stack limit).
  void split(std::string_view text, std::vector<std::string_view>& words) const;

  /// Incremental form of split(): appends the words that start at byte `pos` of `text`, at most
  /// `max_words` of them, and returns the byte offset where the next call should continue
  /// (text.size() when done). Lets a caller process a long text in batches.
  size_t split_some(std::string_view text, size_t pos, std::vector<std::string_view>& words,
                    size_t max_words) const;

  /// Which pattern this is.
  PreTokenizer kind() const { return kind_; }

 private:
  void* code_ = nullptr;  // pcre2_code_8*
  PreTokenizer kind_;
};

}  // namespace minfer::tok
