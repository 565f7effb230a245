#include "tokenizer/special_tokens.h"

#include <algorithm>
#include <iterator>
#include <cstring>
#include <map>

namespace minfer::tok {
namespace {

bool is_ascii_space(char c) {  // C isspace() in the "C" locale, as llama.cpp uses
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

}  // namespace

SpecialTokenMatcher::SpecialTokenMatcher(const StringTable& tokens,
                                         const std::vector<TokenType>& types,
                                         const std::vector<uint8_t>& strip) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const TokenType t = types[i];
    if (t == TokenType::Control || t == TokenType::Unknown || t == TokenType::UserDefined)
      ids.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return tokens[static_cast<size_t>(a)].size() > tokens[static_cast<size_t>(b)].size();
  });
  for (size_t p = 0; p < ids.size(); ++p) {
    const auto i = static_cast<size_t>(ids[p]);
    const TokenType t = types[i];
    by_first_byte_[static_cast<uint8_t>(tokens[i][0])].push_back(
        Entry{ids[p], static_cast<uint32_t>(p), t != TokenType::UserDefined,
              strip.empty() ? uint8_t{kStripNone} : strip[i], std::string(tokens[i])});
  }
  n_entries_ = ids.size();
}

size_t SpecialTokenMatcher::memory_bytes() const {
  size_t bytes = 0;
  for (const auto& bucket : by_first_byte_) {
    bytes += bucket.capacity() * sizeof(Entry);
    for (const Entry& e : bucket)
      if (e.text.capacity() > std::string().capacity()) bytes += e.text.capacity() + 1;  // not inline
  }
  return bytes;
}

void SpecialTokenMatcher::partition(std::string_view text, bool parse_special,
                                    std::vector<Fragment>& out) const {
  struct Cand {
    uint32_t priority;
    size_t pos;
    const Entry* e;
  };
  std::vector<Cand> cands;
  if (n_entries_ > 0) {
    for (size_t pos = 0; pos < text.size(); ++pos) {
      const auto& bucket = by_first_byte_[static_cast<uint8_t>(text[pos])];
      for (const Entry& e : bucket) {
        if (e.control && !parse_special) continue;
        if (e.text.size() <= text.size() - pos &&
            std::memcmp(text.data() + pos, e.text.data(), e.text.size()) == 0)
          cands.push_back({e.priority, pos, &e});
      }
    }
  }
  if (cands.empty()) {
    if (!text.empty()) out.push_back(Fragment{false, -1, text});
    return;
  }
  std::sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
    return a.priority != b.priority ? a.priority < b.priority : a.pos < b.pos;
  });
  // Taken ranges, start -> end (end exclusive): matched tokens plus any whitespace they strip.
  struct Taken {
    size_t end;
    int32_t id;
  };
  std::map<size_t, Taken> taken;
  for (const Cand& c : cands) {
    const size_t b = c.pos, e = c.pos + c.e->text.size();
    auto next = taken.lower_bound(b);
    if (next != taken.end() && next->first < e) continue;  // overlaps a later range
    size_t left_limit = 0;
    if (next != taken.begin()) {
      auto prev = std::prev(next);
      if (prev->second.end > b) continue;  // overlaps an earlier range
      left_limit = prev->second.end;
    }
    const size_t right_limit = next == taken.end() ? text.size() : next->first;
    size_t lb = b, re = e;
    if (c.e->strip & kStripLeft)
      while (lb > left_limit && is_ascii_space(text[lb - 1])) --lb;
    if (c.e->strip & kStripRight)
      while (re < right_limit && is_ascii_space(text[re])) ++re;
    taken.emplace(lb, Taken{re, c.e->id});
  }
  size_t pos = 0;
  for (const auto& [start, t] : taken) {
    if (start > pos) out.push_back(Fragment{false, -1, text.substr(pos, start - pos)});
    out.push_back(Fragment{true, t.id, {}});
    pos = t.end;
  }
  if (pos < text.size()) out.push_back(Fragment{false, -1, text.substr(pos)});
}

}  // namespace minfer::tok
