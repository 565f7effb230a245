// Text to token ids and back, for byte-level BPE vocabularies (Qwen2, Qwen2.5, Qwen3, Llama 3)
// and SentencePiece vocabularies (Llama 2, Mistral; spm.h), with the behaviour of llama.cpp
// 80fb11ac (src/llama-vocab.cpp), which the fixtures were made with:
//  1. special-token partition: Control/Unknown tokens (only when parse_special) and
//     UserDefined tokens (always) are found in the text, longest text first; the text between
//     them is tokenized on its own;
//  2. BPE: invalid UTF-8 bytes become U+FFFD (one per byte); the pre-tokenizer regex splits
//     each text piece into words (pretokenizer.h); byte-level BPE turns each word into ids
//     (bpe.h), except that with the Llama-3 pre-tokenizer a word that is a token is taken whole;
//  3. SentencePiece: spaces become '▁', one is put first at the start of the input and after
//     a special token (add_space_prefix), and score-ordered merges with byte fallback give the
//     ids (spm.h). Pieces turn '▁' back into spaces and <0xNN> into bytes.
// No Unicode normalization is applied (the HF tokenizer.json declares NFC; llama.cpp skips it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace minfer::tok {

class Tokenizer {
 public:
  /// Validates `data` (validate_vocab) and builds the lookup tables. Throws minfer::Error.
  explicit Tokenizer(VocabData data);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  /// Token ids of `text` (any bytes). add_special: put bos first when add_bos() (and eos last
  /// when the vocab says add_eos). parse_special: recognise the text of Control tokens such as
  /// "<|im_start|>" (off: that text is tokenized as plain text; UserDefined tokens are always
  /// recognised, as in HF tokenizers and llama.cpp). Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  /// A byte range [begin, end) of a text.
  struct Range {
    size_t begin = 0;
    size_t end = 0;
  };

  /// Like encode(text, add_special, true), except that Control and Unknown tokens are recognised
  /// only outside `plain` (sorted, non-overlapping ranges of `text`): the text inside them is
  /// tokenized as plain text, as with parse_special off (UserDefined tokens are still
  /// recognised). The plain text between two recognised tokens is pre-tokenized and merged as
  /// one piece whether or not it crosses a range boundary, so with no special-token text inside
  /// `plain` the ids equal encode(text, add_special, true). For chat prompts: the template's own
  /// text gives control tokens, message content never does. Throws minfer::Error for ranges out
  /// of order or outside `text`. Thread-safe.
  std::vector<int32_t> encode_with_plain_ranges(std::string_view text, std::span<const Range> plain,
                                                bool add_special) const;

  /// The bytes token `id` stands for, so that no generated token vanishes unseen:
  ///  - a token BPE can emit (the 256 byte tokens and every merge result) and a Normal token:
  ///    the bytes of its byte-level text, whatever type the vocabulary gives it (a byte token
  ///    marked Control or Unused is still text: encode() produces it from plain text);
  ///  - a byte-fallback text "<0xNN>" of any other type but UserDefined: that byte;
  ///  - Byte: the bytes of its byte-level text;
  ///  - Control, Unknown: their literal text when render_special, else "" (e.g. <|im_end|>);
  ///  - UserDefined, Unused, Undefined: their literal text (llama.cpp prints nothing for
  ///    Unused; minfer shows it, e.g. "[PAD151700]", rather than drop a token silently).
  /// May be a partial UTF-8 character. The view stays valid while the Tokenizer lives. Throws
  /// minfer::Error for an id outside [0, n_vocab()).
  std::string_view token_to_piece(int32_t id, bool render_special = true) const;

  /// Concatenated pieces of `ids` (raw bytes, not checked for UTF-8).
  std::string decode(std::span<const int32_t> ids, bool render_special = true) const;

  /// End of generation: eos, eot, eom, and the tokens llama.cpp treats as such by their text
  /// (<|im_end|>, <|endoftext|>, <|fim_pad|>, <|repo_name|>, <|file_sep|>, ...).
  bool is_eog(int32_t id) const;
  std::vector<int32_t> eog_ids() const;

  int32_t bos() const;  ///< -1 when none
  int32_t eos() const;  ///< -1 when none
  int32_t eot() const;  ///< -1 when none (auto-detected from <|im_end|> etc. as llama.cpp does)
  int32_t pad() const;  ///< -1 when none
  bool add_bos() const;
  bool add_eos() const;
  int32_t n_vocab() const;
  const std::string& chat_template() const;
  const std::string& source() const;
  PreTokenizer pre_tokenizer() const;

  /// Token text as stored in the vocabulary (byte-level alphabet for Normal tokens). The view
  /// stays valid while the Tokenizer lives. Throws minfer::Error for an id outside the vocabulary.
  std::string_view token_text(int32_t id) const;
  /// Type after llama.cpp's adjustments (EOG/FIM tokens found by text become Control).
  TokenType token_type(int32_t id) const;
  /// Id of the token whose stored text is `text`, if any.
  std::optional<int32_t> find_token(std::string_view text) const;

  /// Heap bytes of the lookup tables built at construction: token texts, pieces, token types,
  /// the text -> id index, the merge table and the special-token matcher (container
  /// capacities, not counting allocator overhead). The BPE word cache is not included: it
  /// grows with use, up to a fixed number of entries.
  size_t memory_bytes() const;

  /// The same as encode() but without the word cache (tests).
  std::vector<int32_t> encode_uncached(std::string_view text, bool add_special, bool parse_special) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace minfer::tok
