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

// The Add node takes the fused op (its slot follows every source); the product dies.
int fuse_residual(Graph& g, Backend* const backends[2]) {
  int fused = 0;
  const auto sole = sole_consumers(g);
  for (size_t i = 0; i < g.size(); ++i) {
    Node& a = g.nodes()[i];
    if (a.dead || a.op != Op::Add || !fusable(backends, a, Op::MatMulAdd)) continue;
    for (int side = 0; side < 2; ++side) {
      const NodeId p_id = a.src[static_cast<size_t>(side)];
      const NodeId r_id = a.src[static_cast<size_t>(1 - side)];
      const Node& p = g.node(p_id);
      const bool mm = p.op == Op::MatMul, ffn = p.op == Op::FusedFFN && p.n_src == 4;
      if (!(mm || ffn) || sole[static_cast<size_t>(p_id)] != static_cast<NodeId>(i)) continue;
      if (p.backend != a.backend || r_id == p_id) continue;
      const Node& r = g.node(r_id);
      if (r.ne != p.ne || r.type != TensorType::F32 || a.ne != p.ne) continue;  // no broadcast
      Node f = p;
      f.op = mm ? Op::MatMulAdd : Op::FusedFFN;
      f.src[f.n_src] = r_id;
      f.n_src = static_cast<uint8_t>(f.n_src + 1);
      f.name = a.name;
      f.is_output = a.is_output;
      g.node(p_id).dead = true;
      g.node(static_cast<NodeId>(i)) = std::move(f);
      ++fused;
      break;
    }
  }
  return fused;
}

/// Follows `id` (read only by `consumer`) down through Reshapes, each read only by the node above
/// it, to a View; returns the View (kNoNode when the chain is anything else) and appends the
/// nodes passed (Reshapes and the View) to `chain`.
NodeId view_below(const Graph& g, const std::vector<NodeId>& sole, NodeId id, NodeId consumer,
                  std::vector<NodeId>* chain) {
  while (true) {
    if (sole[static_cast<size_t>(id)] != consumer) return kNoNode;
    const Node& n = g.node(id);
    chain->push_back(id);
    if (n.op == Op::View) return id;
    if (n.op != Op::Reshape) return kNoNode;
    consumer = id;
    id = n.src[0];
  }
}

/// The q (or k) operand of a Rope: [QkNorm ->] Reshape* -> View. Returns the View, sets *norm to
/// the QkNorm (or kNoNode) and appends every node passed to `chain`.
NodeId rope_operand(const Graph& g, const std::vector<NodeId>& sole, NodeId rope, NodeId* norm,
                    std::vector<NodeId>* chain) {
  NodeId id = g.node(rope).src[0], consumer = rope;
  *norm = kNoNode;
  if (g.node(id).op == Op::QkNorm) {
    if (sole[static_cast<size_t>(id)] != rope) return kNoNode;
    *norm = id;
    chain->push_back(id);
    consumer = id;
    id = g.node(id).src[0];
  }
  return view_below(g, sole, id, consumer, chain);
}

