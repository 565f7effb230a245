// CudaBackend::execute: direct launches or CUDA Graph capture / replay per (graph uid, split).
//
// The state machine of one key (g.uid(), begin, end):
//   runs 1 and 2        direct launches (warm-up: lazy module loads, scratch growth)
//   run 3               capture on this backend's stream in thread-local mode, instantiate,
//                       launch once (this run's results), store the executable graph
//   runs 4, 5, ...      replay, while the pool generation and the split signature (every
//                       address and KV format the split's kernels were recorded with) match;
//                       a mismatch destroys the graph and re-arms the key (two warm-ups again)
// Prefill-shaped graphs (more than one token) are captured too unless
// MINFER_NO_PREFILL_CAPTURE=1. MINFER_NO_CUDA_GRAPH=1 disables capture and replay. A failed
// launch inside a capture window aborts the capture, disables graphs for this backend and is
// reported as the node's error; a capture that fails to close or instantiate disables graphs
// and the split runs again with direct launches.
#include <algorithm>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"
#include "core/log.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {

using graph::Graph;
using graph::Node;

namespace {

constexpr uint64_t kWarmupRuns = 2;
constexpr size_t kMaxKeys = 64;

/// Tokens of the graph (its TokenIds input), 1 when it has none (single-op test graphs).
int64_t graph_tokens(const Graph& g) {
  const graph::NodeId t = g.find_input(graph::InputKind::TokenIds);
  return t == graph::kNoNode ? 1 : g.node(t).n_elements();
}

/// Hash of everything a recorded kernel depends on besides the graph's structure: each node's
/// output and source addresses and element types in the split (the KV regions' formats and
/// addresses are among them: the "KV layout").
uint64_t split_signature(const Graph& g, const graph::ExecPlan& plan, size_t begin, size_t end) {
  std::vector<uint64_t> words;
  words.reserve((end - begin) * 6 + 2);
  words.push_back(begin);
  words.push_back(end);
  for (size_t i = begin; i < end; ++i) {
    const Node& n = g.nodes()[i];
    if (n.dead) continue;
    words.push_back(i << 8 | static_cast<uint64_t>(n.op));
    words.push_back(reinterpret_cast<uintptr_t>(plan.refs[i].data));
    for (int s = 0; s < n.n_src; ++s) {
      const Node& sn = g.node(n.src[static_cast<size_t>(s)]);
      words.push_back(reinterpret_cast<uintptr_t>(plan.src_data(g, n, s)));
      words.push_back(static_cast<uint64_t>(sn.type));
    }
  }
  return XXH3_64bits(words.data(), words.size() * sizeof(uint64_t));
}

}  // namespace

void CudaBackend::execute(const Graph& g, const graph::ExecPlan& plan, size_t begin, size_t end) {
  MINFER_ASSERT(!capturing_);
  check_latched("executing a graph split");
  flush_uploads("a graph split");
  clear_launch_failure();
  // Every temporary the split needs exists before a capture window can open.
  size_t scratch = 0;
  for (size_t i = begin; i < end; ++i) {
    const Node& n = g.nodes()[i];
    if (!n.dead) scratch = std::max(scratch, node_scratch_bytes(g, n));
  }
  ensure_scratch(scratch);

  KeyState* st = nullptr;
  const Mode mode = choose_mode(g, plan, begin, end, &st);
  if (mode == Mode::Replay) {
    const cudaError_t e = cudaGraphLaunch(st->exec, stream_);
    if (e == cudaSuccess) {
      ++stats_.replays;
      return;
    }
    cudaGetLastError();
    disable_graphs(fmt::format("replaying a captured graph failed: {}", cuda_error_text(e)));
  }
  if (mode != Mode::Capture) {
    ++stats_.direct;
    run_direct(g, plan, begin, end);
    return;
  }
  const uint64_t signature = split_signature(g, plan, begin, end);
  begin_capture();
  if (!capturing_) {  // the window could not open: graphs are disabled now
    ++stats_.direct;
    run_direct(g, plan, begin, end);
    return;
  }
  try {
    run_direct(g, plan, begin, end);
  } catch (const Error& e) {
    abort_capture(e.what());
    throw;
  }
  if (!end_capture(*st, signature)) {
    ++stats_.direct;
    run_direct(g, plan, begin, end);  // nothing ran in the window: run the split for real
  }
}

CudaBackend::Mode CudaBackend::choose_mode(const Graph& g, const graph::ExecPlan& plan, size_t begin,
                                           size_t end, KeyState** state) {
  if (!graphs_enabled_) return Mode::Direct;
  const GraphKey key{g.uid(), begin, end};
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    evict_keys();
    it = keys_.emplace(key, KeyState{}).first;
  }
  KeyState& st = it->second;
  st.last_use = ++use_clock_;
  *state = &st;
  if (st.exec != nullptr) {
    if (st.generation == generation_ && st.signature == split_signature(g, plan, begin, end))
      return Mode::Replay;
    destroy_exec(st);  // addresses or KV layout moved: re-arm the key
    st.runs = 0;
  }
  ++st.runs;
  if (st.runs <= kWarmupRuns) return Mode::Direct;
  if (!prefill_capture_ && graph_tokens(g) > 1) return Mode::Direct;
  return Mode::Capture;
}

void CudaBackend::begin_capture() {
  const cudaError_t e = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
  if (e != cudaSuccess) {
    cudaGetLastError();
    disable_graphs(fmt::format("opening a capture window failed: {}", cuda_error_text(e)));
    return;
  }
  capturing_ = true;
}

bool CudaBackend::end_capture(KeyState& st, uint64_t signature) {
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream_, &graph);
  if (e != cudaSuccess || graph == nullptr) {
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    ++stats_.aborted;
    disable_graphs(fmt::format("closing the capture window failed: {}", cuda_error_text(e)));
    return false;
  }
  cudaGraphExec_t exec = nullptr;
  e = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e == cudaSuccess) e = cudaGraphLaunch(exec, stream_);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    ++stats_.aborted;
    disable_graphs(fmt::format("instantiating or launching a captured graph failed: {}", cuda_error_text(e)));
    return false;
  }
  st.exec = exec;
  st.generation = generation_;
  st.signature = signature;
  ++stats_.captures;
  return true;
}

void CudaBackend::abort_capture(const std::string& why) {
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream_, &graph) != cudaSuccess) cudaGetLastError();
  if (graph != nullptr) cudaGraphDestroy(graph);
  ++stats_.aborted;
  disable_graphs("an error inside a capture window: " + why);
}

void CudaBackend::disable_graphs(const std::string& why) {
  if (graphs_enabled_) log_warn("cuda: CUDA graphs disabled for this engine ({})", why);
  graphs_enabled_ = false;
  for (auto& [key, st] : keys_) destroy_exec(st);
  keys_.clear();
}

void CudaBackend::destroy_exec(KeyState& st) {
  if (st.exec == nullptr) return;
  if (cudaGraphExecDestroy(st.exec) != cudaSuccess) cudaGetLastError();
  st.exec = nullptr;
}

void CudaBackend::evict_keys() {
  // Prepared graphs come and go (the engine keeps a few); keys of dead graphs age out here.
  while (keys_.size() >= kMaxKeys) {
    auto oldest = keys_.begin();
    for (auto it = keys_.begin(); it != keys_.end(); ++it)
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    destroy_exec(oldest->second);
    keys_.erase(oldest);
  }
}

}  // namespace minfer::cuda
