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

size_t bk(BackendKind k) { return static_cast<size_t>(k); }

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
  make_splits();
}

void PreparedGraph::assign(const PrepareOptions& opt) {
  auto& nodes = graph_.nodes();
  const auto consumers_backend = [&](size_t leaf) {
    // A leaf lives where its first live consumer runs (it was assigned already: consumers
    // come later, so this is resolved in a second pass below).
    for (size_t j = leaf + 1; j < nodes.size(); ++j) {
      const Node& c = nodes[j];
      if (c.dead) continue;
      for (int s = 0; s < c.n_src; ++s)
        if (c.src[static_cast<size_t>(s)] == static_cast<NodeId>(leaf)) return c.backend;
    }
    return opt.preferred;
  };
  for (Node& n : nodes) {
    if (n.dead || op_is_leaf(n.op)) continue;
    n.backend = opt.placement ? opt.placement(graph_, n) : opt.preferred;
  }
  // Leaves live where their first consumer runs; aliases live with their source (same buffer).
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    if (n.dead) continue;
    if (op_is_leaf(n.op)) n.backend = consumers_backend(i);
    if (op_is_alias(n.op)) n.backend = nodes[static_cast<size_t>(n.src[0])].backend;
  }
  for (Node& n : nodes) {
    if (n.dead) continue;
    Backend* b = backends_[bk(n.backend)];
    if (b == nullptr)
      fail("node {} ({}): assigned to the {} backend, which this engine does not have", n.name,
           op_name(n.op), backend_name(n.backend));
    if (op_is_leaf(n.op)) continue;
    const std::string why = b->unsupported_reason(graph_, n);
    if (!why.empty())
      fail("node {} ({}): cannot run on {}: {}", n.name, op_name(n.op), backend_name(n.backend), why);
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

  for (size_t i = 0; i < n_nodes; ++i) {
    const Node& n = nodes[i];
    if (n.dead) continue;
    TensorRef& ref = plan_.refs[i][bk(n.backend)];
    Backend* b = backends_[bk(n.backend)];
    if (n.op == Op::Weight) {
      ref.data = const_cast<void*>(b->weight_data(*n.weight));
      ref.nbytes = n.weight->nbytes;
    } else if (n.op == Op::KvRegion) {
      ref = kv(n.backend, n.p.layer, n.p.kv_which);
      if (ref.data == nullptr) fail("node {}: KV region has no buffer", n.name);
      if (ref.nbytes < n.nbytes())
        fail("node {}: KV region buffer holds {} bytes, the graph needs {}", n.name, ref.nbytes, n.nbytes());
    } else if (op_is_alias(n.op) || n.op == Op::KvcacheStore) {
      const size_t src = static_cast<size_t>(n.src[n.op == Op::KvcacheStore ? 1 : 0]);
      const TensorRef& s = plan_.refs[src][bk(nodes[src].backend)];
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
    for (size_t r : release_at[i]) {
      const TensorRef& rr = plan_.refs[r][bk(nodes[r].backend)];
      backends_[bk(nodes[r].backend)]->release_buffer(rr.buffer);
    }
  }
  for (size_t r : release_at[n_nodes]) {
    const TensorRef& rr = plan_.refs[r][bk(nodes[r].backend)];
    backends_[bk(nodes[r].backend)]->release_buffer(rr.buffer);
  }
}

void PreparedGraph::make_splits() {
  const auto& nodes = graph_.nodes();
  splits_.clear();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.dead || op_is_leaf(n.op)) continue;
    if (splits_.empty() || splits_.back().backend != n.backend) {
      if (!splits_.empty()) splits_.back().end = i;
      splits_.push_back(Split{n.backend, i, nodes.size(), {}});
    }
  }
  // Cross-backend reads: give the source a mirror on the reader's backend, copied before the
  // reader's split. Mirrors are allocated for the life of the plan (rare: mixed graphs only).
  for (Split& sp : splits_) {
    for (size_t i = sp.begin; i < sp.end; ++i) {
      const Node& n = nodes[i];
      if (n.dead) continue;
      for (int s = 0; s < n.n_src; ++s) {
        const auto src = static_cast<size_t>(n.src[static_cast<size_t>(s)]);
        const Node& sn = nodes[src];
        if (sn.backend == n.backend || sn.op == Op::Weight) continue;
        TensorRef& mirror = plan_.refs[src][bk(n.backend)];
        if (mirror.data != nullptr) continue;
        if (sn.op == Op::KvRegion) fail("node {}: reads KV region {} across backends", n.name, sn.name);
        Backend* b = backends_[bk(n.backend)];
        mirror.nbytes = sn.nbytes();
        mirror.buffer = b->alloc_buffer(mirror.nbytes);
        mirror.data = b->buffer_ptr(mirror.buffer);
        sp.copies.push_back(CrossCopy{static_cast<NodeId>(src), sn.backend, n.backend});
      }
    }
  }
  // Weights read on a backend other than their leaf's: resolve there too.
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.dead) continue;
    for (int s = 0; s < n.n_src; ++s) {
      const auto src = static_cast<size_t>(n.src[static_cast<size_t>(s)]);
      if (nodes[src].op != Op::Weight) continue;
      TensorRef& r = plan_.refs[src][bk(n.backend)];
      if (r.data == nullptr) {
        r.data = const_cast<void*>(backends_[bk(n.backend)]->weight_data(*nodes[src].weight));
        r.nbytes = nodes[src].weight->nbytes;
      }
    }
  }
}

