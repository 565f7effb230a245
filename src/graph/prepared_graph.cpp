#include "graph/prepared_graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "graph/op_timing.h"

namespace minfer::graph {
namespace {

void free_aligned_host(void* p) { ::operator delete(p, std::align_val_t{64}); }

/// Statistics of one node's f32 output for MINFER_TRACE.
struct TraceStats {
  float min = std::numeric_limits<float>::infinity(), max = -std::numeric_limits<float>::infinity();
  double sum = 0.0;
  int64_t finite = 0, nan = 0, inf = 0;
};

TraceStats trace_stats(const std::vector<float>& v) {
  TraceStats t;
  for (const float x : v) {
    if (std::isnan(x)) {
      ++t.nan;
    } else if (std::isinf(x)) {
      ++t.inf;
    } else {
      t.min = std::min(t.min, x);
      t.max = std::max(t.max, x);
      t.sum += x;
      ++t.finite;
    }
  }
  return t;
}

}  // namespace

bool trace_enabled() { return env_flag("MINFER_TRACE"); }

void PreparedGraph::trace_node(Backend* b, size_t i, bool* found) {
  const Node& n = graph_.nodes()[i];
  if (n.dead || op_is_leaf(n.op) || op_is_alias(n.op) || n.op == Op::KvcacheStore) return;
  if (n.type != TensorType::F32) {
    log_info("trace: #{} {} ({}): {} output, not inspected", i, n.name, op_name(n.op), type_name(n.type));
    return;
  }
  const TensorRef& ref = plan_.home(graph_, static_cast<NodeId>(i));
  const uint64_t count = std::min<uint64_t>(ref.nbytes, n.nbytes()) / sizeof(float);
  std::vector<float> v(count);
  b->synchronize();
  b->download(v.data(), ref.data, count * sizeof(float));
  const TraceStats t = trace_stats(v);
  log_info("trace: #{} {} ({}) [{} x {}]: min {:.6g} max {:.6g} mean {:.6g}, {} NaN, {} Inf", i, n.name, op_name(n.op),
           n.ne[0], n.n_elements() / std::max<int64_t>(n.ne[0], 1), t.finite > 0 ? t.min : 0.0f,
           t.finite > 0 ? t.max : 0.0f, t.finite > 0 ? t.sum / static_cast<double>(t.finite) : 0.0, t.nan, t.inf);
  if (!*found && t.nan + t.inf > 0) {
    *found = true;
    log_warn("trace: the first node of this forward with a non-finite output is #{} {} ({}): {} NaN, {} Inf of {} values",
             i, n.name, op_name(n.op), t.nan, t.inf, count);
  }
}

HostBuffer Backend::alloc_host(uint64_t bytes) {
  void* p = ::operator new(std::max<uint64_t>(bytes, 1), std::align_val_t{64}, std::nothrow);
  if (p == nullptr) throw OutOfMemoryError(fmt::format("cannot allocate {} bytes of host memory", bytes));
  return HostBuffer(p, HostBufferFree{free_aligned_host});
}

PreparedGraph::PreparedGraph(Graph graph, Backend* const backends[2], const KvResolver& kv,
                             const PrepareOptions& opt)
    : graph_(std::move(graph)), backends_{backends[0], backends[1]} {
  graph_.validate();
  prefill_ = is_prefill(graph_);
  assign(opt);
  if (opt.fuse) fusion_ = run_fusion_pass(graph_, backends_);
  allocate(kv);
  const auto& nodes = graph_.nodes();
  first_ = nodes.size();
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].dead && !op_is_leaf(nodes[i].op)) {
      first_ = i;
      break;
    }
  }
}

