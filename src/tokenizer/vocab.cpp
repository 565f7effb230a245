#include "tokenizer/vocab.h"

#include "core/error.h"
#include "tokenizer/token_index.h"

namespace minfer::tok {

PreTokenizer pre_tokenizer_from_name(const std::string& name, const std::string& where) {
  // Names and their regexes: llama.cpp 80fb11ac src/llama-vocab.cpp (LLAMA_VOCAB_PRE_TYPE_QWEN2,
  // LLAMA_VOCAB_PRE_TYPE_QWEN35).
  if (name == "qwen2" || name == "deepseek-r1-qwen") return PreTokenizer::Qwen2;
  if (name == "qwen35") return PreTokenizer::Qwen35;
  // LLAMA_VOCAB_PRE_TYPE_LLAMA3's names.
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") return PreTokenizer::Llama3;
  if (name.empty())
    fail("{}: tokenizer.ggml.pre is missing; minfer needs the pre-tokenizer name "
         "(known: qwen2, deepseek-r1-qwen, qwen35, llama-bpe)", where);
  fail("{}: unknown pre-tokenizer tokenizer.ggml.pre = '{}' (known: qwen2, deepseek-r1-qwen, qwen35, "
       "llama-bpe)", where, name);
}

void validate_vocab(const VocabData& d) {
  TokenIndex seen;
  validate_vocab(d, seen);
}

void validate_vocab(const VocabData& d, TokenIndex& seen) {
  MINFER_CHECK(d.model == "gpt2" || d.model == "llama",
        "{}: tokenizer model '{}' is not supported (only 'gpt2', byte-level BPE, and 'llama', SentencePiece)",
        d.source, d.model);
  if (!is_spm(d)) (void)pre_tokenizer_from_name(d.pre, d.source);
  MINFER_CHECK(d.scores.empty() || d.scores.size() == d.tokens.size(), "{}: {} token scores for {} tokens",
        d.source, d.scores.size(), d.tokens.size());
  MINFER_CHECK(!is_spm(d) || d.merges.empty(), "{}: a SentencePiece vocabulary has {} merges (expected none)",
        d.source, d.merges.size());
  MINFER_CHECK(!d.tokens.empty(), "{}: the vocabulary is empty", d.source);
  MINFER_CHECK(d.tokens.size() <= static_cast<size_t>(INT32_MAX), "{}: {} tokens is too many", d.source,
        d.tokens.size());
  MINFER_CHECK(d.types.size() == d.tokens.size(), "{}: {} token types for {} tokens", d.source,
        d.types.size(), d.tokens.size());
  MINFER_CHECK(d.strip.empty() || d.strip.size() == d.tokens.size(), "{}: {} strip flags for {} tokens",
        d.source, d.strip.size(), d.tokens.size());
  seen.reset(d.tokens.size());
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    MINFER_CHECK(!d.tokens[i].empty(), "{}: token {} has empty text", d.source, i);
    const int32_t earlier = seen.insert(d.tokens, static_cast<int32_t>(i));
    MINFER_CHECK(earlier < 0, "{}: tokens {} and {} have the same text '{}'", d.source, earlier, i, d.tokens[i]);
    const auto t = static_cast<int32_t>(d.types[i]);
    MINFER_CHECK(t >= 0 && t <= 6, "{}: token {} ('{}') has unknown type {}", d.source, i, d.tokens[i], t);
  }
  const auto n = static_cast<int64_t>(d.tokens.size());
  const std::pair<const char*, int32_t> ids[] = {{"bos", d.bos_id}, {"eos", d.eos_id},
                                                 {"eot", d.eot_id}, {"eom", d.eom_id},
                                                 {"padding", d.pad_id}, {"unknown", d.unk_id}};
  for (const auto& [name, id] : ids)
    MINFER_CHECK(id >= -1 && id < n, "{}: {} token id {} is outside the vocabulary (0..{})", d.source,
          name, id, n - 1);
  MINFER_CHECK(!d.add_bos || d.bos_id >= 0, "{}: add_bos_token is true but there is no bos token id",
        d.source);
  MINFER_CHECK(!d.add_eos || d.eos_id >= 0, "{}: add_eos_token is true but there is no eos token id",
        d.source);
}

}  // namespace minfer::tok
