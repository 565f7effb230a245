#include "kv/session_file.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <thread>

#include "core/error.h"
#include "quant/quant.h"

namespace minfer::kv {
namespace {

constexpr uint32_t tag(const char (&s)[5]) {
  return static_cast<uint32_t>(static_cast<uint8_t>(s[0])) | static_cast<uint32_t>(static_cast<uint8_t>(s[1])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(s[2])) << 16 | static_cast<uint32_t>(static_cast<uint8_t>(s[3])) << 24;
}
constexpr uint32_t kTagModel = tag("MODL");
constexpr uint32_t kTagSeqs = tag("SEQS");
constexpr uint32_t kTagRows = tag("KVRW");
constexpr uint64_t kFileHeaderBytes = 16;    // magic, version, reserved
constexpr uint64_t kSectionOverhead = 24;    // tag, reserved, length, checksum
constexpr uint32_t kMaxNameBytes = 1024;     // arch / general.name kept in the model section

std::string tag_name(uint32_t t) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    const char c = static_cast<char>((t >> (8 * i)) & 0xff);
    s += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return s;
}

class Writer {
 public:
  template <typename T>
  void put(T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
  void bytes(const void* p, size_t n) {
    const size_t at = out.size();
    out.resize(at + n);
    if (n) std::memcpy(out.data() + at, p, n);
  }
  void str(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(std::min<size_t>(s.size(), kMaxNameBytes)));
    bytes(s.data(), std::min<size_t>(s.size(), kMaxNameBytes));
  }
  std::vector<uint8_t> out;
};

/// Starts a section (tag, reserved, length to be filled in); returns where it starts.
size_t begin_section(Writer& w, uint32_t t) {
  const size_t start = w.out.size();
  w.put<uint32_t>(t);
  w.put<uint32_t>(0);
  w.put<uint64_t>(0);
  return start;
}
/// Fills in the length of the section begun at `start` and appends its checksum.
void end_section(Writer& w, size_t start) {
  const uint64_t len = w.out.size() - start - 16;
  std::memcpy(w.out.data() + start + 8, &len, 8);
  w.put<uint64_t>(XXH64(w.out.data() + start, w.out.size() - start, 0));
}

/// Bounds-checked little-endian reads of one payload (or the file header).
class Reader {
 public:
  Reader(std::span<const uint8_t> b, std::string_view name, std::string what) : b_(b), name_(name), what_(std::move(what)) {}
  template <typename T>
  T get() {
    T v;
    need(sizeof(T));
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::span<const uint8_t> take(uint64_t n) {
    need(n);
    auto s = b_.subspan(at_, static_cast<size_t>(n));
    at_ += static_cast<size_t>(n);
    return s;
  }
  std::string str() {
    const auto n = get<uint32_t>();
    if (n > kMaxNameBytes) fail("{}: {} names a string of {} bytes (at most {})", name_, what_, n, kMaxNameBytes);
    const auto s = take(n);
    return std::string(s.begin(), s.end());
  }
  void need(uint64_t n) const {
    if (n > b_.size() - at_)
      fail("{}: {} ends early: {} more bytes needed at offset {}, {} left (the file is damaged)", name_, what_, n, at_,
           b_.size() - at_);
  }
  void done() const {
    if (at_ != b_.size())
      fail("{}: {} has {} unexpected bytes after its content (the file is damaged)", name_, what_, b_.size() - at_);
  }
  size_t at() const { return at_; }
  size_t left() const { return b_.size() - at_; }

 private:
  std::span<const uint8_t> b_;
  size_t at_ = 0;
  std::string_view name_;
  std::string what_;
};

/// XXH64 of a section: its 16 framing bytes (tag, reserved = 0, length) and its payload, given
/// as two consecutive parts (`rest` may be empty).
uint64_t section_checksum(uint32_t t, std::span<const uint8_t> payload, std::span<const uint8_t> rest = {}) {
  uint8_t head[16];
  const uint64_t len = payload.size() + rest.size();
  std::memcpy(head, &t, 4);
  std::memset(head + 4, 0, 4);
  std::memcpy(head + 8, &len, 8);
  XXH64_state_t st;
  XXH64_reset(&st, 0);
  XXH64_update(&st, head, sizeof head);
  XXH64_update(&st, payload.data(), payload.size());
  XXH64_update(&st, rest.data(), rest.size());
  return XXH64_digest(&st);
}

/// One section as found in the file: its payload and the checksum stored after it.
struct FoundSection {
  uint32_t tag = 0;
  std::span<const uint8_t> payload;
  uint64_t stored = 0;
  std::string which;
};

/// Reads the framing of the next section of `want` tag and checks that its length fits; the
/// checksum is not computed here (check_section does).
FoundSection next_section_unchecked(Reader& file, std::string_view name, uint32_t want, std::string which) {
  if (file.left() < kSectionOverhead)
    fail("{}: the file is truncated: it ends before section {} ({} bytes left)", name, which, file.left());
  const auto t = file.get<uint32_t>();
  if (t != want) fail("{}: section '{}' found where {} ('{}') belongs (the file is damaged)", name, tag_name(t), which, tag_name(want));
  if (file.get<uint32_t>() != 0) fail("{}: section {} has a nonzero reserved field (the file is damaged)", name, which);
  const auto len = file.get<uint64_t>();
  if (len > file.left() || file.left() - len < 8)
    fail("{}: the file is truncated: section {} says {} bytes, {} are left", name, which, len, file.left() >= 8 ? file.left() - 8 : 0);
  FoundSection f;
  f.tag = t;
  f.payload = file.take(len);
  f.stored = file.get<uint64_t>();
  f.which = std::move(which);
  return f;
}

void check_section(const FoundSection& f, std::string_view name) {
  const uint64_t got = section_checksum(f.tag, f.payload);
  if (got != f.stored)
    fail("{}: checksum mismatch in section {} (stored {:016x}, computed {:016x}): the file is damaged", name, f.which,
         f.stored, got);
}

/// Reads the next section of `want` tag; checks its length fits and its checksum.
std::span<const uint8_t> next_section(Reader& file, std::string_view name, uint32_t want, const std::string& which) {
  const FoundSection f = next_section_unchecked(file, name, want, which);
  check_section(f, name);
  return f.payload;
}

/// Checks the sections' checksums, in parallel when they are large; throws the error of the
/// first damaged one in `sections` order.
void check_sections(const std::vector<FoundSection>& sections, std::string_view name) {
  uint64_t total = 0;
  for (const FoundSection& f : sections) total += f.payload.size();
  constexpr uint64_t kParallelBytes = uint64_t{16} << 20;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t n_threads = std::min<size_t>({8, hw, sections.size()});
  if (total < kParallelBytes || n_threads < 2) {
    for (const FoundSection& f : sections) check_section(f, name);
    return;
  }
  std::vector<uint8_t> ok(sections.size(), 0);
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < sections.size(); i = next++)
      ok[i] = section_checksum(sections[i].tag, sections[i].payload) == sections[i].stored;
  };
  std::vector<std::thread> threads;
  threads.reserve(n_threads - 1);
  try {
    for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(work);
  } catch (const std::system_error&) {
    // No more threads: the ones started and this one do the rest.
  }
  work();
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < sections.size(); ++i)
    if (!ok[i]) check_section(sections[i], name);  // throws the message with both sums
}

