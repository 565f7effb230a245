// Engine: one model instance with its own backends, KV cache and prepared graphs. It runs
// batches of tokens (prefill and decode are the same call with different sizes), splitting them
// into ubatches, and returns logits. Two engines in one process share nothing mutable.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/backend.h"
#include "graph/dump.h"
#include "graph/prepared_graph.h"
#include "kv/kv_cache.h"
#include "kv/session_file.h"
#include "models/model.h"
#include "models/qwen_graph.h"

namespace minfer {

/// Most tokens per forward graph when EngineConfig::n_ubatch is 0: 512 on the CPU (llama.cpp's
/// default), 2048 on CUDA, where prefill GEMMs of 2048 tokens keep the tensor cores busy
/// (Qwen2.5-7B Q4_K_M pp2048 on an H200: 21.4k t/s at 2048 against 15.9k at 512;
/// docs/perf/2026-12-01-wgmma-prefill.md).
inline constexpr int32_t kDefaultUbatchCpu = 512;
inline constexpr int32_t kDefaultUbatchCuda = 2048;

/// kDefaultUbatchCpu or kDefaultUbatchCuda for `device`.
int32_t default_ubatch(graph::BackendKind device);

struct EngineConfig {
  graph::BackendKind device = graph::BackendKind::Cpu;
  int n_threads = 0;            ///< CPU threads (0 = default_thread_count())
  int64_t n_ctx = 0;            ///< KV cells (0 = min(training context, 4096))
  int32_t n_ubatch = 0;         ///< most tokens per forward graph (0: default_ubatch(device))
  TensorType kv_type = TensorType::F32;
  bool fuse = true;             ///< run the FusionPass
  int64_t kv_window_granule = 256;  ///< attention windows are multiples of this (cells)
  /// Most cells one sequence will hold (0: n_ctx). The training-context warning compares this,
  /// not n_ctx, when the cells are shared by several sequences (bench -npl).
  int64_t n_seq_ctx = 0;
  /// A file (.dot or .json, graph/dump.h) that receives the prepared graphs, rewritten each time
  /// a graph of a new ubatch shape is prepared, up to Engine::kMaxDumpGraphs of them. Empty:
  /// MINFER_GRAPH_DUMP, else no dump. Another extension is refused by the constructor.
  std::string graph_dump;
};

/// Tokens to process in one call. Each token has a position and a sequence; `logits[i]` != 0
/// asks for the logits of token i.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> seq_ids;
  std::vector<uint8_t> logits;

  /// `tokens` of sequence `seq` at positions start, start+1, ...; logits for the last token
  /// only, or for all when `all_logits`.
  static Batch sequence(std::span<const int32_t> tokens, int32_t start, int32_t seq, bool all_logits);
};

/// Index of the first NaN or infinity in `values`, or -1 when all are finite. One vectorized
/// pass that tests the IEEE 754 binary32 exponent bits (all ones: Inf or NaN), so it costs
/// about a read of the row; a second pass finds the index only when there is one.
int64_t first_non_finite(std::span<const float> values);

/// Thrown by Engine::forward / forward_view when a returned logits row holds a NaN or an
/// infinity (broken weights, or activations that overflowed): sampling or scoring such a row
/// would give garbage. The message is one line: "<step> (position P): logits contain NaN
/// (first at vocab id V); the model's weights or activations are not finite". The tokens of
/// the batch stay in the KV cache.
class NonFiniteLogitsError : public Error {
 public:
  NonFiniteLogitsError(std::string step, int32_t position, int32_t seq, int64_t vocab_id, float value);
  /// The same error with `step` naming the caller's step (e.g. "decode step 3").
  NonFiniteLogitsError with_step(std::string step) const {
    return NonFiniteLogitsError(std::move(step), position, seq, vocab_id, value);
  }
  int32_t position;  ///< position of the token whose logits these are
  int32_t seq;       ///< its sequence
  int64_t vocab_id;  ///< first non-finite entry of the row
  float value;       ///< its value (NaN, +Inf or -Inf)
};

/// Parses "cpu" / "cuda" in any case ("gpu", and llama.cpp's "CUDA0" and "none" too). Throws
/// minfer::Error naming the value.
graph::BackendKind parse_device(std::string_view name);

