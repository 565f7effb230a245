// The Backend interface: what a PreparedGraph needs from a device. The CPU backend (src/cpu) and
// the CUDA backend (src/cuda) implement it. One instance belongs to one engine: its pool,
// stream, captured graphs and scratch are never shared with another engine.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "graph/graph.h"

namespace minfer::graph {

/// Where one node's output lives on the graph's backend.
struct TensorRef {
  void* data = nullptr;    ///< host pointer (CPU) or device pointer (CUDA)
  uint64_t nbytes = 0;
  int32_t buffer = -1;     ///< pool buffer id, -1 for weights / aliases of non-pool memory
  uint64_t offset = 0;     ///< byte offset into `buffer`
};

/// Per prepared graph: where each node's output lives, indexed by NodeId (a graph runs on one
/// backend, so one place per node; dead nodes keep an empty ref).
struct ExecPlan {
  std::vector<TensorRef> refs;

  const TensorRef& home(const Graph& /*g*/, NodeId id) const { return refs[static_cast<size_t>(id)]; }
  /// Source `i` of `n`.
  const TensorRef& src(const Graph& /*g*/, const Node& n, int i) const {
    return refs[static_cast<size_t>(n.src[static_cast<size_t>(i)])];
  }
  void* src_data(const Graph& g, const Node& n, int i) const { return src(g, n, i).data; }
  void* out_data(const Graph& g, NodeId id) const { return home(g, id).data; }
};

/// Frees a HostBuffer's memory with the function of the backend that allocated it.
struct HostBufferFree {
  void (*fn)(void*) = nullptr;
  void operator()(void* p) const {
    if (p != nullptr && fn != nullptr) fn(p);
  }
};
/// Host memory from Backend::alloc_host, freed when the owner lets go of it.
using HostBuffer = std::unique_ptr<void, HostBufferFree>;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendKind kind() const = 0;
  /// e.g. "cpu (2 threads, avx512)" or "cuda: NVIDIA H200 (sm_90)".
  virtual std::string describe() const = 0;

  /// Empty when this backend can execute `n` (op, types, shapes); otherwise the reason, which
  /// PreparedGraph puts into its error ("node blk.3.ffn_down (MatMul): q2_K has no kernel").
  virtual std::string unsupported_reason(const Graph& g, const Node& n) const = 0;
  /// Whether the FusionPass may create this fused op for this backend.
  virtual bool supports_fused(Op op) const = 0;

  // ---- pool: exact byte-length reuse; memory returns to the system only on destruction ----
  /// Throws OutOfMemoryError naming the size when the allocation fails.
  virtual int32_t alloc_buffer(uint64_t bytes) = 0;
  virtual void release_buffer(int32_t id) = 0;
  virtual void* buffer_ptr(int32_t id) const = 0;
  /// Bumped whenever the pool obtains new memory (captured device graphs key on it).
  virtual uint64_t pool_generation() const = 0;

  /// Makes a model weight available to this backend (a device uploads it once; the CPU uses
  /// the mapped bytes and does nothing). Throws minfer::Error naming the tensor when the
  /// backend has no kernel for its type, OutOfMemoryError when it does not fit.
  virtual void register_weight(const WeightTensor& w) { (void)w; }

  /// The data of a weight on this backend. CPU: the mapped file bytes. CUDA: the registered
  /// device copy (throws minfer::Error naming the tensor when it was never registered).
  virtual const void* weight_data(const WeightTensor& w) = 0;

  // ---- transfers, ordered with this backend's execution ----
  /// Host -> backend memory. The source may be reused as soon as the call returns.
  virtual void upload(void* dst, const void* src, uint64_t bytes) = 0;
  /// Backend memory -> host; complete when the call returns.
  virtual void download(void* dst, const void* src, uint64_t bytes) = 0;
  /// Backend memory -> host, queued after the work queued so far on this backend: the bytes are
  /// in `dst` ([dst, dst + bytes): one allocation of the caller's) when the next synchronize()
  /// returns normally, or earlier; `dst` must stay valid until then. When synchronize throws,
  /// `dst`'s contents are unspecified but nothing is written into it after synchronize returned
  /// or threw. Throws what download throws (a latched error, a failed copy). The default
  /// downloads at once.
  virtual void download_at_sync(void* dst, const void* src, uint64_t bytes) { download(dst, src, bytes); }
  /// `bytes` of host memory that readbacks of this backend fill fastest (CUDA: page-locked, so a
  /// download_at_sync into it is one DMA with no host copy; CPU: ordinary memory, 64-byte
  /// aligned). Throws OutOfMemoryError naming the size when it cannot be had.
  virtual HostBuffer alloc_host(uint64_t bytes);
  /// Most tokens of one sequence a forward may hold while each token's results stay bitwise
  /// those of one-token forwards (the kernels' column-independent decode paths). CPU: no limit
  /// (every kernel computes each token alone). Speculative verification cuts its forwards to
  /// this size so that greedy output is the target's own, token for token.
  virtual int64_t exact_step_tokens() const { return std::numeric_limits<int64_t>::max(); }
  /// Backend memory -> backend memory, non-overlapping.
  virtual void copy(void* dst, const void* src, uint64_t bytes) = 0;
  /// Moves rows [src, src + count) of a region of `row_bytes`-byte rows starting at `base` to
  /// [dst, dst + count). The ranges may overlap: rows are moved in the safe order (ascending
  /// when dst < src, descending when dst > src), so the result equals a copy through a
  /// temporary. Used by KV compaction.
  virtual void move_rows(void* base, uint64_t row_bytes, int64_t src, int64_t dst, int64_t count) = 0;

  /// Executes nodes [begin, end) of `g` (all assigned to this backend) with `plan`. May return
  /// before a device finishes; synchronize() waits and reports device errors.
  virtual void execute(const Graph& g, const ExecPlan& plan, size_t begin, size_t end) = 0;
  virtual void synchronize() = 0;
};

}  // namespace minfer::graph
