#include "tokenizer/spm.h"

#include <queue>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace minfer::tok {
namespace {

constexpr char kHex[] = "0123456789ABCDEF";

// "<0xNN>" for byte b (upper-case hex, the spelling of SentencePiece's byte pieces).
std::string byte_piece_text(int b) {
  return std::string{'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string spm_escape(std::string_view text, bool prefix_space) {
  std::string out;
  out.reserve(text.size() + text.size() / 4 + 3);
  if (prefix_space) out.append(kSpmSpace);
  for (char c : text) {
    if (c == ' ') out.append(kSpmSpace);
    else out.push_back(c);
  }
  return out;
}

std::string spm_piece(std::string_view text, TokenType type) {
  if (type == TokenType::Byte) {
    if (text.size() == 6 && text.substr(0, 3) == "<0x" && text[5] == '>') {
      const int hi = hex_digit(text[3]), lo = hex_digit(text[4]);
      if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
    }
    return std::string(text);  // a Byte token not spelled <0xNN>: its text, as written
  }
  if (type != TokenType::Normal && type != TokenType::UserDefined) return std::string(text);
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, kSpmSpace.size()) == kSpmSpace) {
      out.push_back(' ');
      i += kSpmSpace.size();
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

SpmModel::SpmModel(const VocabData& data, const TokenIndex& index) : scores_(data.scores), unk_id_(data.unk_id) {
  mergeable_.resize(data.types.size());
  for (size_t i = 0; i < data.types.size(); ++i)
    mergeable_[i] = data.types[i] == TokenType::Normal || data.types[i] == TokenType::UserDefined;
  for (int b = 0; b < 256; ++b) {
    const std::string text = byte_piece_text(b);
    const int32_t id = index.find(data.tokens, text);
    if (id >= 0)
      MINFER_CHECK(data.types[static_cast<size_t>(id)] == TokenType::Byte,
            "{}: token {} '{}' looks like a byte-fallback piece but has type {}, not 6 (byte)", data.source,
            id, text, static_cast<int>(data.types[static_cast<size_t>(id)]));
    byte_token_[static_cast<size_t>(b)] = id;
  }
}

void SpmModel::encode(std::string_view text, const StringTable& tokens, const TokenIndex& index,
                      std::vector<int32_t>& out) const {
  if (text.empty()) return;
  // Symbols: byte ranges of the text, linked in order; a merged symbol keeps the left one's
  // start and the sum of both lengths (neighbours are adjacent in the text).
  struct Symbol {
    uint32_t start, len;
    int32_t prev, next;
  };
  std::vector<Symbol> sym;
  sym.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t n = utf8_char_len(text, pos);
    if (n == 0) n = 1;  // an invalid byte: a symbol of its own (then its byte token)
    const auto i = static_cast<int32_t>(sym.size());
    sym.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(n), i - 1, i + 1});
    pos += n;
  }
  sym.back().next = -1;

  struct Pair {
    float score;
    int32_t left, right;
    uint32_t len;  ///< bytes of left + right when queued (stale once either side changed)
  };
  // Highest score first; equal scores: leftmost first.
  auto worse = [](const Pair& a, const Pair& b) {
    return a.score != b.score ? a.score < b.score : a.left > b.left;
  };
  std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> queue(worse);
  auto try_pair = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const Symbol& a = sym[static_cast<size_t>(l)];
    const uint32_t len = a.len + sym[static_cast<size_t>(r)].len;
    const int32_t id = index.find(tokens, text.substr(a.start, len));
    if (id < 0 || !mergeable_[static_cast<size_t>(id)]) return;
    queue.push({scores_.empty() ? 0.0f : scores_[static_cast<size_t>(id)], l, r, len});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_pair(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol& l = sym[static_cast<size_t>(p.left)];
    Symbol& r = sym[static_cast<size_t>(p.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != p.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
    const Symbol& s = sym[static_cast<size_t>(i)];
    const std::string_view piece = text.substr(s.start, s.len);
    if (const int32_t id = index.find(tokens, piece); id >= 0 && mergeable_[static_cast<size_t>(id)]) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {  // byte fallback
      const int32_t b = byte_token_[static_cast<uint8_t>(c)];
      if (b < 0 && unk_id_ < 0)
        fail("SentencePiece: byte 0x{:02X} has no <0x{:02X}> token and the vocabulary has no unknown token",
             static_cast<uint8_t>(c), static_cast<uint8_t>(c));
      out.push_back(b >= 0 ? b : unk_id_);
    }
  }
}

}  // namespace minfer::tok