class Engine {
 public:
  /// Creates backends (the CUDA backend registers every weight), the KV cache (OutOfMemoryError
  /// when it does not fit) and nothing else; graphs are prepared on first use.
  Engine(std::shared_ptr<const Model> model, const EngineConfig& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Runs the batch. Returns the logits of the flagged tokens, n_vocab floats each, in batch
  /// order (a copy of forward_view's, which it invalidates). Throws minfer::Error for an
  /// out-of-vocabulary token, a full context, ...; OutOfMemoryError when memory for the logits
  /// cannot be had; NonFiniteLogitsError when a returned row holds a NaN or an infinity (every
  /// returned row is checked: one pass over it).
  std::vector<float> forward(const Batch& batch);
  /// forward() without the copy: the logits (same layout) in engine-owned host memory that the
  /// device reads back into directly: page-locked on CUDA up to kMaxPinnedLogitsBytes (and while
  /// the driver grants it), ordinary memory above. The view is valid until the next forward,
  /// forward_view, decode or decode_view call of this engine, or its destruction. Same errors as
  /// forward(). An empty view when no token is flagged.
  std::span<const float> forward_view(const Batch& batch);
  /// Most bytes of page-locked logits memory an engine holds (256 MiB: 441 rows of the Qwen2.5
  /// vocabulary's 151,936 floats); larger all-logits batches (perplexity at a long context) read
  /// back into ordinary memory, so no gigabyte stays pinned for the engine's life.
  static constexpr uint64_t kMaxPinnedLogitsBytes = uint64_t{256} << 20;

  /// Sequence 0 convenience: appends `tokens` after the tokens already in the cache and returns
  /// the logits of the last one (or of all of them).
  std::vector<float> decode(std::span<const int32_t> tokens, bool all_logits = false);
  /// decode() without the copy (a view as forward_view returns).
  std::span<const float> decode_view(std::span<const int32_t> tokens, bool all_logits = false);

  /// Most tokens of one sequence a forward on this engine's device may hold with each token's
  /// logits bitwise those of one-token forwards (graph::Backend::exact_step_tokens).
  int64_t exact_step_tokens() { return backend().exact_step_tokens(); }

  // ---- sequence operations (llama.cpp's names; the server's slots are sequence ids) ----
  /// [seq_rm] Forgets the positions [p0, p1) of `seq` (p1 < 0: to the end; seq -1: every
  /// sequence). Throws minfer::Error for a sequence id outside [-1, KvCache::kMaxSeq).
  void seq_rm(int32_t seq, int32_t p0, int32_t p1) { kv_->remove(seq, p0, p1); }
  /// [seq_cp] Sequence `dst` sees the cells of `src` in [p0, p1) too (shared rows, no copy);
  /// what `dst` held in that range is dropped. A ubatch with tokens of two sequences that share
  /// a cell runs as one ubatch per sequence (the mask input names one sequence per cell).
  void seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) { kv_->seq_cp(src, dst, p0, p1); }
  /// [seq_keep] Drops every sequence but `seq`.
  void seq_keep(int32_t seq) { kv_->seq_keep(seq); }
  /// [seq_add] Adds `delta` to the positions [p0, p1) of `seq` (p1 < 0: to the end) and
  /// re-rotates their K rows by RoPE with angle delta * theta_i, on the backend that holds the
  /// cache (one small graph: KvcacheLoad -> GetRows -> Rope -> KvcacheStore per layer; f16 and
  /// q8_0 rows are dequantized, rotated and requantized). Cells moved below position 0 are
  /// dropped. Rotation composes exactly only in real arithmetic: the rows then differ from a
  /// fresh prefill at the new positions by the rounding bound of docs/session-format.md
  /// ("Shifted positions"), tested in test_kv_sequences.cpp. Throws minfer::Error when a moved
  /// cell is shared with another sequence.
  void seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta);

  // ---- sessions: a sequence's KV state as bytes (docs/session-format.md) ----
  /// Encodes sequence `seq`: its cells' positions, `tokens` (the token of each of its cells in
  /// position order: tokens.size() must equal its cell count, else minfer::Error), the model's
  /// fingerprint and the K/V rows of those cells only (downloaded from the backend).
  std::vector<uint8_t> save_sequence(int32_t seq, std::span<const int32_t> tokens);
  /// save_sequence() written to `path` through a temporary file in the same folder renamed over
  /// it (core/atomic_file.h): a failed write (full disk, file-size limit) throws minfer::Error
  /// naming the file and leaves whatever was at `path` as it was. The same bytes as
  /// save_sequence(), streamed: one layer's rows are read from the backend while the previous
  /// layer's are written, so host memory holds two layers' rows, not the whole session.
  void save_sequence_file(const std::string& path, int32_t seq, std::span<const int32_t> tokens);
  /// What a restore put into the cache.
  struct Restored {
    std::vector<int32_t> tokens;     ///< in position order
    std::vector<int32_t> positions;  ///< strictly increasing
  };
  /// Replaces sequence `dst_seq` with the one sequence in `bytes` (a session file's contents;
  /// `name` names it in errors). Everything is checked first (kv::decode_session_view:
  /// magic, version, checksums, model fingerprint, KV type, geometry, vocabulary, cell counts)
  /// and the rows converted to this engine's KV type (f32 / f16 / q8_0); only then is the cache
  /// touched. A refused session throws minfer::Error "<name>: <reason>" and leaves the cache
  /// exactly as it was, also when the cells do not fit beside the other sequences.
  /// `positions_from_0`: also refuse a sequence whose positions are not 0, 1, ..., n-1 (what a
  /// token list in step with the cache needs, generate.h's Session).
  Restored restore_sequence(std::span<const uint8_t> bytes, std::string_view name, int32_t dst_seq,
                            bool positions_from_0 = false);
  /// restore_sequence() of a file, read through a read-only memory map (the rows go from the
  /// page cache to the backend); a file larger than the largest session this engine could hold
  /// is refused before it is read.
  Restored restore_sequence_file(const std::string& path, int32_t dst_seq, bool positions_from_0 = false);
  /// The fingerprint a session file must carry to restore here (computed once).
  const kv::ModelFingerprint& fingerprint() const;

  /// Tokens of sequence 0 in the cache (its next position).
  int32_t n_past(int32_t seq = 0) const { return kv_->seq_pos_max(seq) + 1; }
  /// Forgets positions >= n_keep of `seq` (n_keep = 0 clears the sequence).
  void truncate(int32_t n_keep, int32_t seq = 0);
  void reset();

  const Model& model() const { return *model_; }
  const EngineConfig& config() const { return cfg_; }
  KvCache& kv() { return *kv_; }
  graph::Backend& backend() { return *backends_[static_cast<size_t>(cfg_.device)]; }
  int64_t n_ctx() const { return cfg_.n_ctx; }
  int64_t n_vocab() const { return model_->hparams().n_vocab; }

  /// Number of graphs prepared so far (cache misses), for tests and diagnostics.
  int64_t graphs_prepared() const { return graphs_prepared_; }

  /// Most prepared graphs a graph dump holds (EngineConfig::graph_dump): the first shapes seen.
  static constexpr size_t kMaxDumpGraphs = 8;

 private:
  /// Sequence `seq`'s session entry (positions, `tokens`) and its cells in position order
  /// (`*cells`). Throws minfer::Error on a bad id or a token count other than the cell count.
  kv::SessionSequence session_sequence(int32_t seq, std::span<const int32_t> tokens, std::vector<int32_t>* cells) const;
  /// Layer `layer`'s K rows of `cells`, then their V rows, into `dst` (2 x cells x row bytes):
  /// the payload of a session's rows section.
  void read_layer_rows(int64_t layer, std::span<const int32_t> cells, uint8_t* dst) const;

  struct CachedGraph {
    graph::GraphParams params;
    std::unique_ptr<graph::PreparedGraph> prepared;
    ModelGraphIO io;
  };
  CachedGraph& graph_for(const graph::GraphParams& params);
  /// Runs tokens [begin, end) of `b`; their flagged rows' logits go to `logits_out` (n_vocab
  /// floats each, room for all of them).
  void run_ubatch(const Batch& b, size_t begin, size_t end, float* logits_out);
  /// run_ubatch for a ubatch with tokens of two sequences that share a cell: one per sequence.
  void run_ubatch_per_sequence(const Batch& b, size_t begin, size_t end, float* logits_out);
  void execute_ubatch(std::span<const int32_t> tokens, std::span<const int32_t> pos,
                      std::span<const int32_t> seq, uint64_t seq_set, const std::vector<int32_t>& cells,
                      const std::vector<int32_t>& out_ids, bool want_logits, float* logits_out);
  /// Engine-owned logits memory of at least `floats` floats (grown, never shrunk).
  float* logits_memory(size_t floats);

  std::shared_ptr<const Model> model_;
  EngineConfig cfg_;
  // Declared before the backends, so it is freed after them: a backend's destructor waits for
  // its queued work, which may still be reading back into this memory.
  graph::HostBuffer logits_;  ///< forward_view's logits (the backend's alloc_host memory)
  size_t logits_floats_ = 0;
  bool logits_pinned_ = true;      ///< false once alloc_host refused (then ordinary memory)
  bool logits_in_pinned_ = false;  ///< logits_ came from the backend's alloc_host
  std::unique_ptr<graph::Backend> backends_[2];
  std::unique_ptr<KvCache> kv_;
  std::list<CachedGraph> graphs_;  ///< most recently used first
  mutable std::unique_ptr<kv::ModelFingerprint> fingerprint_;
  int64_t graphs_prepared_ = 0;
  std::string dump_path_;                 ///< graph dump file (EngineConfig::graph_dump), or empty
  std::vector<graph::GraphDump> dumps_;  ///< what the dump file holds
};

/// Creates the backend of `kind` (threads for the CPU). Throws minfer::Error when CUDA was not
/// built in, no device is present, or MINFER_DISABLE_CUDA=1.
std::unique_ptr<graph::Backend> create_backend(graph::BackendKind kind, int n_threads);

}  // namespace minfer
