// Finding special and added tokens inside text, before BPE. The result is the one llama.cpp
// 80fb11ac's tokenizer_st_partition gives (src/llama-vocab.cpp): tokens are taken in priority
// order (longest text first; equal lengths by lower id), and each takes every occurrence, left
// to right and non-overlapping, that does not overlap text already taken by a token before it.
// Instead of one scan of the text per token, candidates are found in one pass (indexed by
// first byte) and then accepted in priority order, which gives the same partition.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace minfer::tok {

/// A piece of the input: either raw text (to pre-tokenize and BPE) or one matched token.
struct Fragment {
  bool is_token = false;
  int32_t id = -1;        ///< when is_token
  std::string_view text;  ///< when !is_token: a view into the input
};

class SpecialTokenMatcher {
 public:
  /// Takes every Control, Unknown and UserDefined token of the vocabulary (`strip` may be empty).
  SpecialTokenMatcher(const StringTable& tokens, const std::vector<TokenType>& types,
                      const std::vector<uint8_t>& strip);

  /// Splits `text` into fragments, in order. Control and Unknown tokens take part only when
  /// `parse_special`; UserDefined tokens always. A token with the lstrip (rstrip) flag also
  /// removes the ASCII whitespace before (after) it.
  void partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;

  /// Number of tokens that can be matched.
  size_t size() const { return n_entries_; }

  /// Heap bytes held (bucket capacities and the copied token texts), for memory accounting.
  size_t memory_bytes() const;

 private:
  struct Entry {
    int32_t id;
    uint32_t priority;  // 0 = taken first
    bool control;       // Control/Unknown: only with parse_special
    uint8_t strip;
    std::string text;
  };
  std::array<std::vector<Entry>, 256> by_first_byte_;
  size_t n_entries_ = 0;
};

}  // namespace minfer::tok
