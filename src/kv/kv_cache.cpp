#include "kv/kv_cache.h"

#include <algorithm>
#include <bit>
#include <string>
#include <limits>

#include "core/ascii.h"
#include "core/error.h"
#include "quant/quant.h"

namespace minfer {

TensorType parse_kv_type(std::string_view name) {
  const std::string n = ascii_lower(name);  // any case: llama.cpp users write Q8_0 and F16
  if (n == "f32") return TensorType::F32;
  if (n == "f16") return TensorType::F16;
  if (n == "q8_0") return TensorType::Q8_0;
  fail("KV cache type '{}' is not supported (use f32, f16 or q8_0)", name);
}

KvCache::KvCache(graph::Backend& backend, int64_t n_layer, int64_t kv_dim, int64_t n_ctx, TensorType type)
    : backend_(backend), n_layer_(n_layer), kv_dim_(kv_dim), n_ctx_(n_ctx), type_(type) {
  if (type != TensorType::F32 && type != TensorType::F16 && type != TensorType::Q8_0)
    fail("KV cache type {} is not supported (use f32, f16 or q8_0)", type_name(type));
  if (n_ctx <= 0 || n_layer <= 0 || kv_dim <= 0)
    fail("KV cache: invalid geometry (layers {}, kv_dim {}, cells {})", n_layer, kv_dim, n_ctx);
  row_bytes_ = minfer::row_bytes(type, kv_dim);
  cells_.resize(static_cast<size_t>(n_ctx));
  buffers_.reserve(static_cast<size_t>(2 * n_layer));
  for (int64_t i = 0; i < 2 * n_layer; ++i) {
    const int32_t id = backend_.alloc_buffer(row_bytes_ * static_cast<uint64_t>(n_ctx));
    buffers_.push_back(id);
  }
}

KvCache::~KvCache() {
  // The regions go back to the pool (the pool itself frees memory only on destruction).
  for (int32_t id : buffers_) backend_.release_buffer(id);
}

uint64_t KvCache::bytes() const { return row_bytes_ * static_cast<uint64_t>(n_ctx_) * 2 * static_cast<uint64_t>(n_layer_); }

graph::TensorRef KvCache::region(int64_t layer, int32_t which) const {
  if (layer < 0 || layer >= n_layer_ || (which != 0 && which != 1))
    fail("KV cache: no region for layer {} / {}", layer, which);
  graph::TensorRef r;
  r.buffer = buffers_[static_cast<size_t>(layer * 2 + which)];
  r.data = backend_.buffer_ptr(r.buffer);
  r.nbytes = row_bytes_ * static_cast<uint64_t>(n_ctx_);
  return r;
}

int64_t KvCache::n_used() const {
  return std::count_if(cells_.begin(), cells_.end(), [](const Cell& c) { return c.pos >= 0; });
}

int64_t KvCache::used_extent() const {
  for (int64_t i = n_ctx_ - 1; i >= 0; --i)
    if (cells_[static_cast<size_t>(i)].pos >= 0) return i + 1;
  return 0;
}

namespace {
void check_seq(int32_t seq, bool allow_all, const char* what) {
  if (seq < (allow_all ? -1 : 0) || seq >= KvCache::kMaxSeq)
    fail("KV cache {}: sequence id {} is outside [{}, {})", what, seq, allow_all ? -1 : 0, KvCache::kMaxSeq);
}
bool in_range(int32_t pos, int32_t p0, int32_t p1) { return pos >= p0 && (p1 < 0 || pos < p1); }
}  // namespace

void KvCache::set_seq_cells(int32_t seq, int64_t begin, int64_t end) {
  if (seq < 0 || begin < 0 || end > n_ctx_ || begin >= end)
    fail("KV cache: cell range [{}, {}) of sequence {} is not within [0, {})", begin, end, seq, n_ctx_);
  for (SeqRange& r : ranges_)
    if (r.seq == seq) {
      r.begin = begin;
      r.end = end;
      return;
    }
  ranges_.push_back(SeqRange{seq, begin, end});
}

std::vector<int32_t> KvCache::allocate(int32_t seq, std::span<const int32_t> positions) {
  touched();
  check_seq(seq, false, "allocate");
  const auto n = static_cast<int64_t>(positions.size());
  std::vector<int32_t> out;
  if (n == 0) return out;
  int64_t lo = 0, hi = n_ctx_;
  for (const SeqRange& r : ranges_)
    if (r.seq == seq) lo = r.begin, hi = r.end;
  const int64_t free_cells =
      std::count_if(cells_.begin() + lo, cells_.begin() + hi, [](const Cell& c) { return c.pos < 0; });
  if (n > free_cells) {
    if (lo == 0 && hi == n_ctx_)
      fail("KV cache is full: {} tokens need cells, {} of {} are free (raise the context size with -c)",
           n, free_cells, n_ctx_);
    fail("KV cache: {} tokens of sequence {} need cells, {} of its {} cells [{}, {}) are free", n, seq,
         free_cells, hi - lo, lo, hi);
  }
  out.reserve(static_cast<size_t>(n));
  // First fit of a contiguous run (keeps attention windows short and rows in order).
  int64_t run_start = -1;
  for (int64_t i = lo, len = 0; i < hi; ++i) {
    if (cells_[static_cast<size_t>(i)].pos < 0) {
      if (++len == n) {
        run_start = i - n + 1;
        break;
      }
    } else {
      len = 0;
    }
  }
  if (run_start >= 0) {
    for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int32_t>(run_start + i));
  } else {
    for (int64_t i = lo; i < hi && static_cast<int64_t>(out.size()) < n; ++i)
      if (cells_[static_cast<size_t>(i)].pos < 0) out.push_back(static_cast<int32_t>(i));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (positions[static_cast<size_t>(i)] < 0) fail("KV cache: negative position {}", positions[static_cast<size_t>(i)]);
    cells_[static_cast<size_t>(out[static_cast<size_t>(i)])] = Cell{positions[static_cast<size_t>(i)], uint64_t{1} << seq};
  }
  return out;
}

