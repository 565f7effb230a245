// PreparedGraph: the pipeline after building: assign (every node to the one backend the graph runs
// on, an error when that backend cannot run a node: no fallback, no second backend), fuse,
// allocate (liveness-based buffers from the backend's pool; KV regions resolved to their
// persistent buffers), then execute. A graph never spans two backends
// (docs/adr/0007-one-backend-per-graph.md).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "graph/backend.h"
#include "graph/fusion.h"
#include "graph/graph.h"

namespace minfer::graph {

/// Resolves a KvRegion node (layer, K or V) to its persistent buffer on `backend`.
using KvResolver = std::function<TensorRef(BackendKind backend, int32_t layer, int32_t which)>;

struct PrepareOptions {
  BackendKind preferred = BackendKind::Cpu;  ///< the backend every node of the graph runs on
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

/// A graph ready to execute: nodes assigned, fused and allocated.
class PreparedGraph {
 public:
  /// `backends` is indexed by BackendKind; only backends[opt.preferred] is used (the error
  /// names the backend when it is null).
  PreparedGraph(Graph graph, Backend* const backends[2], const KvResolver& kv,
                const PrepareOptions& opt);
  PreparedGraph(const PreparedGraph&) = delete;
  PreparedGraph& operator=(const PreparedGraph&) = delete;

  const Graph& graph() const { return graph_; }
  const ExecPlan& plan() const { return plan_; }
  const FusionStats& fusion() const { return fusion_; }

  /// Writes `bytes` into Input node `id` (on its backend).
  void set_input(NodeId id, const void* data, uint64_t bytes);
  /// Runs the graph's nodes on its backend, then reads `reads` back: each is queued behind the
  /// work and in `dst` when this returns (one wait covers both; fastest when `dst` is in the
  /// backend's alloc_host memory).
  /// Throws minfer::Error when a read asks for more bytes than its node holds (before anything
  /// runs) and whatever a backend's execute or synchronize throws.
  void execute(std::span<const OutputRead> reads = {});
  /// Reads output node `id` into `dst` (`bytes` <= the node's size).
  void read_output(NodeId id, void* dst, uint64_t bytes);

 private:
  /// MINFER_TRACE: logs the statistics of node i's f32 output (run on `b`), and once per forward
  /// (`*found`) names the first node whose output holds a NaN or an infinity.
  void trace_node(Backend* b, size_t i, bool* found);
  void assign(const PrepareOptions& opt);
  void allocate(const KvResolver& kv);

  Graph graph_;
  Backend* backends_[2];  ///< as given; the fusion pass asks the node's backend what it fuses
  Backend* backend_ = nullptr;  ///< backends_[kind_]: runs every node
  BackendKind kind_ = BackendKind::Cpu;
  ExecPlan plan_;
  FusionStats fusion_;
  size_t first_ = 0;     ///< index of the first live node that computes (size() when none)
  bool prefill_ = false;  ///< a ubatch of more than one token (op timing's phase)
};

}  // namespace minfer::graph
