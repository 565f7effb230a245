// A list of byte strings stored once, in one arena: the token texts of a vocabulary (150k
// strings of ~7 bytes) cost 8 bytes of index each plus their bytes, instead of a std::string
// (32 bytes, plus a heap block for long texts) each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace minfer::tok {

class StringTable {
 public:
  /// Random-access reading in index order (for range-for and comparisons).
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = std::string_view;
    const_iterator() = default;
    const_iterator(const StringTable* t, size_t i) : t_(t), i_(i) {}
    std::string_view operator*() const { return (*t_)[i_]; }
    const_iterator& operator++() { ++i_; return *this; }
    const_iterator operator++(int) { auto c = *this; ++i_; return c; }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }
   private:
    const StringTable* t_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = const_iterator;
  using value_type = std::string_view;

  size_t size() const { return spans_.size(); }
  bool empty() const { return spans_.empty(); }
  /// String `i` (i < size(); unchecked). Valid until the next push_back/set/clear.
  std::string_view operator[](size_t i) const {
    return std::string_view(bytes_.data() + spans_[i].offset, spans_[i].size);
  }
  /// Hints that string `i` (i < size(); unchecked) will be read soon: prefetch_span fetches its
  /// index entry, prefetch_bytes (which reads that entry) its first bytes. For lookups that
  /// overlap their memory reads; neither changes anything.
  void prefetch_span(size_t i) const { __builtin_prefetch(&spans_[i]); }
  void prefetch_bytes(size_t i) const { __builtin_prefetch(bytes_.data() + spans_[i].offset); }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, spans_.size()}; }

  /// Reserves room for `n` strings of `total_bytes` bytes together.
  void reserve(size_t n, size_t total_bytes = 0);
  /// Appends `s` (which may be a view of this table). Throws minfer::Error when the arena would
  /// pass 4 GiB (offsets are 32-bit).
  void push_back(std::string_view s);
  /// Appends the concatenation a + b as one string.
  void push_back_concat(std::string_view a, std::string_view b);
  /// Appends `n` empty strings.
  void resize(size_t n);
  /// Replaces string `i` (i < size()) by `s`. The new bytes are appended; the old ones stay
  /// unused in the arena (meant for building a table out of order, not for frequent edits).
  void set(size_t i, std::string_view s);
  /// Frees everything.
  void clear();
  /// Drops unused capacity.
  void shrink_to_fit();

  /// Heap bytes held (capacities of the arena and the index), for memory accounting.
  size_t memory_bytes() const;
  /// Copies of the views, for APIs that take a span of string_view (valid while unchanged).
  std::vector<std::string_view> views() const;

  friend bool operator==(const StringTable& a, const StringTable& b);

 private:
  struct Span {
    uint32_t offset;  ///< bytes into bytes_
    uint32_t size;    ///< bytes
  };
  uint32_t append_bytes(std::string_view a, std::string_view b);

  std::string bytes_;
  std::vector<Span> spans_;
};

}  // namespace minfer::tok