void KvCache::remove(int32_t seq, int32_t p0, int32_t p1) {
  touched();
  check_seq(seq, true, "seq_rm");
  for (Cell& c : cells_) {
    if (c.pos < 0 || (seq >= 0 && !c.has(seq)) || !in_range(c.pos, p0, p1)) continue;
    c.seqs = seq < 0 ? 0 : c.seqs & ~(uint64_t{1} << seq);
    if (c.seqs == 0) c = Cell{};
  }
}

void KvCache::seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
  touched();
  check_seq(src, false, "seq_cp");
  check_seq(dst, false, "seq_cp");
  if (src == dst) return;
  remove(dst, p0, p1);
  for (Cell& c : cells_)
    if (c.pos >= 0 && c.has(src) && in_range(c.pos, p0, p1)) c.seqs |= uint64_t{1} << dst;
}

void KvCache::seq_keep(int32_t seq) {
  touched();
  check_seq(seq, false, "seq_keep");
  for (Cell& c : cells_) {
    c.seqs &= uint64_t{1} << seq;
    if (c.seqs == 0) c = Cell{};
  }
}

std::vector<int32_t> KvCache::seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
  touched();
  check_seq(seq, false, "seq_add");
  std::vector<int32_t> changed;
  if (delta == 0) return changed;
  for (const Cell& c : cells_)
    if (c.pos >= 0 && c.has(seq) && in_range(c.pos, p0, p1) && c.seqs != (uint64_t{1} << seq))
      fail("KV cache seq_add: a cell at position {} of sequence {} is shared with other sequences "
           "(seq_rm them or shift them all)", c.pos, seq);
  for (int64_t i = 0; i < n_ctx_; ++i) {
    Cell& c = cells_[static_cast<size_t>(i)];
    if (c.pos < 0 || !c.has(seq) || !in_range(c.pos, p0, p1)) continue;
    const int64_t np = static_cast<int64_t>(c.pos) + delta;
    if (np < 0) {
      c = Cell{};
      continue;
    }
    if (np > std::numeric_limits<int32_t>::max()) fail("KV cache seq_add: position {} + {} overflows", c.pos, delta);
    c.pos = static_cast<int32_t>(np);
    changed.push_back(static_cast<int32_t>(i));
  }
  return changed;
}

std::vector<int32_t> KvCache::seq_cells(int32_t seq) const {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n_ctx_; ++i)
    if (cells_[static_cast<size_t>(i)].pos >= 0 && cells_[static_cast<size_t>(i)].has(seq)) out.push_back(static_cast<int32_t>(i));
  std::stable_sort(out.begin(), out.end(), [&](int32_t a, int32_t b) {
    return cells_[static_cast<size_t>(a)].pos < cells_[static_cast<size_t>(b)].pos;
  });
  return out;
}

