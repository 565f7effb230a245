#include "engine/engine.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>
#include <future>

#include "core/atomic_file.h"
#include "core/mapped_file.h"
#include "core/ascii.h"
#include "core/env.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "core/log.h"
#include "core/progress.h"
#include "quant/quant.h"
#include "cpu/cpu_backend.h"

namespace minfer {

using graph::BackendKind;

namespace {
constexpr size_t kMaxCachedGraphs = 32;
}

Batch Batch::sequence(std::span<const int32_t> tokens, int32_t start, int32_t seq, bool all_logits) {
  Batch b;
  b.tokens.assign(tokens.begin(), tokens.end());
  b.positions.resize(tokens.size());
  b.seq_ids.assign(tokens.size(), seq);
  b.logits.assign(tokens.size(), all_logits ? 1 : 0);
  for (size_t i = 0; i < tokens.size(); ++i) b.positions[i] = start + static_cast<int32_t>(i);
  if (!tokens.empty()) b.logits.back() = 1;
  return b;
}

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// Bytes of host memory (physical pages x page size), or 0 when the OS does not say.
double host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

/// "context N needs X GiB of KV cache (L layers x 2 (K, V) x N cells x B bytes per <type> row)".
std::string kv_need(int64_t n_ctx, int64_t n_layer, int64_t kv_dim, TensorType type, double bytes) {
  return fmt::format("context {} (-c) needs {:.1f} GiB of KV cache ({} layers x 2 (K, V) x {} cells x {} bytes per {} row of {})",
                     n_ctx, bytes / kGiB, n_layer, n_ctx, row_bytes(type, kv_dim), type_name(type), kv_dim);
}

/// Refuses a context whose KV cache cannot be addressed or cannot fit in host memory, before
/// anything is allocated (the product is computed in double: no integer overflow).
void check_context_fits(const HParams& h, int64_t n_ctx, TensorType type, graph::BackendKind device) {
  if (n_ctx > std::numeric_limits<int32_t>::max())
    fail("context size {} (-c) is larger than the largest position {}", n_ctx, std::numeric_limits<int32_t>::max());
  if (type != TensorType::F32 && type != TensorType::F16 && type != TensorType::Q8_0) return;  // KvCache names it
  if (h.n_layer <= 0 || h.kv_dim() <= 0) return;  // KvCache names the geometry
  const double bytes = 2.0 * static_cast<double>(h.n_layer) * static_cast<double>(n_ctx) *
                       static_cast<double>(row_bytes(type, h.kv_dim()));
  const double host = host_memory_bytes();
  if (device == BackendKind::Cpu && host > 0 && bytes > host)
    fail("{}, more than the {:.1f} GiB of memory of this machine; lower -c", kv_need(n_ctx, h.n_layer, h.kv_dim(), type, bytes),
         host / kGiB);
}

}  // namespace

int64_t first_non_finite(std::span<const float> values) {
  // The first loop has no early exit, so it vectorizes (an AND, a compare and an OR per vector);
  // only a row that holds a non-finite value is read again for its index.
  constexpr uint32_t kExp = 0x7F800000u;  // binary32 exponent field; all ones = Inf or NaN
  uint32_t bad = 0;
  for (const float v : values) bad |= (std::bit_cast<uint32_t>(v) & kExp) == kExp;
  if (bad == 0) return -1;
  for (size_t i = 0; i < values.size(); ++i)
    if ((std::bit_cast<uint32_t>(values[i]) & kExp) == kExp) return static_cast<int64_t>(i);
  return -1;
}

NonFiniteLogitsError::NonFiniteLogitsError(std::string step, int32_t position_, int32_t seq_, int64_t vocab_id_,
                                           float value_)
    : Error(fmt::format("{} (position {}{}): logits contain {} (first at vocab id {}); the model's weights or "
                        "activations are not finite",
                        step, position_, seq_ != 0 ? fmt::format(", sequence {}", seq_) : std::string(),
                        std::isnan(value_) ? "NaN" : value_ > 0 ? "+Inf" : "-Inf", vocab_id_)),
      position(position_),
      seq(seq_),
      vocab_id(vocab_id_),
      value(value_) {}

graph::BackendKind parse_device(std::string_view name) {
  const std::string n = ascii_lower(name);  // any case: "CPU", "CUDA" (llama.cpp's device names are upper case)
  if (n == "cpu" || n == "none") return BackendKind::Cpu;  // llama.cpp's --device none: no GPU
  if (n == "cuda" || n == "gpu" || n == "cuda0") return BackendKind::Cuda;  // CUDA0: llama.cpp's first GPU
  fail("device '{}' is not known (use cpu or cuda)", name);
}

int32_t default_ubatch(graph::BackendKind device) {
  return device == BackendKind::Cuda ? kDefaultUbatchCuda : kDefaultUbatchCpu;
}

