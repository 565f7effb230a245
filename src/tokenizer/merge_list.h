// The merges of a BPE vocabulary in rank order, stored compactly: each merge keeps its left and
// right texts side by side in one StringTable, so left + right (the text of the merged token)
// is itself a view, with no concatenation needed to look it up.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/string_table.h"

namespace minfer::tok {

class MergeList {
 public:
  using value_type = std::pair<std::string_view, std::string_view>;
  /// Merges in rank order; dereferences to (left, right).
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = MergeList::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = value_type;
    const_iterator() = default;
    const_iterator(const MergeList* m, size_t i) : m_(m), i_(i) {}
    value_type operator*() const { return (*m_)[i_]; }
    const_iterator& operator++() { ++i_; return *this; }
    const_iterator operator++(int) { auto c = *this; ++i_; return c; }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }
   private:
    const MergeList* m_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = const_iterator;

  size_t size() const { return left_size_.size(); }
  bool empty() const { return left_size_.empty(); }
  /// Merge of rank `rank` as (left, right) token texts (rank < size(); unchecked).
  value_type operator[](size_t rank) const {
    const std::string_view j = joined_[rank];
    return {j.substr(0, left_size_[rank]), j.substr(left_size_[rank])};
  }
  /// left + right of merge `rank`: the text of the token it makes.
  std::string_view joined(size_t rank) const { return joined_[rank]; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size()}; }

  /// Room for `n` merges whose texts take `total_bytes` bytes together.
  void reserve(size_t n, size_t total_bytes = 0) {
    joined_.reserve(n, total_bytes);
    left_size_.reserve(n);
  }
  /// Appends the merge (left, right), the next rank.
  void emplace_back(std::string_view left, std::string_view right) {
    joined_.push_back_concat(left, right);
    left_size_.push_back(static_cast<uint32_t>(left.size()));
  }
  /// Frees everything.
  void clear() {
    joined_.clear();
    std::vector<uint32_t>().swap(left_size_);
  }
  /// Heap bytes held (capacities), for memory accounting.
  size_t memory_bytes() const { return joined_.memory_bytes() + left_size_.capacity() * sizeof(uint32_t); }

  friend bool operator==(const MergeList& a, const MergeList& b) {
    return a.left_size_ == b.left_size_ && a.joined_ == b.joined_;
  }

 private:
  StringTable joined_;              ///< left + right of each merge
  std::vector<uint32_t> left_size_;  ///< bytes of left, by rank
};

}  // namespace minfer::tok