bool kv_type_ok(TensorType t) { return t == TensorType::F32 || t == TensorType::F16 || t == TensorType::Q8_0; }

}  // namespace

uint64_t count_cells(std::span<const SessionSequence> seqs) {
  uint64_t n = 0;
  for (const SessionSequence& s : seqs) n += s.positions.size();
  return n;
}

uint64_t SessionData::n_cells() const { return count_cells(seqs); }

uint64_t max_session_bytes(int64_t n_layer, uint64_t row_bytes, int64_t n_cells, int64_t n_seq) {
  const auto L = static_cast<uint64_t>(n_layer), C = static_cast<uint64_t>(n_cells), S = static_cast<uint64_t>(n_seq);
  return kFileHeaderBytes + kSectionOverhead + 24 + 2 * (4 + kMaxNameBytes) +       // model
         kSectionOverhead + 8 + S * 8 + C * 8 +                                     // sequences
         L * (kSectionOverhead + 8 + 2 * C * row_bytes);                             // rows
}

std::vector<uint8_t> encode_session_head(const ModelFingerprint& model, TensorType kv_type,
                                         std::span<const SessionSequence> seqs) {
  Writer w;
  w.out.reserve(max_session_bytes(0, 0, static_cast<int64_t>(count_cells(seqs)), static_cast<int64_t>(seqs.size())));
  w.bytes(kSessionMagic, sizeof kSessionMagic);
  w.put<uint32_t>(kSessionVersion);
  w.put<uint32_t>(0);
  {
    const size_t at = begin_section(w, kTagModel);
    w.put<uint64_t>(model.hash);
    w.put<uint32_t>(model.n_layer);
    w.put<uint32_t>(model.kv_dim);
    w.put<uint32_t>(model.n_vocab);
    w.put<uint32_t>(0);
    w.str(model.arch);
    w.str(model.name);
    end_section(w, at);
  }
  {
    const size_t at = begin_section(w, kTagSeqs);
    w.put<uint32_t>(static_cast<uint32_t>(kv_type));
    w.put<uint32_t>(static_cast<uint32_t>(seqs.size()));
    for (const SessionSequence& sq : seqs) {
      if (sq.positions.size() != sq.tokens.size())
        fail("session: sequence {} has {} positions and {} tokens", sq.seq, sq.positions.size(), sq.tokens.size());
      w.put<int32_t>(sq.seq);
      w.put<uint32_t>(static_cast<uint32_t>(sq.positions.size()));
      w.bytes(sq.positions.data(), sq.positions.size() * 4);
      w.bytes(sq.tokens.data(), sq.tokens.size() * 4);
    }
    end_section(w, at);
  }
  return std::move(w.out);
}