Engine::Engine(std::shared_ptr<const Model> model, const EngineConfig& config)
    : model_(std::move(model)), cfg_(config) {
  const HParams& h = model_->hparams();
  if (cfg_.n_ctx <= 0) cfg_.n_ctx = std::min<int64_t>(h.n_ctx_train, 4096);
  if (cfg_.n_ubatch < 0) fail("ubatch size {} must be positive (or 0 for the device's default)", cfg_.n_ubatch);
  if (cfg_.n_ubatch == 0) cfg_.n_ubatch = default_ubatch(cfg_.device);
  if (cfg_.kv_window_granule <= 0) fail("KV window granule must be positive");
  dump_path_ = cfg_.graph_dump.empty() ? env_string("MINFER_GRAPH_DUMP") : cfg_.graph_dump;
  if (!dump_path_.empty()) {  // a bad extension or folder: an error now, not after the first forward
    try {
      (void)graph::graph_dump_format(dump_path_);
      check_output_path(dump_path_);
    } catch (const Error& e) {
      if (!cfg_.graph_dump.empty()) throw;
      fail("MINFER_GRAPH_DUMP: {}", e.what());
    }
  }
  check_context_fits(h, cfg_.n_ctx, cfg_.kv_type, cfg_.device);
  if (const int64_t per_seq = cfg_.n_seq_ctx > 0 ? std::min(cfg_.n_seq_ctx, cfg_.n_ctx) : cfg_.n_ctx;
      per_seq > h.n_ctx_train)
    log_warn("context size {} exceeds the model's training context {}", per_seq, h.n_ctx_train);
  backends_[0] = create_backend(BackendKind::Cpu, cfg_.n_threads);
  if (cfg_.device == BackendKind::Cuda) backends_[1] = create_backend(BackendKind::Cuda, cfg_.n_threads);
  // Weights go to the engine's backend once (CUDA: upload; CPU: packed copies), with progress
  // on a terminal.
  uint64_t total = 0;
  for (const graph::WeightTensor& w : model_->weights()) total += w.nbytes;
  ProgressBar bar(cfg_.device == BackendKind::Cuda ? "uploading weights" : "preparing weights", total);
  for (const graph::WeightTensor& w : model_->weights()) {
    bar.set_detail(w.name);
    backend().register_weight(w);
    bar.advance(w.nbytes);
  }
  bar.finish();
  try {
    kv_ = std::make_unique<KvCache>(backend(), h.n_layer, h.kv_dim(), cfg_.n_ctx, cfg_.kv_type);
  } catch (const OutOfMemoryError& e) {
    const double bytes = 2.0 * static_cast<double>(h.n_layer) * static_cast<double>(cfg_.n_ctx) *
                         static_cast<double>(row_bytes(cfg_.kv_type, h.kv_dim()));
    throw OutOfMemoryError(fmt::format("{}: {}; lower -c", kv_need(cfg_.n_ctx, h.n_layer, h.kv_dim(), cfg_.kv_type, bytes), e.what()));
  } catch (const std::bad_alloc&) {
    const double bytes = 2.0 * static_cast<double>(h.n_layer) * static_cast<double>(cfg_.n_ctx) *
                         static_cast<double>(row_bytes(cfg_.kv_type, h.kv_dim()));
    throw OutOfMemoryError(fmt::format("{}: out of memory; lower -c", kv_need(cfg_.n_ctx, h.n_layer, h.kv_dim(), cfg_.kv_type, bytes)));
  }
}

Engine::~Engine() {
  graphs_.clear();  // prepared graphs reference the backends' pools
  kv_.reset();
}

Engine::CachedGraph& Engine::graph_for(const graph::GraphParams& params) {
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if (it->params == params) {
      graphs_.splice(graphs_.begin(), graphs_, it);
      return graphs_.front();
    }
  }
  CachedGraph cg;
  cg.params = params;
  graph::Graph g = build_model_graph(*model_, params, cfg_.n_ctx, &cg.io);
  graph::Backend* bks[2] = {backends_[0].get(), backends_[1].get()};
  graph::PrepareOptions opt;
  opt.preferred = cfg_.device;
  opt.fuse = cfg_.fuse;
  const KvCache* kv = kv_.get();
  graph::KvResolver resolver = [kv](BackendKind, int32_t layer, int32_t which) {
    return kv->region(layer, which);
  };
  cg.prepared = std::make_unique<graph::PreparedGraph>(std::move(g), bks, resolver, opt);
  ++graphs_prepared_;
  if (!dump_path_.empty() && dumps_.size() < kMaxDumpGraphs) {
    const auto tokens = [](int64_t n) { return fmt::format("{} token{}", n, n == 1 ? "" : "s"); };
    std::string label = fmt::format("ubatch of {}, {} with logits, KV window {} cells, {} KV", tokens(params.n_tokens),
                                    params.n_outputs, params.n_kv, type_name(params.kv_type));
    if (params.seq_tokens > 0) label += fmt::format(", at most {} of one sequence", tokens(params.seq_tokens));
    dumps_.push_back(graph::snapshot_graph(*cg.prepared, std::move(label)));
    try {
      graph::write_graph_dump(dumps_, dump_path_);
    } catch (const Error& e) {  // a diagnostic: it never fails the forward
      log_warn("graph dump: {}; no more graph dumps", e.what());
      dump_path_.clear();
    }
  }
  graphs_.push_front(std::move(cg));
  if (graphs_.size() > kMaxCachedGraphs) graphs_.pop_back();
  return graphs_.front();
}