// Attn(Rope(q), KvcacheStore(Rope(k), K, cells), KvcacheStore(v, V, cells), ...) where q, k and v
// are the planes of one FusedQKV (q and k optionally through QkNorm) -> QkvBiasRopeStore in the
// q Rope's slot; the Attn then reads the regions K and V directly.
int fuse_rope_store(Graph& g, Backend* const backends[2]) {
  int fused = 0;
  const auto sole = sole_consumers(g);
  const auto only = [&](NodeId id, NodeId consumer) { return sole[static_cast<size_t>(id)] == consumer; };
  for (size_t i = 0; i < g.size(); ++i) {
    Node& at = g.nodes()[i];
    const auto a_id = static_cast<NodeId>(i);
    if (at.dead || at.op != Op::Attn || !fusable(backends, at, Op::QkvBiasRopeStore)) continue;
    const NodeId rq_id = at.src[0], sk_id = at.src[1], sv_id = at.src[2];
    const Node& rq = g.node(rq_id);
    const Node& sk = g.node(sk_id);
    const Node& sv = g.node(sv_id);
    if (rq.op != Op::Rope || sk.op != Op::KvcacheStore || sv.op != Op::KvcacheStore) continue;
    if (!only(rq_id, a_id) || !only(sk_id, a_id) || !only(sv_id, a_id) || sk.src[2] != sv.src[2]) continue;
    const NodeId rk_id = sk.src[0];
    const Node& rk = g.node(rk_id);
    if (rk.op != Op::Rope || !only(rk_id, sk_id) || rk.src[1] != rq.src[1] || rk.p.head_dim != rq.p.head_dim ||
        rk.p.n_rot != rq.p.n_rot || rk.p.rope_theta != rq.p.rope_theta || !(rk.p.rope == rq.p.rope) ||
        (rq.p.rope.has_freq_factors && rk.src[2] != rq.src[2]))
      continue;
    std::vector<NodeId> chain;
    NodeId nq = kNoNode, nk = kNoNode;
    const NodeId vq = rope_operand(g, sole, rq_id, &nq, &chain);
    const NodeId vk = rope_operand(g, sole, rk_id, &nk, &chain);
    const NodeId vv = view_below(g, sole, sv.src[0], sv_id, &chain);
    if (vq == kNoNode || vk == kNoNode || vv == kNoNode || (nq == kNoNode) != (nk == kNoNode)) continue;
    const int64_t hd = rq.p.head_dim;
    if (nq != kNoNode && (g.node(nq).p.eps != g.node(nk).p.eps || g.node(nq).p.head_dim != hd ||
                          g.node(nk).p.head_dim != hd))
      continue;
    const NodeId f_id = g.node(vq).src[0];
    const Node& f = g.node(f_id);
    if (f.op != Op::FusedQKV || g.node(vk).src[0] != f_id || g.node(vv).src[0] != f_id) continue;
    const int64_t nt = f.ne[1], dq = rq.ne[0], dk = rk.ne[0], dv = g.node(sv.src[0]).ne[0];
    const auto plane = [&](NodeId v, int64_t dim, int64_t offset_rows) {
      const Node& n = g.node(v);
      return n.ne == Shape{dim, nt, 1, 1} && n.p.offset == static_cast<uint64_t>(offset_rows * nt) * sizeof(float);
    };
    if (hd <= 0 || dq + dk + dv != f.ne[0] || dk != dv || dq % hd != 0 || dk % hd != 0 || !plane(vq, dq, 0) ||
        !plane(vk, dk, dq) || !plane(vv, dv, dq + dk) || at.p.head_dim != hd || at.p.n_head * hd != dq ||
        at.p.n_head_kv * hd != dk)
      continue;
    const NodeId kreg = sk.src[1], vreg = sv.src[1], cells = sk.src[2], pos = rq.src[1];
    bool ok = kreg < rq_id && vreg < rq_id && cells < rq_id && pos < rq_id;
    for (NodeId id : {rk_id, sk_id, sv_id, f_id}) ok = ok && g.node(id).backend == at.backend;
    for (NodeId id : chain) ok = ok && g.node(id).backend == at.backend;
    if (nq != kNoNode) ok = ok && g.node(nq).src[1] < rq_id && g.node(nk).src[1] < rq_id;
    if (!ok || rq.backend != at.backend) continue;

    Node r;
    r.op = Op::QkvBiasRopeStore;
    r.backend = rq.backend;
    r.type = TensorType::F32;
    r.ne = rq.ne;
    r.name = rq.name;
    r.src = {f_id, kreg, vreg, pos, cells, kNoNode, kNoNode, kNoNode};
    r.n_src = 5;
    r.p.head_dim = static_cast<int32_t>(hd);
    r.p.n_rot = rq.p.n_rot;
    r.p.rope_theta = rq.p.rope_theta;
    r.p.rope = rq.p.rope;
    r.p.n_head = static_cast<int32_t>(dq / hd);
    r.p.n_head_kv = static_cast<int32_t>(dk / hd);
    if (nq != kNoNode) {
      r.src[5] = g.node(nq).src[1];
      r.src[6] = g.node(nk).src[1];
      r.n_src = 7;
      r.p.eps = g.node(nq).p.eps;
      r.p.has_qk_norm = true;
    }
    if (rq.p.rope.has_freq_factors) r.src[r.n_src++] = rq.src[2];  // always the last source
    for (NodeId id : chain) g.node(id).dead = true;
    g.node(rk_id).dead = g.node(sk_id).dead = g.node(sv_id).dead = true;
    at.src[1] = kreg;
    at.src[2] = vreg;
    g.node(rq_id) = std::move(r);
    ++fused;
  }
  return fused;
}

// RmsNorm(x, w) read only by a FusedQKV or FusedFFN (as its input x) -> that op with has_norm:
// src0 becomes x, w is appended as the last source. Gated by supports_fused(Op::RmsNorm) (a
// backend that quantizes the normalized row for the matvecs in the same launch).
int fuse_norm(Graph& g, Backend* const backends[2]) {
  int fused = 0;
  const auto sole = sole_consumers(g);
  for (size_t i = 0; i < g.size(); ++i) {
    Node& f = g.nodes()[i];
    if (f.dead || (f.op != Op::FusedQKV && f.op != Op::FusedFFN) || f.p.has_norm) continue;
    if (!fusable(backends, f, Op::RmsNorm) || f.n_src >= kMaxSrc) continue;
    const NodeId r_id = f.src[0];
    Node& r = g.node(r_id);
    if (r.op != Op::RmsNorm || sole[static_cast<size_t>(r_id)] != static_cast<NodeId>(i) ||
        r.backend != f.backend || r.ne != g.node(r.src[0]).ne || r.ne[2] != 1 || r.ne[3] != 1)
      continue;
    f.src[0] = r.src[0];
    f.src[f.n_src] = r.src[1];
    f.n_src = static_cast<uint8_t>(f.n_src + 1);
    f.p.has_norm = true;
    f.p.eps = r.p.eps;
    r.dead = true;
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
  st.residual = fuse_residual(g, backends);
  st.rope_store = fuse_rope_store(g, backends);
  st.norm = fuse_norm(g, backends);  // last: the rules above match the norm-free sources
  g.validate();
  return st;
}

}  // namespace minfer::graph
