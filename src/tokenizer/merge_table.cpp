#include "tokenizer/merge_table.h"

#include <algorithm>
#include <bit>

#include "core/error.h"

namespace minfer::tok {

void MergeTable::reset(size_t n) {
  const size_t want = std::max<size_t>(2, std::bit_ceil(n + n * 3 / 5 + 1));  // n / slots <= 5/8
  std::vector<Entry>(want, Entry{kEmpty, 0, 0}).swap(slots_);
  mask_ = want - 1;
  shift_ = 64u - static_cast<unsigned>(std::countr_zero(want));
  count_ = 0;
}

void MergeTable::insert(int32_t left, int32_t right, int32_t rank, int32_t result) {
  MINFER_ASSERT(left >= 0 && right >= 0 && count_ < slots_.size() * 5 / 8);
  const uint64_t k = key(left, right);
  for (size_t i = slot(k);; i = (i + 1) & mask_) {
    Entry& e = slots_[i];
    if (e.key == k) return;  // a lower rank already has this pair
    if (e.key == kEmpty) {
      e = Entry{k, rank, result};
      ++count_;
      return;
    }
  }
}

}  // namespace minfer::tok
