#include "tokenizer/token_index.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"

namespace minfer::tok {
namespace {

// XXH3: a few instructions for the short texts of a vocabulary (most are under 16 bytes), and
// every output bit depends on every input bit, so the low bits (the slot) and the high 32 bits
// (the tag) are independent.
uint64_t hash_text(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

uint32_t tag_of(uint64_t hash) { return static_cast<uint32_t>(hash >> 32); }

}  // namespace

void TokenIndex::reset(size_t n) {
  MINFER_ASSERT(n <= static_cast<size_t>(std::numeric_limits<int32_t>::max()));
  const size_t want = std::bit_ceil(n + n / 3 + 1);  // n / slots <= 3/4
  std::vector<uint32_t>(want, kEmpty).swap(slots_);
  mask_ = want - 1;
  id_mask_ = static_cast<uint32_t>((uint64_t{1} << std::bit_width(n)) - 1);
  n_ = n;
  count_ = 0;
}

int32_t TokenIndex::insert(const StringTable& tokens, int32_t id) {
  MINFER_ASSERT(count_ < slots_.size() * 3 / 4 && id >= 0 && static_cast<size_t>(id) < n_ &&
                static_cast<size_t>(id) < tokens.size());
  const std::string_view text = tokens[static_cast<size_t>(id)];
  const uint64_t h = hash_text(text);
  const size_t i = probe(tokens, text, h);
  if (slots_[i] != kEmpty) return static_cast<int32_t>(slots_[i] & id_mask_);
  slots_[i] = (tag_of(h) & ~id_mask_) | static_cast<uint32_t>(id);
  ++count_;
  return -1;
}

int32_t TokenIndex::find(const StringTable& tokens, std::string_view text) const {
  if (slots_.empty()) return -1;
  return find_hashed(tokens, text, hash_text(text));
}

int32_t TokenIndex::first_candidate(uint64_t h) const {
  const uint32_t tag = tag_of(h) & ~id_mask_;
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    const uint32_t s = slots_[i];
    if (s == kEmpty) return -1;
    if ((s & ~id_mask_) == tag) return static_cast<int32_t>(s & id_mask_);
  }
}

void TokenIndex::find_many(const StringTable& tokens, std::span<const std::string_view> texts,
                           std::span<int32_t> ids) const {
  MINFER_ASSERT(texts.size() == ids.size());
  if (slots_.empty()) {
    std::fill(ids.begin(), ids.end(), -1);
    return;
  }
  // Four stages, kLag texts apart: text k is hashed (and its home slot fetched), then probed
  // (its first candidate's entry fetched), then that entry read (the candidate's bytes
  // fetched), then looked up by find_hashed, which finds all it reads in the cache.
  constexpr size_t kLag = 8;
  constexpr size_t kRing = 4 * kLag;  // holds the texts between the first and last stage
  std::array<uint64_t, kRing> hash{};
  std::array<int32_t, kRing> cand{};
  const size_t n = texts.size();
  for (size_t k = 0; k < n + 3 * kLag; ++k) {
    if (k < n) {
      const uint64_t h = hash_text(texts[k]);
      hash[k % kRing] = h;
      __builtin_prefetch(&slots_[h & mask_]);
    }
    if (k >= kLag && k - kLag < n) {
      const size_t j = k - kLag;
      const int32_t c = first_candidate(hash[j % kRing]);
      cand[j % kRing] = c;
      if (c >= 0) tokens.prefetch_span(static_cast<size_t>(c));
    }
    if (k >= 2 * kLag && k - 2 * kLag < n) {
      const size_t j = k - 2 * kLag;
      if (const int32_t c = cand[j % kRing]; c >= 0) tokens.prefetch_bytes(static_cast<size_t>(c));
    }
    if (k >= 3 * kLag) {
      const size_t j = k - 3 * kLag;
      ids[j] = find_hashed(tokens, texts[j], hash[j % kRing]);
    }
  }
}

size_t TokenIndex::probe(const StringTable& tokens, std::string_view text, uint64_t h) const {
  const uint32_t tag = tag_of(h) & ~id_mask_;
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    const uint32_t s = slots_[i];
    if (s == kEmpty || ((s & ~id_mask_) == tag && tokens[s & id_mask_] == text)) return i;
  }
}

int32_t TokenIndex::find_hashed(const StringTable& tokens, std::string_view text, uint64_t h) const {
  const uint32_t s = slots_[probe(tokens, text, h)];
  return s == kEmpty ? -1 : static_cast<int32_t>(s & id_mask_);
}

}  // namespace minfer::tok
