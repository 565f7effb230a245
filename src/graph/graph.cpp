#include "graph/graph.h"

#include <atomic>
#include <cmath>

#include "core/error.h"
#include "quant/quant.h"

namespace minfer::graph {
namespace {

std::atomic<uint64_t> g_next_uid{1};

std::string shape_str(const Shape& ne) {
  return fmt::format("[{}, {}, {}, {}]", ne[0], ne[1], ne[2], ne[3]);
}

int64_t elements(const Shape& ne) { return ne[0] * ne[1] * ne[2] * ne[3]; }

bool is_float_activation(const Node& n) { return n.type == TensorType::F32; }

}  // namespace

std::string_view backend_name(BackendKind k) { return k == BackendKind::Cpu ? "cpu" : "cuda"; }

std::string_view op_name(Op op) {
  static constexpr std::string_view kNames[] = {
      "Input",  "Weight", "KvRegion",     "Add",         "Mul",  "Silu",    "SwiGLU",
      "RmsNorm", "QkNorm", "MatMul",      "Rope",        "Attn", "KvcacheStore", "KvcacheLoad",
      "View",   "Reshape", "GetRows",     "FusedQKV",    "QkvBiasRopeStore", "FusedFFN",
      "MatMulAdd"};
  static_assert(std::size(kNames) == static_cast<size_t>(Op::Count_));
  const auto i = static_cast<size_t>(op);
  return i < std::size(kNames) ? kNames[i] : "?";
}

uint64_t Node::nbytes() const {
  if (op == Op::Weight) return weight->nbytes;
  int64_t bs = 0;
  size_t bb = 0;
  if (!type_block_layout(type, &bs, &bb))
    fail("node {}: output type {} has no block layout", name, type_name(type));
  if (ne[0] % bs != 0)
    fail("node {}: row length {} is not a multiple of the {} block size {}", name, ne[0],
         type_name(type), bs);
  return static_cast<uint64_t>(elements(ne) / bs) * bb;
}

Graph::Graph() : uid_(g_next_uid.fetch_add(1)) {}

NodeId Graph::push(Node n) {
  for (int i = 0; i < 4; ++i)
    if (n.ne[i] <= 0) fail("node {}: dimension {} is {} (shape {})", n.name, i, n.ne[i], shape_str(n.ne));
  nodes_.push_back(std::move(n));
  return static_cast<NodeId>(nodes_.size() - 1);
}

NodeId Graph::append(Node n) {
  for (int i = 0; i < n.n_src; ++i) {
    const NodeId s = n.src[static_cast<size_t>(i)];
    if (s < 0 || static_cast<size_t>(s) >= nodes_.size())
      fail("node {}: source {} does not exist", n.name, s);
  }
  return push(std::move(n));
}

const Node& Graph::src_node(NodeId id, const std::string& user) const {
  if (id < 0 || static_cast<size_t>(id) >= nodes_.size())
    fail("node {}: source id {} does not exist", user, id);
  return nodes_[static_cast<size_t>(id)];
}

NodeId Graph::input(InputKind kind, TensorType type, Shape ne, std::string name) {
  Node n;
  n.op = Op::Input;
  n.input = kind;
  n.type = type;
  n.ne = ne;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::weight(const WeightTensor& w) {
  Node n;
  n.op = Op::Weight;
  n.type = w.type;
  n.ne = w.ne;
  n.name = w.name;
  n.weight = &w;
  return push(std::move(n));
}

NodeId Graph::kv_region(int32_t layer, int32_t which, TensorType type, int64_t kv_dim, int64_t n_ctx) {
  Node n;
  n.op = Op::KvRegion;
  n.type = type;
  n.ne = {kv_dim, n_ctx, 1, 1};
  n.p.layer = layer;
  n.p.kv_which = which;
  n.name = fmt::format("cache_{}_l{}", which == 0 ? 'k' : 'v', layer);
  return push(std::move(n));
}

namespace {
// Broadcast rule of Add/Mul: b.ne[i] == a.ne[i] or b.ne[i] == 1.
void check_broadcast(const Node& a, const Node& b, const std::string& name) {
  for (int i = 0; i < 4; ++i)
    if (b.ne[i] != a.ne[i] && b.ne[i] != 1)
      fail("node {}: cannot broadcast {} {} onto {} {}", name, b.name, shape_str(b.ne), a.name,
           shape_str(a.ne));
  if (!is_float_activation(a) || !is_float_activation(b))
    fail("node {}: operands must be f32 ({} is {}, {} is {})", name, a.name, type_name(a.type),
         b.name, type_name(b.type));
}
}  // namespace

NodeId Graph::add(NodeId a, NodeId b, std::string name) {
  const Node& na = src_node(a, name);
  check_broadcast(na, src_node(b, name), name);
  Node n;
  n.op = Op::Add;
  n.ne = na.ne;
  n.src[0] = a;
  n.src[1] = b;
  n.n_src = 2;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::mul(NodeId a, NodeId b, std::string name) {
  const Node& na = src_node(a, name);
  check_broadcast(na, src_node(b, name), name);
  Node n;
  n.op = Op::Mul;
  n.ne = na.ne;
  n.src[0] = a;
  n.src[1] = b;
  n.n_src = 2;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::silu(NodeId a, std::string name) {
  Node n;
  n.op = Op::Silu;
  n.ne = src_node(a, name).ne;
  n.src[0] = a;
  n.n_src = 1;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::swiglu(NodeId gate, NodeId up, std::string name) {
  const Node& g = src_node(gate, name);
  const Node& u = src_node(up, name);
  if (g.ne != u.ne) fail("node {}: gate {} and up {} differ", name, shape_str(g.ne), shape_str(u.ne));
  Node n;
  n.op = Op::SwiGLU;
  n.ne = g.ne;
  n.src[0] = gate;
  n.src[1] = up;
  n.n_src = 2;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::rms_norm(NodeId a, NodeId w, float eps, std::string name) {
  const Node& na = src_node(a, name);
  const Node& nw = src_node(w, name);
  if (nw.n_elements() != na.ne[0] || nw.type != TensorType::F32)
    fail("node {}: norm weight {} must be f32 [{}], is {} {}", name, nw.name, na.ne[0],
         type_name(nw.type), shape_str(nw.ne));
  Node n;
  n.op = Op::RmsNorm;
  n.ne = na.ne;
  n.src[0] = a;
  n.src[1] = w;
  n.n_src = 2;
  n.p.eps = eps;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::qk_norm(NodeId a, NodeId w, int32_t head_dim, float eps, std::string name) {
  const Node& na = src_node(a, name);
  const Node& nw = src_node(w, name);
  if (head_dim <= 0 || na.ne[0] % head_dim != 0)
    fail("node {}: row length {} is not a multiple of head_dim {}", name, na.ne[0], head_dim);
  if (nw.n_elements() != head_dim || nw.type != TensorType::F32)
    fail("node {}: q/k norm weight {} must be f32 [{}], is {} {}", name, nw.name, head_dim,
         type_name(nw.type), shape_str(nw.ne));
  Node n;
  n.op = Op::QkNorm;
  n.ne = na.ne;
  n.src[0] = a;
  n.src[1] = w;
  n.n_src = 2;
  n.p.eps = eps;
  n.p.head_dim = head_dim;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::matmul(NodeId w, NodeId x, std::string name) {
  const Node& nw = src_node(w, name);
  const Node& nx = src_node(x, name);
  if (nw.ne[0] != nx.ne[0])
    fail("node {}: weight {} {} does not match input {} {} (ne0 {} vs {})", name, nw.name,
         shape_str(nw.ne), nx.name, shape_str(nx.ne), nw.ne[0], nx.ne[0]);
  if (nw.ne[2] != 1 || nw.ne[3] != 1)
    fail("node {}: weight {} must be 2-D, is {}", name, nw.name, shape_str(nw.ne));
  if (!is_float_activation(nx)) fail("node {}: input {} must be f32", name, nx.name);
  Node n;
  n.op = Op::MatMul;
  n.ne = {nw.ne[1], nx.ne[1], nx.ne[2], nx.ne[3]};
  n.src[0] = w;
  n.src[1] = x;
  n.n_src = 2;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::rope(NodeId a, NodeId pos, int32_t head_dim, int32_t n_rot, float theta,
                   std::string name, RopeConfig cfg, NodeId freq_factors) {
  const Node& na = src_node(a, name);
  const Node& np = src_node(pos, name);
  if (head_dim <= 0 || na.ne[0] % head_dim != 0 || n_rot <= 0 || n_rot > head_dim || n_rot % 2)
    fail("node {}: bad rope geometry (row {}, head_dim {}, n_rot {})", name, na.ne[0], head_dim, n_rot);
  if (np.type != TensorType::I32 || np.n_elements() != na.ne[1])
    fail("node {}: positions {} must be i32 [{}]", name, np.name, na.ne[1]);
  Node n;
  n.op = Op::Rope;
  n.ne = na.ne;
  n.src[0] = a;
  n.src[1] = pos;
  n.n_src = 2;
  n.p.head_dim = head_dim;
  n.p.n_rot = n_rot;
  n.p.rope_theta = theta;
  cfg.has_freq_factors = freq_factors != kNoNode;
  if (cfg.has_freq_factors) {
    const Node& nf = src_node(freq_factors, name);
    if (nf.type != TensorType::F32 || nf.n_elements() != n_rot / 2)
      fail("node {}: frequency factors {} must be f32 [{}] (n_rot / 2), not {} elements", name, nf.name,
           n_rot / 2, nf.n_elements());
    n.src[2] = freq_factors;
    n.n_src = 3;
  }
  if (!(cfg.freq_scale > 0.0f) || !std::isfinite(cfg.mscale) || !(cfg.ext_factor >= 0.0f))
    fail("node {}: bad rope scaling (freq_scale {}, ext_factor {}, mscale {})", name, cfg.freq_scale,
         cfg.ext_factor, cfg.mscale);
  n.p.rope = cfg;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::attn(NodeId q, NodeId k_region, NodeId v_region, NodeId pos, NodeId seq,
                   NodeId kv_pos, NodeId kv_seq, int32_t n_head, int32_t n_head_kv,
                   int32_t head_dim, int64_t n_kv, float scale_, std::string name, NodeId kv_bounds,
                   int32_t seq_tokens, int64_t seq_window) {
  const Node& nq = src_node(q, name);
  const Node& nk = src_node(k_region, name);
  const Node& nv = src_node(v_region, name);
  if (n_head <= 0 || n_head_kv <= 0 || n_head % n_head_kv != 0)
    fail("node {}: n_head {} is not a multiple of n_head_kv {}", name, n_head, n_head_kv);
  if (nq.ne[0] != static_cast<int64_t>(n_head) * head_dim)
    fail("node {}: q row {} != n_head {} x head_dim {}", name, nq.ne[0], n_head, head_dim);
  const int64_t kv_dim = static_cast<int64_t>(n_head_kv) * head_dim;
  if (nk.ne[0] != kv_dim || nv.ne[0] != kv_dim)
    fail("node {}: KV regions hold rows of {} / {}, expected {}", name, nk.ne[0], nv.ne[0], kv_dim);
  if (n_kv <= 0 || n_kv > nk.ne[1])
    fail("node {}: window of {} cells exceeds the {} cells of {}", name, n_kv, nk.ne[1], nk.name);
  for (NodeId id : {pos, seq}) {
    const Node& ni = src_node(id, name);
    if (ni.type != TensorType::I32 || ni.n_elements() != nq.ne[1])
      fail("node {}: {} must be i32 [{}]", name, ni.name, nq.ne[1]);
  }
  for (NodeId id : {kv_pos, kv_seq}) {
    const Node& ni = src_node(id, name);
    if (ni.type != TensorType::I32 || ni.n_elements() != n_kv)
      fail("node {}: {} must be i32 [{}]", name, ni.name, n_kv);
  }
  Node n;
  n.op = Op::Attn;
  n.ne = {nq.ne[0], nq.ne[1], 1, 1};
  if (kv_bounds != kNoNode) {
    const Node& nb = src_node(kv_bounds, name);
    if (nb.type != TensorType::I32 || nb.n_elements() != 2 * nq.ne[1])
      fail("node {}: {} must be i32 [{}]", name, nb.name, 2 * nq.ne[1]);
  }
  if (seq_tokens < 0 || seq_tokens > nq.ne[1])
    fail("node {}: seq_tokens {} is not in [0, {}]", name, seq_tokens, nq.ne[1]);
  if (seq_window < 0 || seq_window > n_kv) fail("node {}: seq_window {} is not in [0, {}]", name, seq_window, n_kv);
  n.src = {q, k_region, v_region, pos, seq, kv_pos, kv_seq, kv_bounds};
  n.n_src = kv_bounds != kNoNode ? 8 : 7;
  n.p.seq_tokens = seq_tokens;
  n.p.seq_window = kv_bounds != kNoNode ? seq_window : 0;
  n.p.n_head = n_head;
  n.p.n_head_kv = n_head_kv;
  n.p.head_dim = head_dim;
  n.p.n_kv = n_kv;
  n.p.scale = scale_;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::kv_store(NodeId src, NodeId region, NodeId cells, std::string name) {
  const Node& ns = src_node(src, name);
  const Node& nr = src_node(region, name);
  const Node& nc = src_node(cells, name);
  if (nr.op != Op::KvRegion) fail("node {}: {} is not a KV region", name, nr.name);
  if (ns.ne[0] != nr.ne[0]) fail("node {}: row {} != region row {}", name, ns.ne[0], nr.ne[0]);
  if (nc.type != TensorType::I32 || nc.n_elements() != ns.ne[1])
    fail("node {}: cells {} must be i32 [{}]", name, nc.name, ns.ne[1]);
  Node n;
  n.op = Op::KvcacheStore;
  n.type = nr.type;
  n.ne = nr.ne;
  n.src[0] = src;
  n.src[1] = region;
  n.src[2] = cells;
  n.n_src = 3;
  n.p.layer = nr.p.layer;
  n.p.kv_which = nr.p.kv_which;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::kv_load(NodeId region, int64_t n_kv, std::string name) {
  const Node& nr = src_node(region, name);
  if (n_kv <= 0 || n_kv > nr.ne[1]) fail("node {}: window {} exceeds {} cells", name, n_kv, nr.ne[1]);
  Node n;
  n.op = Op::KvcacheLoad;
  n.ne = {nr.ne[0], n_kv, 1, 1};
  n.src[0] = region;
  n.n_src = 1;
  n.p.n_kv = n_kv;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::view(NodeId a, uint64_t offset_bytes, Shape ne, std::string name) {
  const Node& na = src_node(a, name);
  Node n;
  n.op = Op::View;
  n.type = na.type;
  n.ne = ne;
  n.src[0] = a;
  n.n_src = 1;
  n.p.offset = offset_bytes;
  n.name = std::move(name);
  const NodeId id = push(std::move(n));
  const Node& nn = nodes_.back();
  if (offset_bytes + nn.nbytes() > na.nbytes())
    fail("node {}: view of {} bytes at offset {} runs past {} ({} bytes)", nn.name, nn.nbytes(),
         offset_bytes, na.name, na.nbytes());
  return id;
}

NodeId Graph::reshape(NodeId a, Shape ne, std::string name) {
  const Node& na = src_node(a, name);
  if (elements(ne) != na.n_elements())
    fail("node {}: cannot reshape {} {} to {}", name, na.name, shape_str(na.ne), shape_str(ne));
  Node n;
  n.op = Op::Reshape;
  n.type = na.type;
  n.ne = ne;
  n.src[0] = a;
  n.n_src = 1;
  n.name = std::move(name);
  return push(std::move(n));
}

NodeId Graph::get_rows(NodeId table, NodeId ids, std::string name) {
  const Node& nt = src_node(table, name);
  const Node& ni = src_node(ids, name);
  if (ni.type != TensorType::I32) fail("node {}: ids {} must be i32", name, ni.name);
  if (nt.ne[2] != 1 || nt.ne[3] != 1) fail("node {}: table {} must be 2-D", name, nt.name);
  Node n;
  n.op = Op::GetRows;
  n.ne = {nt.ne[0], ni.n_elements(), 1, 1};
  n.src[0] = table;
  n.src[1] = ids;
  n.n_src = 2;
  n.name = std::move(name);
  return push(std::move(n));
}

void Graph::mark_output(NodeId id) {
  node(id).is_output = true;
  outputs_.push_back(id);
}

NodeId Graph::find_input(InputKind kind) const {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].op == Op::Input && nodes_[i].input == kind && !nodes_[i].dead)
      return static_cast<NodeId>(i);
  return kNoNode;
}

std::vector<int> Graph::consumer_counts() const {
  std::vector<int> counts(nodes_.size(), 0);
  for (const Node& n : nodes_) {
    if (n.dead) continue;
    for (int i = 0; i < n.n_src; ++i) counts[static_cast<size_t>(n.src[static_cast<size_t>(i)])]++;
  }
  return counts;
}

void Graph::validate() const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.dead) continue;
    for (int s = 0; s < n.n_src; ++s) {
      const NodeId id = n.src[static_cast<size_t>(s)];
      if (id < 0 || static_cast<size_t>(id) >= i)
        fail("graph: node {} ({}) has source {} out of order", n.name, op_name(n.op), id);
      if (nodes_[static_cast<size_t>(id)].dead)
        fail("graph: node {} ({}) reads removed node {}", n.name, op_name(n.op),
             nodes_[static_cast<size_t>(id)].name);
    }
  }
}

}  // namespace minfer::graph
