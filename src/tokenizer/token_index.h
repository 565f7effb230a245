// Token text -> id lookup as an open-addressing hash table (linear probing) of 4-byte slots,
// hashed by the token's bytes, which stay in the vocabulary's StringTable: the table never
// copies a text. A slot holds the id in its low bits and, in the bits the ids leave free,
// bits of the text's hash (a tag): a probe that meets another id compares the texts only when
// the tags agree (for a 151,936-token vocabulary, 14 bits: one probe in 16,384), so a lookup
// reads the slot array and then, about once, the text it finds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/string_table.h"

namespace minfer::tok {

class TokenIndex {
 public:
  TokenIndex() = default;

  /// Makes room for `n` ids, each below `n` (load factor at most 3/4), and forgets any previous
  /// contents. Adding more than `n` ids, or an id >= `n`, is a bug (asserted).
  void reset(size_t n);

  /// Adds `id`, whose text is tokens[id]. Returns -1, or (without adding) the id already in the
  /// table with the same text. `tokens` must be the table every added id refers to.
  int32_t insert(const StringTable& tokens, int32_t id);

  /// Id whose text in `tokens` is `text`, or -1 when none.
  int32_t find(const StringTable& tokens, std::string_view text) const;

  /// ids[k] = find(tokens, texts[k]) for every k (texts.size() == ids.size()). Faster than a
  /// loop of find() for many texts: the lookups of a few dozen texts run staggered, each
  /// fetching the memory the next stage will read (slot, then token entry, then token bytes).
  void find_many(const StringTable& tokens, std::span<const std::string_view> texts,
                 std::span<int32_t> ids) const;

  /// Heap bytes held (the slot array), for memory accounting.
  size_t memory_bytes() const { return slots_.capacity() * sizeof(uint32_t); }

 private:
  // No slot holding an id is all ones: ids are below n, and n < 2^(bits of id_mask_).
  static constexpr uint32_t kEmpty = ~uint32_t{0};

  /// The slot holding the id whose text is `text` (hash `h`), or the empty slot where the
  /// probe for it ends.
  size_t probe(const StringTable& tokens, std::string_view text, uint64_t h) const;
  /// find() for a text whose hash is `h`.
  int32_t find_hashed(const StringTable& tokens, std::string_view text, uint64_t h) const;
  /// The id of the first slot from h's home whose tag matches h's (the id find_hashed will
  /// compare first), or -1 when an empty slot comes first.
  int32_t first_candidate(uint64_t h) const;

  std::vector<uint32_t> slots_;  ///< (tag & ~id_mask_) | id, or kEmpty; size a power of two
  size_t mask_ = 0;
  uint32_t id_mask_ = 0;  ///< 2^k - 1 for the least k with n < 2^k: the id bits of a slot
  size_t n_ = 0;          ///< the n of reset()
  size_t count_ = 0;      ///< ids added since reset()
};

}  // namespace minfer::tok
