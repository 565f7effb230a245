// Token text -> id lookup as an open-addressing hash table of ids (4 bytes a slot), hashed by
// the token's bytes, which stay in the vocabulary's StringTable: the table never copies a text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/string_table.h"

namespace minfer::tok {

class TokenIndex {
 public:
  TokenIndex() = default;

  /// Makes room for `n` ids (load factor at most 3/4) and forgets any previous contents. Adding
  /// more than `n` ids is a bug (asserted).
  void reset(size_t n);

  /// Adds `id`, whose text is tokens[id]. Returns -1, or (without adding) the id already in the
  /// table with the same text. `tokens` must be the table every added id refers to.
  int32_t insert(const StringTable& tokens, int32_t id);

  /// Id whose text in `tokens` is `text`, or -1 when none.
  int32_t find(const StringTable& tokens, std::string_view text) const;

  /// Heap bytes held (the slot array), for memory accounting.
  size_t memory_bytes() const { return slots_.capacity() * sizeof(int32_t); }

 private:
  std::vector<int32_t> slots_;  ///< -1 = empty; size a power of two
  size_t mask_ = 0;
  size_t count_ = 0;  ///< ids added since reset()
};

}  // namespace minfer::tok
