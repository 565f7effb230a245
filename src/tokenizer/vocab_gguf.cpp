// VocabData from GGUF metadata. Key names: GGUF spec ("Tokenizer" section) and llama.cpp's
// LLM_KV_TOKENIZER_* names (src/llama-arch.cpp).
#include <cmath>
#include <optional>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace minfer::tok {
namespace {

int32_t optional_id(const gguf::GgufFile& f, const char* key) {
  const auto v = f.get_u32(key);
  if (!v) return -1;
  MINFER_CHECK(*v <= static_cast<uint32_t>(INT32_MAX), "{}: {} = {} is not a token id", f.path(), key, *v);
  return static_cast<int32_t>(*v);
}

void read_merges(const gguf::GgufFile& f, VocabData& d) {
  const auto merges = f.get_string_array("tokenizer.ggml.merges");
  MINFER_CHECK(merges.has_value(), "{}: missing metadata key tokenizer.ggml.merges", f.path());
  size_t merge_bytes = 0;
  for (std::string_view m : *merges) merge_bytes += m.size();
  d.merges.reserve(merges->size(), merge_bytes);  // a little more than needed: no spaces kept
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string_view m = (*merges)[i];
    // "left right": split at the first space after the first byte (token texts in the
    // byte-level alphabet never contain a space).
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    MINFER_CHECK(sp != std::string_view::npos && sp + 1 < m.size(),
          "{}: tokenizer.ggml.merges[{}] = '{}' is not of the form 'left right'", f.path(), i, m);
    d.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
}

// SentencePiece: tokenizer.ggml.scores (f32 per token, optional: 0 when absent, as llama.cpp
// reads it) and tokenizer.ggml.add_space_prefix (default true).
void read_spm_keys(const gguf::GgufFile& f, VocabData& d) {
  if (auto scores = f.get_f32_array("tokenizer.ggml.scores")) {
    MINFER_CHECK(scores->size() == d.tokens.size(), "{}: tokenizer.ggml.scores has {} entries for {} tokens",
          f.path(), scores->size(), d.tokens.size());
    for (size_t i = 0; i < scores->size(); ++i)
      MINFER_CHECK(std::isfinite((*scores)[i]), "{}: tokenizer.ggml.scores[{}] = {} is not finite", f.path(), i,
            (*scores)[i]);
    d.scores = std::move(*scores);
  }
  d.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
}

}  // namespace

VocabData vocab_from_gguf_unvalidated(const gguf::GgufFile& f) {
  VocabData d;
  d.source = f.path();
  d.model = std::string(f.require_string("tokenizer.ggml.model"));
  if (d.model != "gpt2" && d.model != "llama")
    fail("{}: tokenizer.ggml.model = '{}' is not supported (only 'gpt2', byte-level BPE, and 'llama', "
         "SentencePiece)", f.path(), d.model);
  d.pre = std::string(f.get_string("tokenizer.ggml.pre").value_or(""));
  if (!is_spm(d)) (void)pre_tokenizer_from_name(d.pre, f.path());

  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  MINFER_CHECK(tokens.has_value(), "{}: missing metadata key tokenizer.ggml.tokens", f.path());
  size_t token_bytes = 0;
  for (std::string_view t : *tokens) token_bytes += t.size();
  d.tokens.reserve(tokens->size(), token_bytes);
  for (std::string_view t : *tokens) d.tokens.push_back(t);

  if (auto types = f.get_i32_array("tokenizer.ggml.token_type")) {
    MINFER_CHECK(types->size() == d.tokens.size(),
          "{}: tokenizer.ggml.token_type has {} entries for {} tokens", f.path(), types->size(),
          d.tokens.size());
    d.types.reserve(types->size());
    for (size_t i = 0; i < types->size(); ++i) {
      const int32_t t = (*types)[i];
      MINFER_CHECK(t >= 0 && t <= 6, "{}: tokenizer.ggml.token_type[{}] = {} is not a token type", f.path(),
            i, t);
      d.types.push_back(static_cast<TokenType>(t));
    }
  } else {
    d.types.assign(d.tokens.size(), TokenType::Normal);
  }

  if (is_spm(d)) {
    read_spm_keys(f, d);
  } else {
    read_merges(f, d);
  }


  d.bos_id = optional_id(f, "tokenizer.ggml.bos_token_id");
  d.eos_id = optional_id(f, "tokenizer.ggml.eos_token_id");
  d.eot_id = optional_id(f, "tokenizer.ggml.eot_token_id");
  d.eom_id = optional_id(f, "tokenizer.ggml.eom_token_id");
  d.pad_id = optional_id(f, "tokenizer.ggml.padding_token_id");
  d.unk_id = optional_id(f, "tokenizer.ggml.unknown_token_id");
  // Without the key, llama.cpp 80fb11ac adds BOS for SentencePiece and for the Llama-3
  // pre-tokenizer (llama_vocab::impl::load).
  const bool bos_default = is_spm(d) || pre_tokenizer_from_name(d.pre, f.path()) == PreTokenizer::Llama3;
  d.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(bos_default);
  d.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  d.chat_template = std::string(f.get_string("tokenizer.chat_template").value_or(""));
  return d;
}

VocabData vocab_from_gguf(const gguf::GgufFile& f) {
  VocabData d = vocab_from_gguf_unvalidated(f);
  validate_vocab(d);
  return d;
}

}  // namespace minfer::tok
