// The vocabulary of a byte-level BPE tokenizer as a plain struct, and its two loaders: from GGUF
// metadata (tokenizer.* keys) and from a Hugging Face tokenizer.json. The Tokenizer
// (tokenizer.h) is built from this struct, so both sources give the same behaviour.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/merge_list.h"
#include "tokenizer/string_table.h"

namespace minfer::gguf {
class GgufFile;
}

namespace minfer::tok {

class TokenIndex;

/// Token types, with the integer values stored in GGUF `tokenizer.ggml.token_type`
/// (llama.cpp's llama_token_type / gguf-py TokenType).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,       ///< byte-level BPE text
  Unknown = 2,
  Control = 3,      ///< special token: matched in text only when parse_special is on
  UserDefined = 4,  ///< added token: always matched in text, decoded as its literal text
  Unused = 5,
  Byte = 6,
};

/// Which pre-tokenizer regex splits text into words before BPE.
enum class PreTokenizer {
  Qwen2,   ///< GGUF pre "qwen2" (Qwen2, Qwen2.5, Qwen3), "deepseek-r1-qwen"
  Qwen35,  ///< GGUF pre "qwen35": like Qwen2 but letter runs also take combining marks (\p{M})
  None,    ///< no regex: a SentencePiece vocabulary ("llama" model) splits nothing before merging
  Llama3,  ///< GGUF pre "llama-bpe" / "llama3" / "llama-v3": like Qwen2 but digits in runs of 1-3
           ///< (\p{N}{1,3}); a word that is itself a token is emitted whole (ignore_merges)
};

/// Maps a GGUF `tokenizer.ggml.pre` name to its pre-tokenizer. Throws minfer::Error naming
/// `where` (file) and the unknown name; never falls back to a default.
PreTokenizer pre_tokenizer_from_name(const std::string& name, const std::string& where);

/// Per-token flags for added tokens (from tokenizer.json `added_tokens`): whitespace on that
/// side of a matched occurrence is dropped.
enum TokenStrip : uint8_t { kStripNone = 0, kStripLeft = 1, kStripRight = 2 };

/// Everything the tokenizer needs, independent of where it came from.
struct VocabData {
  std::string source;  ///< file the data came from (for error messages)
  /// tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece, spm.h)
  std::string model = "gpt2";
  std::string pre = "qwen2";       ///< tokenizer.ggml.pre (ignored for "llama")
  StringTable tokens;               ///< token text by id; Normal tokens in the byte-level alphabet
  std::vector<TokenType> types;     ///< same length as tokens
  std::vector<uint8_t> strip;       ///< TokenStrip flags by id; empty = none
  /// Merges in rank order (rank = index): each is (left, right) token texts, and left+right is a
  /// token too.
  MergeList merges;
  /// SentencePiece ("llama") only: the score of each token (higher merges first); empty = all 0.
  std::vector<float> scores;
  /// SentencePiece only: a space is put before text that starts the input or follows a special
  /// token (tokenizer.ggml.add_space_prefix, default true).
  bool add_space_prefix = true;
  int32_t bos_id = -1, eos_id = -1, eot_id = -1, eom_id = -1, pad_id = -1, unk_id = -1;  ///< -1 = none
  bool add_bos = false;  ///< encode(add_special=true) puts bos_id first
  bool add_eos = false;  ///< encode(add_special=true) puts eos_id last
  std::string chat_template;  ///< Jinja source; empty when the file has none
};

/// True for a SentencePiece vocabulary (model "llama").
inline bool is_spm(const VocabData& d) { return d.model == "llama"; }

/// Reads the tokenizer.* metadata of a GGUF file: tokenizer.ggml.{model, pre, tokens, token_type,
/// merges (gpt2), scores (llama), add_space_prefix (llama), bos_token_id, eos_token_id, eot_token_id, eom_token_id, padding_token_id,
/// unknown_token_id, add_bos_token, add_eos_token} and tokenizer.chat_template (GGUF spec,
/// "Tokenizer" section; key names as written by llama.cpp's converter). Without an
/// add_bos_token key, BOS is added for SentencePiece and the llama-bpe pre-tokenizer, as
/// llama.cpp 80fb11ac does (src/llama-vocab.cpp). Throws minfer::Error
/// naming the file and key for a missing or mistyped key, an unsupported model or an unknown
/// pre-tokenizer name.
VocabData vocab_from_gguf(const gguf::GgufFile& file);

/// vocab_from_gguf without its last step, the validate_vocab call: for a caller that hands the
/// data straight to the Tokenizer constructor, which validates it (the same checks, so the same
/// errors), and so skips checking 150k tokens twice.
VocabData vocab_from_gguf_unvalidated(const gguf::GgufFile& file);

/// Reads a Hugging Face tokenizer.json (model.type "BPE" with byte-level pre-tokenization):
/// model.vocab, model.merges (either "a b" strings or ["a", "b"] pairs), added_tokens (special
/// -> Control, otherwise UserDefined; lstrip/rstrip honoured). The pre-tokenizer is identified
/// by its Split regex; an unknown regex is an error that quotes it. When a tokenizer_config.json
/// sits beside the file, bos_token, eos_token, pad_token, add_bos_token, add_eos_token and
/// chat_template are read from it. Throws minfer::Error naming the file and the field.
VocabData vocab_from_tokenizer_json(const std::string& path);

/// Checks the invariants the tokenizer relies on (types/tokens lengths agree, no empty or
/// duplicate token text, special ids in range, merges name existing tokens, all 256 byte tokens
/// present). Throws minfer::Error naming `data.source`, the token id / merge rank and the value.
void validate_vocab(const VocabData& data);

/// The same checks, in the same order and with the same errors, leaving in `index` the text ->
/// id index of every token of data.tokens that the duplicate check builds (the Tokenizer keeps
/// it instead of building it a second time). `index` holds unspecified contents after a throw.
void validate_vocab(const VocabData& data, TokenIndex& index);

}  // namespace minfer::tok