void KvCache::set_cell(int32_t cell, Cell c) {
  touched();
  if (cell < 0 || cell >= n_ctx_) fail("KV cache: cell {} is outside [0, {})", cell, n_ctx_);
  if ((c.pos < 0) != (c.seqs == 0)) fail("KV cache: cell {} would be half empty (position {})", cell, c.pos);
  cells_[static_cast<size_t>(cell)] = c;
}

namespace {
/// Calls f(first index into cells, first cell, count) for each run of consecutive cells.
template <typename F>
void for_each_run(std::span<const int32_t> cells, F f) {
  size_t i = 0;
  while (i < cells.size()) {
    size_t j = i + 1;
    while (j < cells.size() && cells[j] == cells[j - 1] + 1) ++j;
    f(i, cells[i], j - i);
    i = j;
  }
}
}  // namespace

void KvCache::read_rows(int64_t layer, int32_t which, std::span<const int32_t> cells, uint8_t* dst) const {
  const auto* base = static_cast<const uint8_t*>(region(layer, which).data);
  for (int32_t c : cells)
    if (c < 0 || c >= n_ctx_) fail("KV cache: cell {} is outside [0, {})", c, n_ctx_);
  for_each_run(cells, [&](size_t at, int32_t first, size_t count) {
    backend_.download(dst + at * row_bytes_, base + static_cast<uint64_t>(first) * row_bytes_, count * row_bytes_);
  });
}

void KvCache::write_rows(int64_t layer, int32_t which, std::span<const int32_t> cells, const uint8_t* src) {
  auto* base = static_cast<uint8_t*>(region(layer, which).data);
  for (int32_t c : cells)
    if (c < 0 || c >= n_ctx_) fail("KV cache: cell {} is outside [0, {})", c, n_ctx_);
  for_each_run(cells, [&](size_t at, int32_t first, size_t count) {
    backend_.upload(base + static_cast<uint64_t>(first) * row_bytes_, src + at * row_bytes_, count * row_bytes_);
  });
}

void KvCache::release_cells(std::span<const int32_t> cells) {
  touched();
  for (int32_t c : cells)
    if (c >= 0 && c < n_ctx_) cells_[static_cast<size_t>(c)] = Cell{};
}

void KvCache::clear() {
  touched();
  std::fill(cells_.begin(), cells_.end(), Cell{});
}

int32_t KvCache::seq_pos_max(int32_t seq) const {
  if (seq < 0 || seq >= kMaxSeq) return -1;
  if (!pos_max_valid_) {
    pos_max_.fill(-1);
    for (const Cell& c : cells_) {
      if (c.pos < 0) continue;
      for (uint64_t m = c.seqs; m != 0; m &= m - 1) {
        int32_t& v = pos_max_[static_cast<size_t>(std::countr_zero(m))];
        v = std::max(v, c.pos);
      }
    }
    pos_max_valid_ = true;
  }
  return pos_max_[static_cast<size_t>(seq)];
}

std::vector<KvCache::Move> KvCache::plan_compaction() const {
  std::vector<Move> moves;
  int64_t dst = 0;
  for (int64_t i = 0; i < n_ctx_; ++i) {
    if (cells_[static_cast<size_t>(i)].pos < 0) continue;
    if (i != dst) {
      if (!moves.empty() && moves.back().src + moves.back().count == i &&
          moves.back().dst + moves.back().count == dst)
        moves.back().count++;
      else
        moves.push_back(Move{i, dst, 1});
    }
    ++dst;
  }
  return moves;
}

std::vector<KvCache::Move> KvCache::compact() {
  touched();
  const std::vector<Move> moves = plan_compaction();
  // Each move goes to a lower index and moves are in ascending order, so a run never
  // overwrites rows a later move still has to read; within a run the backend moves
  // overlapping rows in the safe order.
  for (const Move& m : moves) {
    for (int64_t l = 0; l < n_layer_; ++l)
      for (int32_t which = 0; which < 2; ++which)
        backend_.move_rows(region(l, which).data, row_bytes_, m.src, m.dst, m.count);
    for (int64_t r = 0; r < m.count; ++r) {
      cells_[static_cast<size_t>(m.dst + r)] = cells_[static_cast<size_t>(m.src + r)];
      cells_[static_cast<size_t>(m.src + r)] = Cell{};
    }
  }
  return moves;
}

}  // namespace minfer