std::vector<float> Engine::forward(const Batch& b) {
  const std::span<const float> v = forward_view(b);
  return std::vector<float>(v.begin(), v.end());
}

float* Engine::logits_memory(size_t floats) {
  const uint64_t bytes = static_cast<uint64_t>(floats) * sizeof(float);
  const bool pinned = logits_pinned_ && bytes <= kMaxPinnedLogitsBytes;
  // The memory there is reused unless it is ordinary memory (from a batch above the cap) and
  // this one may be page-locked.
  if (floats <= logits_floats_ && (logits_in_pinned_ || !pinned)) return static_cast<float*>(logits_.get());
  // Grown by at least half again (a rising series of batches does not reallocate each time),
  // page-locked only up to the cap.
  const uint64_t before = logits_in_pinned_ ? static_cast<uint64_t>(logits_floats_) * sizeof(float) : 0;
  const uint64_t grown = std::max<uint64_t>(bytes, before * 3 / 2);
  const uint64_t want = pinned ? std::min<uint64_t>(grown, kMaxPinnedLogitsBytes) : bytes;
  logits_.reset();
  logits_floats_ = 0;
  logits_in_pinned_ = false;
  if (pinned) {
    try {
      logits_ = backend().alloc_host(want);
      logits_in_pinned_ = true;
    } catch (const OutOfMemoryError& e) {
      log_warn("logits in ordinary memory ({}): each readback takes a host copy", e.what());
      logits_pinned_ = false;
    }
  }
  if (!logits_) logits_ = backend().graph::Backend::alloc_host(want);
  logits_floats_ = static_cast<size_t>(want / sizeof(float));
  return static_cast<float*>(logits_.get());
}

std::span<const float> Engine::forward_view(const Batch& b) {
  const size_t n = b.tokens.size();
  if (b.positions.size() != n || b.seq_ids.size() != n || b.logits.size() != n)
    fail("batch: tokens ({}), positions ({}), seq_ids ({}) and logits flags ({}) differ in length", n,
         b.positions.size(), b.seq_ids.size(), b.logits.size());
  const int64_t n_vocab = model_->hparams().n_vocab;
  for (size_t i = 0; i < n; ++i) {
    if (b.tokens[i] < 0 || b.tokens[i] >= n_vocab)
      fail("token id {} at batch index {} is outside the vocabulary [0, {})", b.tokens[i], i, n_vocab);
    if (b.seq_ids[i] < 0 || b.seq_ids[i] >= KvCache::kMaxSeq)
      fail("sequence id {} at batch index {} is outside [0, {})", b.seq_ids[i], i, KvCache::kMaxSeq);
  }
  // New tokens must come after what each sequence already holds.
  std::vector<std::pair<int32_t, int32_t>> last;  // (seq, highest position seen)
  for (size_t i = 0; i < n; ++i) {
    auto it = std::find_if(last.begin(), last.end(), [&](const auto& p) { return p.first == b.seq_ids[i]; });
    if (it == last.end()) {
      last.emplace_back(b.seq_ids[i], kv_->seq_pos_max(b.seq_ids[i]));
      it = last.end() - 1;
    }
    if (b.positions[i] <= it->second)
      fail("batch index {}: position {} of sequence {} is not after position {} already processed",
           i, b.positions[i], b.seq_ids[i], it->second);
    it->second = b.positions[i];
  }
  const int64_t free_cells = cfg_.n_ctx - kv_->n_used();
  if (static_cast<int64_t>(n) > free_cells)
    fail("{} tokens do not fit in the context: {} of {} cells are in use (raise the context size with -c)",
         n, kv_->n_used(), cfg_.n_ctx);
  size_t n_out = 0;
  for (size_t i = 0; i < n; ++i) n_out += b.logits[i] != 0;
  const auto row = static_cast<size_t>(n_vocab);
  float* logits = n_out > 0 ? logits_memory(n_out * row) : nullptr;
  float* at = logits;
  for (size_t begin = 0; begin < n; begin += static_cast<size_t>(cfg_.n_ubatch)) {
    const size_t end = std::min(n, begin + static_cast<size_t>(cfg_.n_ubatch));
    run_ubatch(b, begin, end, at);
    for (size_t i = begin; i < end; ++i) at += b.logits[i] != 0 ? row : 0;
  }
  // Every returned row is finite, or the caller learns which is not (one read of each row; the
  // sampler or the scorer reads it next, from the cache). Several rows (a server's step: 64 rows
  // of a 152k vocabulary are 39 MB) are read on the CPU backend's threads, idle at this point;
  // the error names the first non-finite row in batch order either way.
  std::vector<int64_t> bad(n_out, -1);
  const auto scan = [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r)
      bad[static_cast<size_t>(r)] = first_non_finite({logits + static_cast<size_t>(r) * row, row});
  };
  if (n_out >= 4)
    static_cast<cpu::CpuBackend&>(*backends_[0]).pool().parallel_for(static_cast<int64_t>(n_out), 1, scan);
  else
    scan(0, static_cast<int64_t>(n_out), 0);
  size_t r = 0;
  for (size_t i = 0; i < n; ++i) {
    if (b.logits[i] == 0) continue;
    if (const int64_t v = bad[r]; v >= 0)
      throw NonFiniteLogitsError(n == 1 ? std::string("decode") : fmt::format("batch of {} tokens", n),
                                 b.positions[i], b.seq_ids[i], v, logits[r * row + static_cast<size_t>(v)]);
    ++r;
  }
  return {logits, n_out * row};
}

