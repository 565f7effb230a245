#include "graph/fusion.h"

#include <map>

#include "core/error.h"

namespace minfer::graph {
namespace {

bool fusable(Backend* const backends[2], const Node& n, Op fused) {
  Backend* b = backends[static_cast<size_t>(n.backend)];
  return b != nullptr && b->supports_fused(fused);
}

// Single live consumer of each node, or kNoNode when zero or several.
std::vector<NodeId> sole_consumers(const Graph& g) {
  std::vector<NodeId> sole(g.size(), kNoNode);
  std::vector<int> count(g.size(), 0);
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.dead) continue;
    for (int s = 0; s < n.n_src; ++s) {
      const auto src = static_cast<size_t>(n.src[static_cast<size_t>(s)]);
      if (++count[src] == 1) sole[src] = static_cast<NodeId>(i);
      else sole[src] = kNoNode;
    }
  }
  for (size_t i = 0; i < g.size(); ++i)
    if (g.nodes()[i].is_output) sole[i] = kNoNode;  // an output is read by the engine too
  return sole;
}

int fuse_swiglu(Graph& g, Backend* const backends[2]) {
  int fused = 0;
  const auto sole = sole_consumers(g);
  for (size_t i = 0; i < g.size(); ++i) {
    Node& m = g.nodes()[i];
    if (m.dead || m.op != Op::Mul || !fusable(backends, m, Op::SwiGLU)) continue;
    for (int side = 0; side < 2; ++side) {
      const NodeId s_id = m.src[static_cast<size_t>(side)];
      Node& s = g.node(s_id);
      if (s.op != Op::Silu || sole[static_cast<size_t>(s_id)] != static_cast<NodeId>(i)) continue;
      const NodeId other = m.src[static_cast<size_t>(1 - side)];
      if (g.node(other).ne != s.ne) continue;  // SwiGLU has no broadcast
      m.op = Op::SwiGLU;
      m.src[0] = s.src[0];
      m.src[1] = other;
      s.dead = true;
      ++fused;
      break;
    }
  }
  return fused;
}

int fuse_ffn(Graph& g, Backend* const backends[2]) {
  int fused = 0;
  const auto sole = sole_consumers(g);
  for (size_t i = 0; i < g.size(); ++i) {
    Node& d = g.nodes()[i];
    if (d.dead || d.op != Op::MatMul || !fusable(backends, d, Op::FusedFFN)) continue;
    const NodeId sw_id = d.src[1];
    Node& sw = g.node(sw_id);
    if (sw.op != Op::SwiGLU || sole[static_cast<size_t>(sw_id)] != static_cast<NodeId>(i)) continue;
    Node& gate = g.node(sw.src[0]);
    Node& up = g.node(sw.src[1]);
    if (gate.op != Op::MatMul || up.op != Op::MatMul || gate.src[1] != up.src[1]) continue;
    if (sole[static_cast<size_t>(sw.src[0])] != sw_id || sole[static_cast<size_t>(sw.src[1])] != sw_id) continue;
    if (gate.backend != d.backend || up.backend != d.backend || sw.backend != d.backend) continue;
    const NodeId x = gate.src[1], wg = gate.src[0], wu = up.src[0], wd = d.src[0];
    gate.dead = up.dead = sw.dead = true;
    d.op = Op::FusedFFN;
    d.src = {x, wg, wu, wd, kNoNode, kNoNode, kNoNode, kNoNode};
    d.n_src = 4;
    ++fused;
  }
  return fused;
}

// One projection of a q/k/v triple: the MatMul, its bias Add (or kNoNode), and the node whose
// slot becomes the View of the fused output (the Add, or the MatMul's sole Reshape consumer).
struct Projection {
  NodeId matmul = kNoNode, bias = kNoNode, bias_add = kNoNode, tail = kNoNode;
};

