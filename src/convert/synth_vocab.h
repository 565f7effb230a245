// The tokenizer metadata of a `minfer synth` model, taken from a vocabulary file: a GGUF file
// with tokenizer.* keys (e.g. llama.cpp's models/ggml-vocab-qwen2.gguf) or a Hugging Face
// tokenizer.json (with its tokenizer_config.json beside it when present).
#pragma once

#include <cstdint>
#include <string>

#include "gguf/gguf_writer.h"
#include "tokenizer/vocab.h"

namespace minfer::convert {

/// Adds the tokenizer.* keys for a model with `n_vocab` embedding rows to `w`, returns the
/// number of tokens the file had.
/// - GGUF: every tokenizer.* key is copied in file order.
/// - tokenizer.json: the keys llama.cpp's converter writes for a byte-level BPE vocabulary, from
///   the parsed file (tok::vocab_from_tokenizer_json): tokenizer.ggml.model, .pre, .tokens,
///   .token_type, .merges ("left right"), the special token ids it has (eos, padding, bos,
///   unknown), .add_bos_token, and tokenizer.chat_template when there is one.
/// When the vocabulary has fewer tokens than n_vocab, the token list is padded with
/// "[PAD<id>]" tokens of type user-defined (4), as llama.cpp's convert_hf_to_gguf.py does for
/// ids its tokenizer leaves unused; tokenizer.ggml.scores, when present, is padded with 0.
/// The vocabulary is validated as the model loader will read it (tok::validate_vocab).
/// `padded`, when given, receives the vocabulary as written (n_vocab tokens, with the padding).
/// Throws minfer::Error naming the file: missing or unreadable, neither GGUF nor JSON, no
/// tokenizer.ggml.tokens, an invalid vocabulary, or more tokens than n_vocab.
int64_t add_vocab_metadata(gguf::GgufWriter& w, const std::string& path, int64_t n_vocab,
                           tok::VocabData* padded = nullptr);

}  // namespace minfer::convert