RowsFrame rows_section_frame(uint32_t layer, std::span<const uint8_t> rows) {
  RowsFrame f;
  const uint32_t reserved = 0;
  const uint64_t len = 8 + rows.size();
  std::memcpy(f.before.data(), &kTagRows, 4);
  std::memcpy(f.before.data() + 4, &reserved, 4);
  std::memcpy(f.before.data() + 8, &len, 8);
  std::memcpy(f.before.data() + 16, &layer, 4);  // the payload: layer index, reserved, rows
  std::memcpy(f.before.data() + 20, &reserved, 4);
  const uint64_t sum = section_checksum(kTagRows, std::span(f.before).subspan(16), rows);
  std::memcpy(f.after.data(), &sum, 8);
  return f;
}

std::vector<uint8_t> encode_session(const SessionData& s) {
  const uint64_t rb = row_bytes(s.kv_type, s.model.kv_dim);
  const uint64_t n_cells = s.n_cells();
  if (s.rows.size() != s.model.n_layer) fail("session: {} layers of rows for a model of {} layers", s.rows.size(), s.model.n_layer);
  std::vector<uint8_t> out = encode_session_head(s.model, s.kv_type, s.seqs);
  out.reserve(out.size() + s.model.n_layer * (kSectionOverhead + 8 + 2 * n_cells * rb));
  for (uint32_t l = 0; l < s.model.n_layer; ++l) {
    if (s.rows[l].size() != 2 * n_cells * rb)
      fail("session: layer {} has {} bytes of rows, {} expected", l, s.rows[l].size(), 2 * n_cells * rb);
    const RowsFrame f = rows_section_frame(l, s.rows[l]);
    out.insert(out.end(), f.before.begin(), f.before.end());
    out.insert(out.end(), s.rows[l].begin(), s.rows[l].end());
    out.insert(out.end(), f.after.begin(), f.after.end());
  }
  return out;
}