bool describe_projection(const Graph& g, const std::vector<NodeId>& sole, NodeId mm, Projection* p) {
  p->matmul = mm;
  const NodeId c = sole[static_cast<size_t>(mm)];
  if (c == kNoNode) return false;
  const Node& cn = g.node(c);
  if (cn.op == Op::Add && cn.src[0] == mm && g.node(cn.src[1]).op == Op::Weight &&
      g.node(cn.src[1]).n_elements() == g.node(mm).ne[0]) {
    p->bias_add = c;
    p->bias = cn.src[1];
    p->tail = c;
    return true;
  }
  if (cn.op == Op::Reshape) {
    p->tail = c;
    return true;
  }
  return false;
}

int fuse_qkv(Graph& g, Backend* const backends[2]) {
  int fused = 0;
  const auto sole = sole_consumers(g);
  std::map<NodeId, std::vector<NodeId>> by_input;  // x -> MatMuls reading it, in order
  for (size_t i = 0; i < g.size(); ++i) {
    const Node& n = g.nodes()[i];
    if (!n.dead && n.op == Op::MatMul) by_input[n.src[1]].push_back(static_cast<NodeId>(i));
  }
  for (auto& [x, mms] : by_input) {
    if (mms.size() != 3) continue;
    Node& q_mm = g.node(mms[0]);
    if (!fusable(backends, q_mm, Op::FusedQKV)) continue;
    Projection pr[3];
    bool ok = true;
    for (int k = 0; k < 3; ++k) ok = ok && describe_projection(g, sole, mms[static_cast<size_t>(k)], &pr[k]);
    if (!ok) continue;
    const bool has_bias = pr[0].bias != kNoNode;
    for (int k = 0; k < 3; ++k) {
      ok = ok && (pr[k].bias != kNoNode) == has_bias && g.node(pr[k].matmul).backend == q_mm.backend;
      // Every source of the fused op must precede the q MatMul's slot.
      ok = ok && g.node(pr[k].matmul).src[0] < mms[0] && (!has_bias || pr[k].bias < mms[0]);
      // Each tail must come after the q MatMul's slot (it becomes a View of it).
      ok = ok && pr[k].tail > mms[0];
    }
    if (!ok) continue;
    const int64_t n_tok = q_mm.ne[1];
    int64_t dims[3];
    for (int k = 0; k < 3; ++k) dims[k] = g.node(pr[k].matmul).ne[0];
    const NodeId fused_id = mms[0];
    Node f;
    f.op = Op::FusedQKV;
    f.backend = q_mm.backend;
    f.ne = {dims[0] + dims[1] + dims[2], n_tok, 1, 1};
    f.src = {static_cast<NodeId>(x), g.node(pr[0].matmul).src[0], g.node(pr[1].matmul).src[0],
             g.node(pr[2].matmul).src[0], kNoNode, kNoNode, kNoNode, kNoNode};
    f.n_src = 4;
    if (has_bias) {
      f.src[4] = pr[0].bias;
      f.src[5] = pr[1].bias;
      f.src[6] = pr[2].bias;
      f.n_src = 7;
      f.p.has_bias = true;
    }
    f.p.head_dim = 0;
    f.name = q_mm.name + "+kv";
    uint64_t offset = 0;
    for (int k = 0; k < 3; ++k) {
      Node& tail = g.node(pr[k].tail);
      const Shape shape = tail.ne;
      tail.op = Op::View;
      tail.src = {fused_id, kNoNode, kNoNode, kNoNode, kNoNode, kNoNode, kNoNode, kNoNode};
      tail.n_src = 1;
      tail.p.offset = offset;
      tail.ne = shape;
      offset += static_cast<uint64_t>(dims[k] * n_tok) * sizeof(float);
      if (pr[k].matmul != fused_id) g.node(pr[k].matmul).dead = true;
      if (has_bias && pr[k].bias_add != pr[k].tail) g.node(pr[k].bias_add).dead = true;
    }
    g.node(fused_id) = std::move(f);
    ++fused;
  }
  return fused;
}

}  // namespace

FusionStats run_fusion_pass(Graph& g, Backend* const backends[2]) {
  FusionStats st;
  st.swiglu = fuse_swiglu(g, backends);
  st.ffn = fuse_ffn(g, backends);
  st.qkv = fuse_qkv(g, backends);
  g.validate();
  return st;
}

}  // namespace minfer::graph
