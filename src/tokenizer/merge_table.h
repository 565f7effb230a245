// The BPE merge rules as a flat open-addressing hash table: the pair of token ids (left, right),
// packed into one 64-bit key, maps to the merge's rank and the id of the token it makes. One
// 16-byte slot per entry and no pointers, instead of a node-based map of string pairs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace minfer::tok {

class MergeTable {
 public:
  struct Entry {
    uint64_t key;    ///< (left << 32) | right, as unsigned 32-bit ids; kEmpty = free slot
    int32_t rank;    ///< position in the merge list (lower merges first)
    int32_t result;  ///< id of the merged token
  };

  /// Makes room for `n` entries (load factor at most 5/8) and forgets any previous contents.
  /// Adding more than `n` entries is a bug (asserted).
  void reset(size_t n);

  /// Adds (left, right) -> (rank, result) unless the pair is already present (the first,
  /// lowest-rank occurrence of a pair wins, as in HF tokenizers). Ids must be >= 0.
  void insert(int32_t left, int32_t right, int32_t rank, int32_t result);

  /// The entry of the pair (left, right), or nullptr when the pair does not merge.
  const Entry* find(int32_t left, int32_t right) const {
    const uint64_t k = key(left, right);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == k) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }

  /// Hints that the pair (left, right) will be inserted or looked up soon: fetches its home
  /// slot. Changes nothing.
  void prefetch(int32_t left, int32_t right) const { __builtin_prefetch(&slots_[slot(key(left, right))]); }

  /// Calls f(entry) for every entry, in no particular order.
  template <typename F>
  void for_each(F&& f) const {
    for (const Entry& e : slots_)
      if (e.key != kEmpty) f(e);
  }

  size_t size() const { return count_; }
  /// Heap bytes held (the slot array), for memory accounting.
  size_t memory_bytes() const { return slots_.capacity() * sizeof(Entry); }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are >= 0, so no real key is all ones
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Fibonacci hashing: the top bits of key * 2^64 / golden ratio.
  size_t slot(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_); }

  std::vector<Entry> slots_ = std::vector<Entry>(2, Entry{kEmpty, 0, 0});  // empty, findable
  size_t mask_ = 1;
  unsigned shift_ = 63;  // 64 - log2(slots)
  size_t count_ = 0;
};

}  // namespace minfer::tok