void PreparedGraph::assign(const PrepareOptions& opt) {
  kind_ = opt.preferred;
  backend_ = backends_[static_cast<size_t>(kind_)];
  for (Node& n : graph_.nodes()) {
    if (n.dead) continue;
    n.backend = kind_;
    if (backend_ == nullptr)
      fail("node {} ({}): assigned to the {} backend, which this engine does not have", n.name,
           op_name(n.op), backend_name(kind_));
    if (op_is_leaf(n.op)) continue;
    const std::string why = backend_->unsupported_reason(graph_, n);
    if (!why.empty()) fail("node {} ({}): cannot run on {}: {}", n.name, op_name(n.op), backend_name(kind_), why);
  }
}

void PreparedGraph::allocate(const KvResolver& kv) {
  const auto& nodes = graph_.nodes();
  const size_t n_nodes = nodes.size();
  plan_.refs.assign(n_nodes, {});

  // Root of each node's storage (aliases and KV stores share their source's buffer).
  std::vector<NodeId> root(n_nodes);
  for (size_t i = 0; i < n_nodes; ++i) {
    const Node& n = nodes[i];
    root[i] = static_cast<NodeId>(i);
    if (n.dead) continue;
    if (op_is_alias(n.op)) root[i] = root[static_cast<size_t>(n.src[0])];
    if (n.op == Op::KvcacheStore) root[i] = root[static_cast<size_t>(n.src[1])];
  }
  // Last reader of each root (outputs and inputs stay allocated for the whole graph).
  std::vector<int64_t> last_use(n_nodes, -1);
  for (size_t i = 0; i < n_nodes; ++i) {
    const Node& n = nodes[i];
    if (n.dead) continue;
    last_use[static_cast<size_t>(root[i])] = std::max<int64_t>(last_use[static_cast<size_t>(root[i])], static_cast<int64_t>(i));
    for (int s = 0; s < n.n_src; ++s) {
      const auto r = static_cast<size_t>(root[static_cast<size_t>(n.src[static_cast<size_t>(s)])]);
      last_use[r] = std::max<int64_t>(last_use[r], static_cast<int64_t>(i));
    }
  }
  for (size_t i = 0; i < n_nodes; ++i) {
    const Node& n = nodes[i];
    if (!n.dead && (n.is_output || n.op == Op::Input)) last_use[static_cast<size_t>(root[i])] = static_cast<int64_t>(n_nodes);
  }

  // Pool buffers taken by this plan; every one is released back to the pool at the end of
  // planning: prepared graphs of one engine share scratch memory, which is safe because one
  // engine executes one graph at a time and reads its outputs before the next execution.
  std::vector<std::vector<size_t>> release_at(n_nodes + 1);

  Backend* b = backend_;
  for (size_t i = 0; i < n_nodes; ++i) {
    const Node& n = nodes[i];
    if (n.dead) continue;
    TensorRef& ref = plan_.refs[i];
    if (n.op == Op::Weight) {
      ref.data = const_cast<void*>(b->weight_data(*n.weight));
      ref.nbytes = n.weight->nbytes;
    } else if (n.op == Op::KvRegion) {
      ref = kv(kind_, n.p.layer, n.p.kv_which);
      if (ref.data == nullptr) fail("node {}: KV region has no buffer", n.name);
      if (ref.nbytes < n.nbytes())
        fail("node {}: KV region buffer holds {} bytes, the graph needs {}", n.name, ref.nbytes, n.nbytes());
    } else if (op_is_alias(n.op) || n.op == Op::KvcacheStore) {
      const size_t src = static_cast<size_t>(n.src[n.op == Op::KvcacheStore ? 1 : 0]);
      const TensorRef& s = plan_.refs[src];
      ref = s;
      ref.nbytes = n.nbytes();
      if (n.op == Op::View) {
        ref.data = static_cast<uint8_t*>(s.data) + n.p.offset;
        ref.offset = s.offset + n.p.offset;
      }
    } else {
      const uint64_t bytes = n.nbytes();
      const int32_t id = b->alloc_buffer(bytes);
      ref.buffer = id;
      ref.data = b->buffer_ptr(id);
      ref.nbytes = bytes;
      const int64_t lu = last_use[i];
      release_at[static_cast<size_t>(std::max<int64_t>(lu, static_cast<int64_t>(i)))].push_back(i);
    }
    // Free buffers whose last reader is this node (after this node's own allocation, so an
    // op never receives one of its inputs' buffers as its output).
    for (size_t r : release_at[i]) b->release_buffer(plan_.refs[r].buffer);
  }
  for (size_t r : release_at[n_nodes]) b->release_buffer(plan_.refs[r].buffer);
}

