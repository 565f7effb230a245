// SentencePiece tokenization of a "llama" GGUF vocabulary (Llama 2, Mistral 7B, TinyLlama): the
// BPE-like algorithm over token scores that llama.cpp 80fb11ac runs for LLAMA_VOCAB_TYPE_SPM
// (src/llama-vocab.cpp, llm_tokenizer_spm_session), which reproduces SentencePiece's own BPE
// model for these vocabularies:
//  - a space is written U+2581 '▁' in token texts (and in the input before merging);
//  - the text starts as one symbol per UTF-8 character (a byte that is not part of a valid
//    character is a symbol of its own); repeatedly, of all adjacent symbol pairs whose
//    concatenation is a Normal or UserDefined token, the one of the highest score (leftmost
//    among equal scores) becomes one symbol (so the text "<0x41>" or "</s>" is never merged into
//    a byte or control token, as in SentencePiece; llama.cpp does not check the type);
//  - each final symbol is its token, or, when it is not a token (a character outside the
//    vocabulary), one byte-fallback token <0xNN> per byte (the unknown token when the
//    vocabulary has no such byte token).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/token_index.h"
#include "tokenizer/vocab.h"

namespace minfer::tok {

/// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's whitespace symbol.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

/// `text` with every ' ' replaced by '▁' (and one ' ' put first when `prefix_space`).
std::string spm_escape(std::string_view text, bool prefix_space);

/// The bytes a token of a SentencePiece vocabulary stands for: Normal and UserDefined texts with
/// '▁' turned back into ' ', a Byte token <0xNN> as the byte 0xNN, other types their text.
std::string spm_piece(std::string_view text, TokenType type);

class SpmModel {
 public:
  /// Keeps the scores and finds the byte-fallback tokens <0x00>..<0xFF> (`index` holds every id
  /// of data.tokens). Throws minfer::Error naming data.source when a byte token's type is not
  /// Byte.
  SpmModel(const VocabData& data, const TokenIndex& index);

  /// Appends the ids of `text` (already escaped: spaces as '▁') to `out`. `tokens` and `index`
  /// are the vocabulary's texts and their lookup (owned by the caller). Thread-safe.
  void encode(std::string_view text, const StringTable& tokens, const TokenIndex& index,
              std::vector<int32_t>& out) const;

 private:
  std::vector<float> scores_;            ///< by id; empty = all 0
  std::vector<bool> mergeable_;          ///< by id: Normal or UserDefined
  std::array<int32_t, 256> byte_token_;  ///< -1 when the vocabulary lacks <0xNN>
  int32_t unk_id_ = -1;
};

}  // namespace minfer::tok