SessionView decode_session_view(std::span<const uint8_t> bytes, std::string_view name, const ModelFingerprint& expect,
                                const SessionLimits& limits) {
  if (bytes.size() < kFileHeaderBytes) {
    if (bytes.size() < sizeof kSessionMagic || std::memcmp(bytes.data(), kSessionMagic, sizeof kSessionMagic) != 0)
      fail("{}: not a minfer session file (bad magic; {} bytes)", name, bytes.size());
    fail("{}: the file is truncated: {} bytes, the header alone is {}", name, bytes.size(), kFileHeaderBytes);
  }
  if (std::memcmp(bytes.data(), kSessionMagic, sizeof kSessionMagic) != 0)
    fail("{}: not a minfer session file (bad magic)", name);
  Reader file(bytes, name, "the file");
  file.take(sizeof kSessionMagic);
  const auto version = file.get<uint32_t>();
  if (version != kSessionVersion)
    fail("{}: session format version {} (this build reads version {})", name, version, kSessionVersion);
  if (file.get<uint32_t>() != 0) fail("{}: the header's reserved field is not 0 (the file is damaged)", name);

  SessionView s;
  {
    Reader m(next_section(file, name, kTagModel, "model"), name, "the model section");
    s.model.hash = m.get<uint64_t>();
    s.model.n_layer = m.get<uint32_t>();
    s.model.kv_dim = m.get<uint32_t>();
    s.model.n_vocab = m.get<uint32_t>();
    if (m.get<uint32_t>() != 0) fail("{}: the model section's reserved field is not 0 (the file is damaged)", name);
    s.model.arch = m.str();
    s.model.name = m.str();
    m.done();
    if (s.model.hash != expect.hash || s.model.n_layer != expect.n_layer || s.model.kv_dim != expect.kv_dim ||
        s.model.n_vocab != expect.n_vocab)
      fail("{}: saved from another model ({} '{}', {} layers, kv_dim {}, vocab {}, fingerprint {:016x}); this is {} '{}' "
           "({} layers, kv_dim {}, vocab {}, fingerprint {:016x})",
           name, s.model.arch, s.model.name, s.model.n_layer, s.model.kv_dim, s.model.n_vocab, s.model.hash, expect.arch,
           expect.name, expect.n_layer, expect.kv_dim, expect.n_vocab, expect.hash);
  }
  uint64_t n_cells = 0;
  {
    Reader q(next_section(file, name, kTagSeqs, "sequences"), name, "the sequences section");
    const auto type = q.get<uint32_t>();
    s.kv_type = static_cast<TensorType>(type);
    if (!kv_type_ok(s.kv_type))
      fail("{}: KV type {} cannot be restored (f32, f16 and q8_0 can)", name,
           find_type_traits(s.kv_type) ? std::string(type_name(s.kv_type)) : fmt::format("id {}", type));
    const auto n_seq = q.get<uint32_t>();
    if (n_seq > static_cast<uint32_t>(limits.max_seq))
      fail("{}: {} sequences, more than the {} a cache tells apart", name, n_seq, limits.max_seq);
    for (uint32_t i = 0; i < n_seq; ++i) {
      SessionSequence sq;
      sq.seq = q.get<int32_t>();
      if (sq.seq < 0 || sq.seq >= limits.max_seq) fail("{}: sequence id {} is outside [0, {})", name, sq.seq, limits.max_seq);
      for (const auto& o : s.seqs)
        if (o.seq == sq.seq) fail("{}: sequence {} appears twice", name, sq.seq);
      const auto n = q.get<uint32_t>();
      n_cells += n;
      if (static_cast<int64_t>(n_cells) > limits.n_ctx)
        fail("{}: {} cells or more, more than the context of {} cells (raise -c)", name, n_cells, limits.n_ctx);
      q.need(uint64_t{8} * n);
      sq.positions.resize(n);
      sq.tokens.resize(n);
      std::memcpy(sq.positions.data(), q.take(uint64_t{4} * n).data(), uint64_t{4} * n);
      std::memcpy(sq.tokens.data(), q.take(uint64_t{4} * n).data(), uint64_t{4} * n);
      for (uint32_t j = 0; j < n; ++j) {
        if (sq.positions[j] < 0 || (j > 0 && sq.positions[j] <= sq.positions[j - 1]))
          fail("{}: sequence {}: position {} at cell {} is negative or not after the one before", name, sq.seq, sq.positions[j], j);
        if (sq.tokens[j] < 0 || sq.tokens[j] >= limits.n_vocab)
          fail("{}: sequence {}: token id {} at cell {} is outside the vocabulary [0, {})", name, sq.seq, sq.tokens[j], j,
               limits.n_vocab);
      }
      s.seqs.push_back(std::move(sq));
    }
    q.done();
  }
  // The rows sections: their framing is read in order, their checksums computed together
  // after (in parallel when large). An error in the framing of a later section is reported only
  // when no earlier section is damaged, so the error is always the first damage in file order.
  const uint64_t rb = row_bytes(s.kv_type, s.model.kv_dim);
  s.rows.resize(s.model.n_layer);
  std::vector<FoundSection> found;
  found.reserve(s.model.n_layer);
  try {
    for (uint32_t l = 0; l < s.model.n_layer; ++l) {
      found.push_back(next_section_unchecked(file, name, kTagRows, fmt::format("rows of layer {}", l)));
      Reader r(found.back().payload, name, fmt::format("layer {}'s rows", l));
      const auto layer = r.get<uint32_t>();
      if (layer != l) fail("{}: rows of layer {} found where layer {} belongs (the file is damaged)", name, layer, l);
      if (r.get<uint32_t>() != 0) fail("{}: layer {}'s reserved field is not 0 (the file is damaged)", name, l);
      if (r.left() != 2 * n_cells * rb)
        fail("{}: layer {} holds {} bytes of rows; {} cells of {} K and V rows need {}", name, l, r.left(), n_cells,
             type_name(s.kv_type), 2 * n_cells * rb);
      s.rows[l] = r.take(r.left());
    }
    file.done();
  } catch (const Error&) {
    for (const FoundSection& f : found) check_section(f, name);  // an earlier damaged section wins
    throw;
  }
  check_sections(found, name);
  return s;
}

std::vector<uint8_t> convert_kv_rows(std::span<const uint8_t> rows, TensorType from, TensorType to, int64_t kv_dim) {
  if (from == to) return std::vector<uint8_t>(rows.begin(), rows.end());
  const TypeTraits& tf = type_traits(from);
  const TypeTraits& tt = type_traits(to);
  const size_t rb_from = row_bytes(from, kv_dim), rb_to = row_bytes(to, kv_dim);
  if (rows.size() % rb_from != 0) fail("KV rows: {} bytes is not a whole number of {} rows", rows.size(), type_name(from));
  const size_t n = rows.size() / rb_from;
  std::vector<uint8_t> out(n * rb_to);
  std::vector<float> tmp(static_cast<size_t>(kv_dim));
  for (size_t i = 0; i < n; ++i) {
    tf.dequantize_row(rows.data() + i * rb_from, tmp.data(), kv_dim);
    tt.quantize_row(tmp.data(), out.data() + i * rb_to, kv_dim);
  }
  return out;
}

}  // namespace minfer::kv