void Engine::run_ubatch(const Batch& b, size_t begin, size_t end, float* logits_out) {
  const auto nt = static_cast<int32_t>(end - begin);
  std::span<const int32_t> tokens(b.tokens.data() + begin, end - begin);
  std::span<const int32_t> pos(b.positions.data() + begin, end - begin);
  std::span<const int32_t> seq(b.seq_ids.data() + begin, end - begin);

  uint64_t seq_set = 0;
  for (int32_t s : seq) seq_set |= uint64_t{1} << s;
  if (std::popcount(seq_set) > 1) {
    // The mask input names one sequence per cell: a cell two of this ubatch's sequences share
    // cannot be named for both, so each sequence runs on its own.
    const auto& table = kv_->cells();
    const int64_t extent = kv_->used_extent();
    for (int64_t c = 0; c < extent; ++c)
      if (std::popcount(table[static_cast<size_t>(c)].seqs & seq_set) > 1) {
        run_ubatch_per_sequence(b, begin, end, logits_out);
        return;
      }
  }

  std::vector<int32_t> out_ids;
  for (int32_t i = 0; i < nt; ++i)
    if (b.logits[begin + static_cast<size_t>(i)]) out_ids.push_back(i);
  const bool want_logits = !out_ids.empty();
  if (!want_logits) out_ids.push_back(nt - 1);  // the graph always produces one row

  // Cells first: the attention window must cover the new tokens. If the forward fails, the
  // cells are given back so the cache holds exactly what was processed.
  std::vector<int32_t> cells;
  for (size_t i = 0; i < tokens.size(); ++i) cells.push_back(kv_->allocate(seq[i], pos.subspan(i, 1))[0]);
  try {
    execute_ubatch(tokens, pos, seq, seq_set, cells, out_ids, want_logits, logits_out);
  } catch (...) {
    kv_->release_cells(cells);
    throw;
  }
}

