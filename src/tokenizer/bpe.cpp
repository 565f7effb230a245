#include "tokenizer/bpe.h"

#include <algorithm>
#include <queue>
#include <span>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace minfer::tok {
namespace {

constexpr size_t kMaxCachedWordBytes = 64;     // longer words rarely repeat
constexpr size_t kMaxCacheEntries = 1u << 18;  // cleared when full
constexpr size_t kShortWordSymbols = 48;       // below this, scan for the best pair; above, a heap

}  // namespace

BpeModel::BpeModel(const VocabData& data, const TokenIndex& index) {
  std::string text;
  for (int b = 0; b < 256; ++b) {
    text.clear();
    utf8_append(text, byte_to_codepoint(static_cast<uint8_t>(b)));
    const int32_t id = index.find(data.tokens, text);
    MINFER_CHECK(id >= 0, "{}: the vocabulary has no token for byte 0x{:02X} ('{}')", data.source, b, text);
    byte_token_[static_cast<size_t>(b)] = id;
  }
  // The three ids of each merge (left, right, result) are looked up a block of merges at a
  // time (TokenIndex::find_many overlaps the lookups' memory reads), then the block is checked
  // and inserted in rank order, each insert fetching the slot of one a few ranks ahead.
  const size_t n_merges = data.merges.size();
  merges_.reset(n_merges);
  constexpr size_t kBlock = 256;
  constexpr size_t kAhead = 8;
  std::vector<std::string_view> texts(3 * kBlock);
  std::vector<int32_t> ids(3 * kBlock);
  for (size_t first = 0; first < n_merges; first += kBlock) {
    const size_t count = std::min(kBlock, n_merges - first);
    for (size_t k = 0; k < count; ++k) {
      const auto [left, right] = data.merges[first + k];
      texts[3 * k] = left;
      texts[3 * k + 1] = right;
      texts[3 * k + 2] = data.merges.joined(first + k);
    }
    index.find_many(data.tokens, std::span(texts).first(3 * count), std::span(ids).first(3 * count));
    for (size_t k = 0; k < count; ++k) {
      if (const size_t a = k + kAhead; a < count && ids[3 * a] >= 0 && ids[3 * a + 1] >= 0)
        merges_.prefetch(ids[3 * a], ids[3 * a + 1]);
      const size_t rank = first + k;
      const int32_t l = ids[3 * k], r = ids[3 * k + 1], m = ids[3 * k + 2];
      MINFER_CHECK(l >= 0 && r >= 0 && m >= 0,
            "{}: merge {} ('{} {}') names a token that is not in the vocabulary ('{}')", data.source,
            rank, texts[3 * k], texts[3 * k + 1], l < 0 ? texts[3 * k] : r < 0 ? texts[3 * k + 1] : texts[3 * k + 2]);
      merges_.insert(l, r, static_cast<int32_t>(rank), m);
    }
  }
}

std::vector<bool> BpeModel::emittable(size_t n_tokens) const {
  std::vector<bool> out(n_tokens, false);
  for (int32_t id : byte_token_) out[static_cast<size_t>(id)] = true;
  merges_.for_each([&](const Merge& m) { out[static_cast<size_t>(m.result)] = true; });
  return out;
}

// Short words: keep the rank of every adjacent pair in an array; each step merges the
// lowest-rank, leftmost pair and recomputes only the two pairs that changed.
void BpeModel::merge_short(std::vector<int32_t>& ids) const {
  constexpr int32_t kNone = INT32_MAX;
  std::vector<int32_t> rank(ids.size(), kNone);
  std::vector<int32_t> result(ids.size(), -1);
  auto set_pair = [&](size_t i) {
    const Merge* m = find(ids[i], ids[i + 1]);
    rank[i] = m ? m->rank : kNone;
    result[i] = m ? m->result : -1;
  };
  for (size_t i = 0; i + 1 < ids.size(); ++i) set_pair(i);
  while (ids.size() > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < ids.size(); ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNone) break;
    ids[best] = result[best];
    ids.erase(ids.begin() + static_cast<ptrdiff_t>(best) + 1);
    rank.erase(rank.begin() + static_cast<ptrdiff_t>(best) + 1);
    result.erase(result.begin() + static_cast<ptrdiff_t>(best) + 1);
    rank.back() = kNone;  // the last slot has no right neighbour
    if (best + 1 < ids.size()) set_pair(best);
    else rank[best] = kNone;
    if (best > 0) set_pair(best - 1);
  }
}

// Long words (e.g. a long run of one character): linked symbols and a priority queue of
// candidate pairs ordered by (rank, position); stale entries are skipped when popped.
void BpeModel::merge_long(std::vector<int32_t>& ids) const {
  const int n = static_cast<int>(ids.size());
  std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<bool> alive(static_cast<size_t>(n), true);
  for (int i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    int32_t rank;
    int left, right;
    int32_t left_id, right_id, result;
    bool operator>(const Cand& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> queue;
  auto push = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const Merge* m = find(ids[static_cast<size_t>(l)], ids[static_cast<size_t>(r)]);
    if (m) queue.push({m->rank, l, r, ids[static_cast<size_t>(l)], ids[static_cast<size_t>(r)], m->result});
  };
  for (int i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    const auto l = static_cast<size_t>(c.left), r = static_cast<size_t>(c.right);
    if (!alive[l] || !alive[r] || next[l] != c.right || ids[l] != c.left_id || ids[r] != c.right_id)
      continue;  // stale: one side changed since this pair was queued
    ids[l] = c.result;
    alive[r] = false;
    next[l] = next[r];
    if (next[r] >= 0) prev[static_cast<size_t>(next[r])] = c.left;
    push(prev[l], c.left);
    push(c.left, next[l]);
  }
  size_t w = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    if (alive[i]) ids[w++] = ids[i];
  ids.resize(w);
}

void BpeModel::encode_word_uncached(std::string_view word, std::vector<int32_t>& out) const {
  std::vector<int32_t> ids(word.size());
  for (size_t i = 0; i < word.size(); ++i) ids[i] = byte_token_[static_cast<uint8_t>(word[i])];
  if (ids.size() <= kShortWordSymbols) merge_short(ids);
  else merge_long(ids);
  out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() == 1) {
    out.push_back(byte_token_[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (word.size() > kMaxCachedWordBytes) {
    encode_word_uncached(word, out);
    return;
  }
  {
    std::lock_guard lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  encode_word_uncached(word, out);
  std::vector<int32_t> ids(out.begin() + static_cast<ptrdiff_t>(start), out.end());
  std::lock_guard lock(cache_mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::string(word), std::move(ids));
}

}  // namespace minfer::tok