void PreparedGraph::set_input(NodeId id, const void* data, uint64_t bytes) {
  const Node& n = graph_.node(id);
  if (n.op != Op::Input) fail("set_input: node {} is not an input", n.name);
  if (bytes != n.nbytes()) fail("set_input: node {} takes {} bytes, got {}", n.name, n.nbytes(), bytes);
  // An input read by another backend: write both copies.
  for (size_t k = 0; k < 2; ++k) {
    const TensorRef& r = plan_.refs[static_cast<size_t>(id)][k];
    if (r.data != nullptr) backends_[k]->upload(r.data, data, bytes);
  }
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
  for (size_t s = 0; s < splits_.size(); ++s) {
    const Split& sp = splits_[s];
    for (const CrossCopy& c : sp.copies) {
      // Input nodes were written to every copy by set_input.
      if (graph_.node(c.node).op == Op::Input) continue;
      const TensorRef& from = plan_.refs[static_cast<size_t>(c.node)][bk(c.from)];
      const TensorRef& to = plan_.refs[static_cast<size_t>(c.node)][bk(c.to)];
      staging_.resize(from.nbytes);
      backends_[bk(c.from)]->download(staging_.data(), from.data, from.nbytes);
      backends_[bk(c.to)]->upload(to.data, staging_.data(), from.nbytes);
    }
    Backend* b = backends_[bk(sp.backend)];
    const bool timed_here = timing && sp.backend == BackendKind::Cpu;  // CUDA nodes time themselves
    if (trace || timed_here) {
      // Node by node: each CPU node timed alone, each output inspected (trace) once computed.
      for (size_t i = sp.begin; i < sp.end; ++i) {
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
    } else {
      b->execute(graph_, plan_, sp.begin, sp.end);
    }
    if (s + 1 < splits_.size()) b->synchronize();
  }
  // The outputs are queued behind the last split, so one wait per backend covers the work and
  // the readbacks.
  bool wait[2] = {false, false};
  if (!splits_.empty()) wait[bk(splits_.back().backend)] = true;
  try {
    for (const OutputRead& r : reads) {
      const BackendKind k = graph_.node(r.id).backend;
      wait[bk(k)] = true;
      backends_[bk(k)]->download_at_sync(r.dst, plan_.home(graph_, r.id).data, r.bytes);
    }
    for (size_t k = 0; k < 2; ++k)
      if (wait[k]) backends_[k]->synchronize();
    if (timing) {
      const double dur = trace_clock_ms() - t_step;
      record_step_time(prefill_, dur);
      record_trace_step(prefill_, t_step, dur);
    }
  } catch (...) {
    // Nothing stays queued into the caller's memory past this call: every backend that may hold
    // a queued readback waits once more (which finishes or drops it) before the error leaves.
    for (size_t k = 0; k < 2; ++k) {
      if (!wait[k]) continue;
      try {
        backends_[k]->synchronize();
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
  backends_[bk(n.backend)]->download(dst, r.data, bytes);
}

}  // namespace minfer::graph