void Engine::execute_ubatch(std::span<const int32_t> tokens, std::span<const int32_t> pos,
                            std::span<const int32_t> seq, uint64_t seq_set, const std::vector<int32_t>& cells,
                            const std::vector<int32_t>& out_ids, bool want_logits, float* logits_out) {
  const auto nt = static_cast<int32_t>(tokens.size());
  const int64_t g = cfg_.kv_window_granule;
  const int64_t n_kv = std::min<int64_t>(cfg_.n_ctx, (kv_->used_extent() + g - 1) / g * g);

  std::vector<int32_t> kv_pos(static_cast<size_t>(n_kv)), kv_seq(static_cast<size_t>(n_kv));
  // Per sequence of the ubatch: the first and one past the last cell it holds in the window.
  std::array<int32_t, KvCache::kMaxSeq> lo, hi;
  lo.fill(static_cast<int32_t>(n_kv));
  hi.fill(0);
  const auto& table = kv_->cells();
  for (int64_t c = 0; c < n_kv; ++c) {
    kv_pos[static_cast<size_t>(c)] = table[static_cast<size_t>(c)].pos;
    // The sequence of this ubatch that sees the cell (at most one: run_ubatch), else the
    // cell's lowest sequence, which no token of the ubatch matches; -1 for an empty cell.
    const uint64_t seqs = table[static_cast<size_t>(c)].seqs;
    const uint64_t mine = seqs & seq_set;
    kv_seq[static_cast<size_t>(c)] = seqs == 0 ? -1 : std::countr_zero(mine != 0 ? mine : seqs);
    if (mine != 0 && kv_pos[static_cast<size_t>(c)] >= 0) {
      const int s = std::countr_zero(mine);
      lo[static_cast<size_t>(s)] = std::min(lo[static_cast<size_t>(s)], static_cast<int32_t>(c));
      hi[static_cast<size_t>(s)] = static_cast<int32_t>(c + 1);
    }
  }
  // The attention hints (graph.h Graph::attn): each token's bounds are its sequence's cells, the
  // widest span rounded up to the granule (so the graph's shape changes only every g cells), and
  // the most tokens of one sequence (a decode step of several sequences has 1).
  std::vector<int32_t> bounds(2 * static_cast<size_t>(nt));
  std::array<int32_t, KvCache::kMaxSeq> per_seq{};
  int64_t widest = 1;
  int32_t seq_tokens = 0;
  for (int32_t i = 0; i < nt; ++i) {
    const auto s = static_cast<size_t>(seq[static_cast<size_t>(i)]);
    const int32_t l = lo[s] < hi[s] ? lo[s] : 0, h = lo[s] < hi[s] ? hi[s] : 0;
    bounds[2 * static_cast<size_t>(i)] = l;
    bounds[2 * static_cast<size_t>(i) + 1] = h;
    widest = std::max<int64_t>(widest, h - l);
    seq_tokens = std::max(seq_tokens, ++per_seq[s]);
  }

  graph::GraphParams params;
  params.n_tokens = nt;
  params.n_outputs = static_cast<int32_t>(out_ids.size());
  params.n_kv = n_kv;
  params.kv_type = cfg_.kv_type;
  params.seq_tokens = seq_tokens;
  params.seq_window = std::min(n_kv, (widest + g - 1) / g * g);
  CachedGraph& cg = graph_for(params);
  graph::PreparedGraph& pg = *cg.prepared;
  const auto bytes = [](const auto& v) { return static_cast<uint64_t>(v.size() * sizeof(v[0])); };
  pg.set_input(cg.io.tokens, tokens.data(), tokens.size() * 4);
  pg.set_input(cg.io.positions, pos.data(), pos.size() * 4);
  pg.set_input(cg.io.seq_ids, seq.data(), seq.size() * 4);
  pg.set_input(cg.io.kv_cells, cells.data(), bytes(cells));
  pg.set_input(cg.io.kv_pos, kv_pos.data(), bytes(kv_pos));
  pg.set_input(cg.io.kv_seq, kv_seq.data(), bytes(kv_seq));
  pg.set_input(cg.io.kv_bounds, bounds.data(), bytes(bounds));
  if (cg.io.out_ids != graph::kNoNode) pg.set_input(cg.io.out_ids, out_ids.data(), bytes(out_ids));
  if (!want_logits) {
    pg.execute();
    return;
  }
  // The logits are read back behind the graph's work, with the same wait.
  const size_t n_vocab = static_cast<size_t>(model_->hparams().n_vocab);
  const graph::OutputRead read{cg.io.logits, logits_out, n_vocab * out_ids.size() * sizeof(float)};
  pg.execute(std::span<const graph::OutputRead>(&read, 1));
}

std::vector<float> Engine::decode(std::span<const int32_t> tokens, bool all_logits) {
  return forward(Batch::sequence(tokens, n_past(0), 0, all_logits));
}

std::span<const float> Engine::decode_view(std::span<const int32_t> tokens, bool all_logits) {
  return forward_view(Batch::sequence(tokens, n_past(0), 0, all_logits));
}

void Engine::truncate(int32_t n_keep, int32_t seq) { kv_->remove(seq, n_keep, -1); }

void Engine::run_ubatch_per_sequence(const Batch& b, size_t begin, size_t end, float* logits_out) {
  const auto row = static_cast<size_t>(model_->hparams().n_vocab);
  std::vector<int32_t> order;  // sequences in order of first appearance
  for (size_t i = begin; i < end; ++i)
    if (std::find(order.begin(), order.end(), b.seq_ids[i]) == order.end()) order.push_back(b.seq_ids[i]);
  std::vector<float> tmp;
  for (int32_t s : order) {
    Batch sub;
    std::vector<size_t> out_rows;  // where each of sub's logits rows goes in logits_out
    size_t out_row = 0;
    for (size_t i = begin; i < end; ++i) {
      if (b.seq_ids[i] == s) {
        sub.tokens.push_back(b.tokens[i]);
        sub.positions.push_back(b.positions[i]);
        sub.seq_ids.push_back(s);
        sub.logits.push_back(b.logits[i]);
        if (b.logits[i]) out_rows.push_back(out_row);
      }
      if (b.logits[i]) ++out_row;
    }
    tmp.resize(out_rows.size() * row);
    run_ubatch(sub, 0, sub.tokens.size(), tmp.data());
    for (size_t k = 0; k < out_rows.size(); ++k)
      std::memcpy(logits_out + out_rows[k] * row, tmp.data() + k * row, row * sizeof(float));
  }
}

