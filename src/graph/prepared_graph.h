// PreparedGraph: the pipeline after building: assign (a backend per node, decided now, an error when the
// backend cannot run a node: no fallback), fuse, allocate (liveness-based buffers from each
// backend's pool; KV regions resolved to their persistent buffers), split (contiguous runs of
// one backend, with copies of the tensors that cross a split boundary), then execute.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "graph/backend.h"
#include "graph/fusion.h"
#include "graph/graph.h"

namespace minfer::graph {

/// A tensor read across a split boundary: copied from its home to its mirror before the split.
struct CrossCopy {
  NodeId node = kNoNode;
  BackendKind from = BackendKind::Cpu;
  BackendKind to = BackendKind::Cpu;
};

struct Split {
  BackendKind backend = BackendKind::Cpu;
  size_t begin = 0, end = 0;  ///< node index range [begin, end)
  std::vector<CrossCopy> copies;  ///< done before the split runs
};

/// Resolves a KvRegion node (layer, K or V) to its persistent buffer on `backend`.
using KvResolver = std::function<TensorRef(BackendKind backend, int32_t layer, int32_t which)>;

/// Chooses the backend of each compute node. Default: everything on `preferred`.
using Placement = std::function<BackendKind(const Graph&, const Node&)>;

struct PrepareOptions {
  BackendKind preferred = BackendKind::Cpu;
  Placement placement;    ///< overrides `preferred` per node when set (tests, mixed graphs)
  bool fuse = true;
};

/// An output node read back by PreparedGraph::execute: `bytes` (at most the node's size) from
/// the start of node `id` into host memory at `dst`.
struct OutputRead {
  NodeId id = kNoNode;
  void* dst = nullptr;
  uint64_t bytes = 0;
};

/// MINFER_TRACE=1: PreparedGraph::execute runs node by node and logs each node's output
/// statistics (min, max, mean of the finite values, NaN and Inf counts) and the first node of
/// each forward whose output is not finite. Off by default; CUDA then captures no graphs.
bool trace_enabled();

/// A graph ready to execute: nodes assigned, fused, allocated and split.
class PreparedGraph {
 public:
  PreparedGraph(Graph graph, Backend* const backends[2], const KvResolver& kv,
                const PrepareOptions& opt);
  PreparedGraph(const PreparedGraph&) = delete;
  PreparedGraph& operator=(const PreparedGraph&) = delete;

  const Graph& graph() const { return graph_; }
  const ExecPlan& plan() const { return plan_; }
  const std::vector<Split>& splits() const { return splits_; }
  const FusionStats& fusion() const { return fusion_; }

  /// Writes `bytes` into Input node `id` (on its backend).
  void set_input(NodeId id, const void* data, uint64_t bytes);
  /// Runs every split in order (copies across boundaries, sync at boundaries and at the end),
  /// then reads `reads` back: each is queued behind the last split and in `dst` when this
  /// returns (one wait covers both; fastest when `dst` is in the backend's alloc_host memory).
  /// Throws minfer::Error when a read asks for more bytes than its node holds (before anything
  /// runs) and whatever a backend's execute or synchronize throws.
  void execute(std::span<const OutputRead> reads = {});
  /// Reads output node `id` into `dst` (`bytes` <= the node's size).
  void read_output(NodeId id, void* dst, uint64_t bytes);

  Backend* backend(BackendKind k) const { return backends_[static_cast<size_t>(k)]; }

 private:
  /// MINFER_TRACE: logs the statistics of node i's f32 output (run on `b`), and once per forward
  /// (`*found`) names the first node whose output holds a NaN or an infinity.
  void trace_node(Backend* b, size_t i, bool* found);
  void assign(const PrepareOptions& opt);
  void allocate(const KvResolver& kv);
  void make_splits();

  Graph graph_;
  Backend* backends_[2];
  ExecPlan plan_;
  std::vector<Split> splits_;
  FusionStats fusion_;
  std::vector<uint8_t> staging_;  ///< host bounce buffer for cross-backend copies
  bool prefill_ = false;          ///< a ubatch of more than one token (op timing's phase)
};

}  // namespace minfer::graph
