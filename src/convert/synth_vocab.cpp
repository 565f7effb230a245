#include "convert/synth_vocab.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/read_file.h"
#include "gguf/gguf.h"
#include "tokenizer/vocab.h"

namespace minfer::convert {
namespace {

/// True when the file starts with the GGUF magic.
bool is_gguf(const std::string& path) {
  const int fd = open_regular_file(path, "vocab file");  // a FIFO is refused, not waited on
  char magic[4] = {};
  ssize_t n;
  while ((n = ::read(fd, magic, 4)) < 0 && errno == EINTR) {
  }
  ::close(fd);
  return n == 4 && std::string_view(magic, 4) == "GGUF";
}

/// Appends "[PAD<id>]" user-defined tokens up to n_vocab (convert_hf_to_gguf.py's padding).
void pad(tok::VocabData& d, int64_t n_vocab) {
  for (int64_t id = static_cast<int64_t>(d.tokens.size()); id < n_vocab; ++id) {
    d.tokens.push_back("[PAD" + std::to_string(id) + "]");
    d.types.push_back(tok::TokenType::UserDefined);
  }
}

std::vector<int32_t> type_ids(const tok::VocabData& d) {
  std::vector<int32_t> v;
  v.reserve(d.types.size());
  for (tok::TokenType t : d.types) v.push_back(static_cast<int32_t>(t));
  return v;
}

int64_t from_gguf(gguf::GgufWriter& w, const std::string& path, int64_t n_vocab, tok::VocabData* padded) {
  const auto f = gguf::GgufFile::open(path);
  MINFER_CHECK(f->find("tokenizer.ggml.tokens") != nullptr,
        "vocab file {}: no tokenizer.ggml.tokens (not a vocabulary GGUF)", path);
  tok::VocabData d = tok::vocab_from_gguf(*f);  // validates
  const int64_t n_tokens = static_cast<int64_t>(d.tokens.size());
  MINFER_CHECK(n_tokens <= n_vocab, "vocab file {}: {} tokens do not fit the model's {} embedding rows",
        path, n_tokens, n_vocab);
  pad(d, n_vocab);
  tok::validate_vocab(d);
  for (const gguf::KeyValue& kv : f->metadata()) {
    if (kv.key.rfind("tokenizer.", 0) != 0) continue;
    if (n_tokens < n_vocab && kv.key == "tokenizer.ggml.tokens") {
      w.set_string_array(kv.key, d.tokens.views());
    } else if (n_tokens < n_vocab && kv.key == "tokenizer.ggml.token_type") {
      w.set_i32_array(kv.key, type_ids(d));
    } else if (n_tokens < n_vocab && kv.key == "tokenizer.ggml.scores") {
      std::vector<float> scores = f->get_f32_array(kv.key).value_or(std::vector<float>{});
      scores.resize(static_cast<size_t>(n_vocab), 0.0f);
      w.set_f32_array(kv.key, scores);
    } else {
      w.set_value(kv.key, kv.value);
    }
  }
  if (n_tokens < n_vocab && f->find("tokenizer.ggml.token_type") == nullptr)
    w.set_i32_array("tokenizer.ggml.token_type", type_ids(d));
  if (padded) *padded = std::move(d);
  return n_tokens;
}

int64_t from_tokenizer_json(gguf::GgufWriter& w, const std::string& path, int64_t n_vocab,
                            tok::VocabData* padded) {
  tok::VocabData d = tok::vocab_from_tokenizer_json(path);  // validates
  const int64_t n_tokens = static_cast<int64_t>(d.tokens.size());
  MINFER_CHECK(n_tokens <= n_vocab, "vocab file {}: {} tokens do not fit the model's {} embedding rows",
        path, n_tokens, n_vocab);
  pad(d, n_vocab);
  tok::validate_vocab(d);
  // Keys and order as llama.cpp's converter writes them for Qwen2 (gguf-py GGUFWriter
  // add_tokenizer_model/pre, add_token_list, add_token_types, add_token_merges, then the
  // special vocabulary).
  w.set_string("tokenizer.ggml.model", d.model);
  w.set_string("tokenizer.ggml.pre", d.pre);
  w.set_string_array("tokenizer.ggml.tokens", d.tokens.views());
  w.set_i32_array("tokenizer.ggml.token_type", type_ids(d));
  std::vector<std::string> merges;
  merges.reserve(d.merges.size());
  for (const auto& [l, r] : d.merges) merges.push_back(std::string(l) + " " + std::string(r));
  w.set_string_array("tokenizer.ggml.merges", merges);
  if (d.eos_id >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(d.eos_id));
  if (d.pad_id >= 0) w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(d.pad_id));
  if (d.bos_id >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(d.bos_id));
  if (d.unk_id >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(d.unk_id));
  w.set_bool("tokenizer.ggml.add_bos_token", d.add_bos);
  if (d.add_eos) w.set_bool("tokenizer.ggml.add_eos_token", true);
  if (!d.chat_template.empty()) w.set_string("tokenizer.chat_template", d.chat_template);
  if (padded) *padded = std::move(d);
  return n_tokens;
}

}  // namespace

int64_t add_vocab_metadata(gguf::GgufWriter& w, const std::string& path, int64_t n_vocab,
                           tok::VocabData* padded) {
  std::error_code ec;
  MINFER_CHECK(std::filesystem::is_regular_file(path, ec), "vocab file {} does not exist or is not a file",
        path);
  return is_gguf(path) ? from_gguf(w, path, n_vocab, padded) : from_tokenizer_json(w, path, n_vocab, padded);
}

}  // namespace minfer::convert