void Engine::seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
  const std::vector<KvCache::Cell> before = kv_->cells();
  const std::vector<int32_t> moved = kv_->seq_add(seq, p0, p1, delta);
  if (moved.empty()) return;
  try {
    // K rows of the moved cells: rotated by delta on top of their old rotation, in place.
    // Rope(delta) after Rope(p) is Rope(p + delta) in real arithmetic (rotations compose).
    const HParams& h = model_->hparams();
    const auto n = static_cast<int64_t>(moved.size());
    const int64_t n_kv = kv_->used_extent();
    graph::Graph g;
    const graph::NodeId ids = g.input(graph::InputKind::Other, TensorType::I32, {n, 1, 1, 1}, "shift_cells");
    const graph::NodeId dpos = g.input(graph::InputKind::Other, TensorType::I32, {n, 1, 1, 1}, "shift_delta");
    for (int64_t l = 0; l < h.n_layer; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".shift_k";
      const graph::NodeId region = g.kv_region(static_cast<int32_t>(l), 0, cfg_.kv_type, h.kv_dim(), cfg_.n_ctx);
      const graph::NodeId all = g.kv_load(region, n_kv, p + ".load");             // f32 [kv_dim, n_kv]
      const graph::NodeId rows = g.get_rows(all, ids, p + ".rows");               // f32 [kv_dim, n]
      const graph::NodeId rot = g.rope(rows, dpos, static_cast<int32_t>(h.head_dim), static_cast<int32_t>(h.n_rot),
                                       h.rope_theta, p + ".rope");
      g.kv_store(rot, region, ids, p + ".store");
    }
    graph::Backend* bks[2] = {backends_[0].get(), backends_[1].get()};
    graph::PrepareOptions opt;
    opt.preferred = cfg_.device;
    opt.fuse = false;
    const KvCache* kv = kv_.get();
    graph::KvResolver resolver = [kv](BackendKind, int32_t layer, int32_t which) { return kv->region(layer, which); };
    graph::PreparedGraph pg(std::move(g), bks, resolver, opt);
    const std::vector<int32_t> deltas(moved.size(), delta);
    pg.set_input(ids, moved.data(), moved.size() * 4);
    pg.set_input(dpos, deltas.data(), deltas.size() * 4);
    pg.execute();
  } catch (...) {
    for (size_t c = 0; c < before.size(); ++c) kv_->set_cell(static_cast<int32_t>(c), before[c]);
    throw;
  }
}

namespace {
/// XXH64_update kept out of line: inlined into a caller that passes small fixed-size values,
/// GCC 12 warns (-Warray-bounds) about the update's branch for inputs it can never get.
[[gnu::noinline]] void hash_update(XXH64_state_t* st, const void* p, size_t n) { XXH64_update(st, p, n); }
}  // namespace

const kv::ModelFingerprint& Engine::fingerprint() const {
  if (fingerprint_) return *fingerprint_;
  const HParams& h = model_->hparams();
  // One XXH64 over everything fed, in order (the hash of the concatenation: the same value as
  // hashing one buffer of it), through a 64 KiB block so that the many short strings of a large
  // vocabulary are not each an update call.
  XXH64_state_t st;
  XXH64_reset(&st, 0);
  std::vector<uint8_t> block(size_t{64} << 10);
  size_t fill = 0;
  const auto feed = [&](const void* p, size_t n) {
    if (fill + n > block.size()) {
      hash_update(&st, block.data(), fill);
      fill = 0;
      if (n >= block.size()) {
        hash_update(&st, p, n);
        return;
      }
    }
    if (n) std::memcpy(block.data() + fill, p, n);
    fill += n;
  };
  const auto feed_str = [&](std::string_view sv) {
    const uint64_t len = sv.size();
    feed(&len, 8);
    feed(sv.data(), sv.size());
  };
  feed_str("minfer model fingerprint 1");
  feed_str(h.arch_name);
  const int64_t nums[] = {h.n_vocab, h.n_embd, h.n_layer, h.n_head, h.n_head_kv, h.head_dim, h.n_ff, h.n_rot,
                          h.has_qkv_bias, h.has_qk_norm, h.tied_output};
  feed(nums, sizeof nums);
  feed(&h.rope_theta, 4);
  feed(&h.rms_eps, 4);
  // Tensors: name, type, shape, and the first 4 KiB of the data (tells two trainings of one
  // shape apart without reading gigabytes).
  for (const graph::WeightTensor& w : model_->weights()) {
    feed_str(w.name);
    const auto t = static_cast<uint32_t>(w.type);
    feed(&t, 4);
    feed(w.ne.data(), sizeof(w.ne));
    feed(w.data, static_cast<size_t>(std::min<uint64_t>(w.nbytes, 4096)));
  }
  // The tokenizer as the GGUF file defines it.
  const gguf::GgufFile& f = model_->file();
  for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.pre"}) feed_str(f.get_string(key).value_or(""));
  for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"}) {
    const auto arr = f.get_string_array(key);
    const uint64_t count = arr ? arr->size() : 0;
    feed(&count, 8);
    if (arr)
      for (std::string_view sv : *arr) feed_str(sv);
  }
  if (const auto types = f.get_i32_array("tokenizer.ggml.token_type")) feed(types->data(), types->size() * 4);
  auto fp = std::make_unique<kv::ModelFingerprint>();
  hash_update(&st, block.data(), fill);
  fp->hash = XXH64_digest(&st);
  fp->arch = h.arch_name;
  fp->name = h.name;
  fp->n_layer = static_cast<uint32_t>(h.n_layer);
  fp->kv_dim = static_cast<uint32_t>(h.kv_dim());
  fp->n_vocab = static_cast<uint32_t>(h.n_vocab);
  fingerprint_ = std::move(fp);
  return *fingerprint_;
}

