#include "tokenizer/string_table.h"

#include <limits>

#include "core/error.h"

namespace minfer::tok {

void StringTable::reserve(size_t n, size_t total_bytes) {
  spans_.reserve(n);
  bytes_.reserve(total_bytes);
}

uint32_t StringTable::append_bytes(std::string_view a, std::string_view b) {
  constexpr size_t kMax = std::numeric_limits<uint32_t>::max();
  MINFER_CHECK(a.size() + b.size() <= kMax - bytes_.size(),
               "string table: {} + {} bytes would pass the 4 GiB limit of its 32-bit offsets",
               bytes_.size(), a.size() + b.size());
  // A view of our own arena would dangle if the append reallocates: copy it first.
  const auto inside = [&](std::string_view s) {
    return !s.empty() && s.data() >= bytes_.data() && s.data() < bytes_.data() + bytes_.size();
  };
  if (inside(a) || inside(b)) {
    const std::string copy = std::string(a) + std::string(b);
    return append_bytes(copy, {});
  }
  const auto offset = static_cast<uint32_t>(bytes_.size());
  bytes_.append(a);
  bytes_.append(b);
  return offset;
}

void StringTable::push_back(std::string_view s) { push_back_concat(s, {}); }

void StringTable::push_back_concat(std::string_view a, std::string_view b) {
  const uint32_t offset = append_bytes(a, b);
  spans_.push_back(Span{offset, static_cast<uint32_t>(a.size() + b.size())});
}

void StringTable::resize(size_t n) { spans_.resize(n, Span{0, 0}); }

void StringTable::set(size_t i, std::string_view s) {
  MINFER_ASSERT(i < spans_.size());
  const uint32_t offset = append_bytes(s, {});
  spans_[i] = Span{offset, static_cast<uint32_t>(s.size())};
}

void StringTable::clear() {
  std::string().swap(bytes_);
  std::vector<Span>().swap(spans_);
}

void StringTable::shrink_to_fit() {
  bytes_.shrink_to_fit();
  spans_.shrink_to_fit();
}

size_t StringTable::memory_bytes() const {
  return bytes_.capacity() + spans_.capacity() * sizeof(Span);
}

std::vector<std::string_view> StringTable::views() const { return {begin(), end()}; }

bool operator==(const StringTable& a, const StringTable& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace minfer::tok
