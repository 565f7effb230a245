// Byte-level BPE: turns one pre-tokenized word (raw bytes) into token ids by applying merges in
// rank order (lowest rank first, leftmost first among equal ranks: the rule of HF tokenizers'
// BPE and llama.cpp's llm_tokenizer_bpe_session). Results for short words are cached.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/merge_table.h"
#include "tokenizer/token_index.h"
#include "tokenizer/vocab.h"

namespace minfer::tok {

class BpeModel {
 public:
  /// Builds the byte table and the merge table from validated data (`index` holds every id of
  /// data.tokens). Throws minfer::Error naming the source file and the merge rank when a merge
  /// names a token that does not exist, or the byte when a byte has no token.
  BpeModel(const VocabData& data, const TokenIndex& index);

  /// Appends the ids of `word` (raw bytes, not in the byte-level alphabet) to `out`.
  /// Thread-safe.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  /// Same, without the cache (used by tests to check the cache changes nothing).
  void encode_word_uncached(std::string_view word, std::vector<int32_t>& out) const;

  /// By id (n_tokens entries): whether encode_word can emit the token, i.e. it is one of the 256
  /// byte tokens or the result of a merge. Such a token stands for bytes of the text, whatever
  /// type the vocabulary gives it.
  std::vector<bool> emittable(size_t n_tokens) const;

  /// Number of distinct merge pairs.
  size_t n_merges() const { return merges_.size(); }

  /// Heap bytes of the merge table (fixed after construction; the word cache is not counted:
  /// it grows with use, up to its cap).
  size_t memory_bytes() const { return merges_.memory_bytes(); }

 private:
  using Merge = MergeTable::Entry;
  const Merge* find(int32_t a, int32_t b) const { return merges_.find(a, b); }
  void merge_short(std::vector<int32_t>& ids) const;
  void merge_long(std::vector<int32_t>& ids) const;

  std::array<int32_t, 256> byte_token_{};
  MergeTable merges_;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace minfer::tok