kv::SessionSequence Engine::session_sequence(int32_t seq, std::span<const int32_t> tokens,
                                             std::vector<int32_t>* cells) const {
  if (seq < 0 || seq >= KvCache::kMaxSeq) fail("save: sequence id {} is outside [0, {})", seq, KvCache::kMaxSeq);
  *cells = kv_->seq_cells(seq);
  if (tokens.size() != cells->size())
    fail("save: sequence {} holds {} cells but {} tokens were given for them", seq, cells->size(), tokens.size());
  kv::SessionSequence sq;
  sq.seq = seq;
  sq.tokens.assign(tokens.begin(), tokens.end());
  for (int32_t c : *cells) sq.positions.push_back(kv_->cells()[static_cast<size_t>(c)].pos);
  return sq;
}

void Engine::read_layer_rows(int64_t layer, std::span<const int32_t> cells, uint8_t* dst) const {
  kv_->read_rows(layer, 0, cells, dst);
  kv_->read_rows(layer, 1, cells, dst + cells.size() * kv_->row_bytes());
}

std::vector<uint8_t> Engine::save_sequence(int32_t seq, std::span<const int32_t> tokens) {
  std::vector<int32_t> cells;
  const kv::SessionSequence sq = session_sequence(seq, tokens, &cells);
  std::vector<uint8_t> out = kv::encode_session_head(fingerprint(), cfg_.kv_type, std::span(&sq, 1));
  // Each layer's rows are read from the backend straight into their place in the output.
  const uint64_t layer_bytes = 2 * cells.size() * kv_->row_bytes();
  out.reserve(out.size() + static_cast<size_t>(kv_->n_layer()) * (sizeof(kv::RowsFrame) + layer_bytes));
  for (int64_t l = 0; l < kv_->n_layer(); ++l) {
    const size_t at = out.size() + sizeof(kv::RowsFrame::before);
    out.resize(at + layer_bytes + sizeof(kv::RowsFrame::after));
    read_layer_rows(l, cells, out.data() + at);
    const kv::RowsFrame f = kv::rows_section_frame(static_cast<uint32_t>(l), std::span(out.data() + at, layer_bytes));
    std::memcpy(out.data() + at - f.before.size(), f.before.data(), f.before.size());
    std::memcpy(out.data() + at + layer_bytes, f.after.data(), f.after.size());
  }
  return out;
}

void Engine::save_sequence_file(const std::string& path, int32_t seq, std::span<const int32_t> tokens) {
  std::vector<int32_t> cells;
  const kv::SessionSequence sq = session_sequence(seq, tokens, &cells);
  AtomicFile f(path);
  const std::vector<uint8_t> head = kv::encode_session_head(fingerprint(), cfg_.kv_type, std::span(&sq, 1));
  f.write(head.data(), head.size());
  // A pipeline of two buffers: while one layer's rows are checksummed and written (and the
  // kernel is asked to start writing them to the disk), the next layer's are read from the
  // backend into the other buffer. Only two layers' rows are ever in host memory.
  const uint64_t layer_bytes = 2 * cells.size() * kv_->row_bytes();
  std::vector<uint8_t> buf[2];
  const auto write_layer = [&f, &buf, layer_bytes](int64_t l) {
    const std::vector<uint8_t>& b = buf[l % 2];
    const kv::RowsFrame fr = kv::rows_section_frame(static_cast<uint32_t>(l), std::span(b.data(), layer_bytes));
    f.write(fr.before.data(), fr.before.size());
    f.write(b.data(), layer_bytes);
    f.write(fr.after.data(), fr.after.size());
    f.start_writeback();
  };
  std::future<void> writing;  // declared after `f`: joined before the file is closed or removed
  for (int64_t l = 0; l < kv_->n_layer(); ++l) {
    std::vector<uint8_t>& b = buf[l % 2];
    b.resize(layer_bytes);
    read_layer_rows(l, cells, b.data());
    if (writing.valid()) writing.get();  // layer l - 1 is written (its error, if any, thrown here)
    writing = std::async(std::launch::async, write_layer, l);
  }
  if (writing.valid()) writing.get();
  f.commit();
}