void PreparedGraph::set_input(NodeId id, const void* data, uint64_t bytes) {
  const Node& n = graph_.node(id);
  if (n.op != Op::Input) fail("set_input: node {} is not an input", n.name);
  if (bytes != n.nbytes()) fail("set_input: node {} takes {} bytes, got {}", n.name, n.nbytes(), bytes);
  const TensorRef& r = plan_.refs[static_cast<size_t>(id)];
  if (r.data != nullptr) backend_->upload(r.data, data, bytes);  // null: a dead input
}

void PreparedGraph::execute(std::span<const OutputRead> reads) {
  for (const OutputRead& r : reads) {
    const TensorRef& ref = plan_.home(graph_, r.id);
    if (r.bytes > ref.nbytes)
      fail("execute: output {} holds {} bytes, asked for {}", graph_.node(r.id).name, ref.nbytes, r.bytes);
  }
  const bool trace = trace_enabled();
  bool found = false;  // a non-finite output was reported in this forward
  // Op timing (graph/op_timing.h): CPU nodes timed here one by one, CUDA nodes by the backend.
  const bool timing = op_timing_enabled();
  const double t_step = timing ? trace_clock_ms() : 0.0;
  const size_t end = graph_.size();
  Backend* b = backend_;
  const bool timed_here = timing && kind_ == BackendKind::Cpu;  // CUDA nodes time themselves
  if (first_ < end && (trace || timed_here)) {
    // Node by node: each CPU node timed alone, each output inspected (trace) once computed.
    for (size_t i = first_; i < end; ++i) {
      const Node& n = graph_.nodes()[i];
      if (n.dead || op_is_leaf(n.op) || op_is_alias(n.op)) continue;
      const double t0 = timed_here ? trace_clock_ms() : 0.0;
      b->execute(graph_, plan_, i, i + 1);
      if (timed_here) {  // the node alone, without the statistics' readback
        const double dur = trace_clock_ms() - t0;
        const std::string cls = op_timing_class(graph_, n);
        record_op_time(prefill_, cls, dur);
        record_trace_node(prefill_, n.name, cls, t0, dur, false);
      }
      if (trace) trace_node(b, i, &found);
    }
  } else if (first_ < end) {
    b->execute(graph_, plan_, first_, end);
  }
  // The outputs are queued behind the work, so one wait covers the work and the readbacks.
  const bool wait = first_ < end || !reads.empty();
  try {
    for (const OutputRead& r : reads) b->download_at_sync(r.dst, plan_.home(graph_, r.id).data, r.bytes);
    if (wait) b->synchronize();
    if (timing) {
      const double dur = trace_clock_ms() - t_step;
      record_step_time(prefill_, dur);
      record_trace_step(prefill_, t_step, dur);
    }
  } catch (...) {
    // Nothing stays queued into the caller's memory past this call: the backend waits once more
    // (which finishes or drops a queued readback) before the error leaves.
    if (wait) {
      try {
        b->synchronize();
      } catch (...) {  // the first error is the one reported
      }
    }
    throw;
  }
}

void PreparedGraph::read_output(NodeId id, void* dst, uint64_t bytes) {
  const Node& n = graph_.node(id);
  const TensorRef& r = plan_.home(graph_, id);
  if (bytes > r.nbytes) fail("read_output: node {} holds {} bytes, asked for {}", n.name, r.nbytes, bytes);
  backend_->download(dst, r.data, bytes);
}

}  // namespace minfer::graph
