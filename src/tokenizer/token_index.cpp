#include "tokenizer/token_index.h"

#include <bit>
#include <functional>

#include "core/error.h"

namespace minfer::tok {
namespace {

size_t hash_text(std::string_view s) { return std::hash<std::string_view>{}(s); }

}  // namespace

void TokenIndex::reset(size_t n) {
  const size_t want = std::bit_ceil(n + n / 3 + 1);  // n / slots <= 3/4
  std::vector<int32_t>(want, -1).swap(slots_);
  mask_ = want - 1;
  count_ = 0;
}

int32_t TokenIndex::insert(const StringTable& tokens, int32_t id) {
  MINFER_ASSERT(count_ < slots_.size() * 3 / 4 && id >= 0 && static_cast<size_t>(id) < tokens.size());
  const std::string_view text = tokens[static_cast<size_t>(id)];
  for (size_t i = hash_text(text) & mask_;; i = (i + 1) & mask_) {
    const int32_t s = slots_[i];
    if (s < 0) {
      slots_[i] = id;
      ++count_;
      return -1;
    }
    if (tokens[static_cast<size_t>(s)] == text) return s;
  }
}

int32_t TokenIndex::find(const StringTable& tokens, std::string_view text) const {
  if (slots_.empty()) return -1;
  for (size_t i = hash_text(text) & mask_;; i = (i + 1) & mask_) {
    const int32_t s = slots_[i];
    if (s < 0) return -1;
    if (tokens[static_cast<size_t>(s)] == text) return s;
  }
}

}  // namespace minfer::tok