Engine::Restored Engine::restore_sequence(std::span<const uint8_t> bytes, std::string_view name, int32_t dst_seq,
                                          bool positions_from_0) {
  if (dst_seq < 0 || dst_seq >= KvCache::kMaxSeq)
    fail("{}: cannot restore into sequence id {} (outside [0, {}))", name, dst_seq, KvCache::kMaxSeq);
  kv::SessionLimits lim;
  lim.n_ctx = cfg_.n_ctx;
  lim.n_vocab = model_->hparams().n_vocab;
  lim.max_seq = KvCache::kMaxSeq;
  kv::SessionView d = kv::decode_session_view(bytes, name, fingerprint(), lim);
  if (d.seqs.size() != 1) fail("{}: holds {} sequences; a sequence restore takes exactly one", name, d.seqs.size());
  kv::SessionSequence& sq = d.seqs[0];
  const int64_t n = static_cast<int64_t>(sq.positions.size());
  if (positions_from_0)
    for (int64_t i = 0; i < n; ++i)
      if (sq.positions[static_cast<size_t>(i)] != i)
        fail("{}: cell {} holds position {}; a conversation's positions must be 0, 1, 2, ...", name, i,
             sq.positions[static_cast<size_t>(i)]);
  // Cells that only dst_seq sees become free when it is replaced.
  int64_t freed = 0;
  for (const KvCache::Cell& c : kv_->cells()) freed += c.seqs == (uint64_t{1} << dst_seq);
  const int64_t free_cells = cfg_.n_ctx - kv_->n_used() + freed;
  if (n > free_cells)
    fail("{}: its {} cells do not fit: {} of the context's {} cells are free for sequence {}", name, n, free_cells,
         cfg_.n_ctx, dst_seq);
  const uint64_t rb = kv_->row_bytes();
  // Rows of another KV type are converted into host memory; rows of this one are copied to the
  // backend straight from `bytes`.
  std::vector<std::vector<uint8_t>> converted;
  if (d.kv_type != cfg_.kv_type) {
    converted.reserve(d.rows.size());
    for (auto& r : d.rows) {
      converted.push_back(kv::convert_kv_rows(r, d.kv_type, cfg_.kv_type, kv_->kv_dim()));
      r = converted.back();
    }
  }
  // Commit: nothing above touched the cache.
  const std::vector<KvCache::Cell> before = kv_->cells();
  try {
    kv_->remove(dst_seq, 0, -1);
    const std::vector<int32_t> cells = kv_->allocate(dst_seq, sq.positions);
    for (int64_t l = 0; l < kv_->n_layer(); ++l) {
      const uint8_t* r = d.rows[static_cast<size_t>(l)].data();
      kv_->write_rows(l, 0, cells, r);
      kv_->write_rows(l, 1, cells, r + static_cast<uint64_t>(n) * rb);
    }
    backend().synchronize();
  } catch (...) {
    for (size_t c = 0; c < before.size(); ++c) kv_->set_cell(static_cast<int32_t>(c), before[c]);
    throw;
  }
  return Restored{std::move(sq.tokens), std::move(sq.positions)};
}

Engine::Restored Engine::restore_sequence_file(const std::string& path, int32_t dst_seq, bool positions_from_0) {
  // The largest session this engine could hold (f32 rows: conversion on load is allowed).
  const uint64_t limit = kv::max_session_bytes(kv_->n_layer(), row_bytes(TensorType::F32, kv_->kv_dim()), cfg_.n_ctx,
                                               KvCache::kMaxSeq);
  // Read through a read-only map: the rows go from the page cache to the backend without a copy
  // in between. MappedFile refuses what is not a regular file (a FIFO without waiting), and a
  // file truncated by another program while it is read ends the process with one line naming
  // it, as a model file does (docs/adr/0005-model-files-must-not-change-while-mapped.md).
  const MappedFile file(path);
  if (file.size() > limit)
    fail("{}: {} bytes, more than any session of this model and context size can be ({})", path, file.size(), limit);
  return restore_sequence(std::span<const uint8_t>(file.data(), file.size()), path, dst_seq, positions_from_0);
}

void Engine::reset() { kv_->clear(); }

}  // namespace minfer
