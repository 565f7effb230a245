// The compute graph IR: a list of nodes in topological order (a node's sources always come
// before it). Builders (src/models) create nodes through the typed helpers below, which check
// shapes and throw minfer::Error naming the node. Topology is a function of GraphParams alone:
// token ids, positions, KV cell indices are Input nodes, never structure.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/types.h"
#include "graph/op.h"
#include "graph/rope_math.h"

namespace minfer::graph {

using NodeId = int32_t;
inline constexpr NodeId kNoNode = -1;
inline constexpr int kMaxSrc = 8;
using Shape = std::array<int64_t, 4>;  ///< ggml order, unused dims are 1

enum class BackendKind : uint8_t { Cpu = 0, Cuda = 1 };
std::string_view backend_name(BackendKind k);

/// A model tensor as the graph sees it: name, file type, shape, bytes in place (host memory;
/// a device backend looks its own copy up by name).
struct WeightTensor {
  std::string name;
  TensorType type = TensorType::F32;
  Shape ne{1, 1, 1, 1};
  int n_dims = 1;
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  /// True when `data` lies in a read-only file mapping (GgufFile::open): a backend that keeps its
  /// own copy may drop those pages (madvise MADV_DONTNEED), and a later read brings them back from
  /// the file. False for heap or anonymous memory (GgufFile::open_memory, tests), where dropping
  /// a page would zero it. Reset it when pointing a copy's `data` at other memory.
  bool file_mapped = false;
};

/// What an Input node carries; the engine fills each kind before execution.
enum class InputKind : uint8_t {
  TokenIds,   ///< i32 [n_tokens]
  Positions,  ///< i32 [n_tokens] position of each token in its sequence
  SeqIds,     ///< i32 [n_tokens] sequence of each token
  KvCells,    ///< i32 [n_tokens] KV cell each token's K/V row is stored in
  KvPos,      ///< i32 [n_kv] position held by each cell of the window, -1 for an empty cell
  KvSeq,      ///< i32 [n_kv] sequence of each cell of the window
  KvBounds,   ///< i32 [2 * n_tokens]: per token the cells [lo, hi) outside which it sees none
  OutIds,     ///< i32 [n_outputs] which token rows produce logits
  Other,      ///< tests
};

// ---- Fused ops --------------------------------------------------------------------------------
// Created only by the FusionPass (fusion.h), and only for nodes whose backend answers
// supports_fused(op); each equals the chain of plain ops it replaces (bitwise, where the
// backend's kernels promise it). Sources in order:
//   FusedQKV   x [k, n], Wq, Wk, Wv [, bq, bk, bv] (p.has_bias): output planar
//              [q rows * n | k rows * n | v rows * n], each plane [dim, n]; = MatMul (+ Add bias).
//   FusedFFN   x [k, n], Wgate, Wup, Wdown [, r [n_embd, n]]: Wdown^T (silu(Wgate^T x) *
//              (Wup^T x)) [+ r] (with r: the residual Add(r, ffn) that consumed it, as r + ffn).
//   FusedQKV / FusedFFN with p.has_norm: x is the input of the RmsNorm that fed them (folded by
//              the FusionPass) and one more source comes last, that norm's weight w [k] (p.eps):
//              the op reads RmsNorm(x, w, p.eps) where the plain op reads x.
//   MatMulAdd  W [k, m], x [k, n], r [m, n]: r + W^T x (the Add(r, MatMul(W, x)) it replaces;
//              r and the product have the same shape, no broadcast).
//   QkvBiasRopeStore  qkv (a FusedQKV output, biases already added), K region, V region,
//              pos [n] (i32), cells [n] (i32) [, q_norm w, k_norm w (p.has_qk_norm)]
//              [, freq factors f32 [n_rot/2] (p.rope.has_freq_factors), always last]: per token,
//              the q and k heads (QkNorm with p.eps first when has_qk_norm), Rope (p.head_dim,
//              p.n_rot, p.rope_theta, p.rope) of q and k, K and V rows stored at cells[t] (KvcacheStore);
//              output: the rotated q [p.n_head * head_dim, n]. Heads: p.n_head q, p.n_head_kv
//              k and v. The Attn that read the stores reads the regions directly afterwards
//              (ordered after this node through q).

/// Op parameters; each op reads the fields its doc names.
struct NodeParams {
  float eps = 0.0f;          ///< RmsNorm, QkNorm, FusedQKV/FusedFFN with has_norm
  float scale = 1.0f;        ///< Attn (usually 1/sqrt(head_dim))
  float rope_theta = 0.0f;   ///< Rope, QkvBiasRopeStore: frequency base
  int32_t n_rot = 0;         ///< Rope: rotated dims per head (= head_dim for Qwen)
  RopeConfig rope;           ///< Rope, QkvBiasRopeStore: layout, scaling, freq factors (rope_math.h)
  int32_t n_head = 0;        ///< Attn, FusedQKV...: query heads
  int32_t n_head_kv = 0;     ///< Attn...: KV heads (GQA: n_head % n_head_kv == 0)
  int32_t head_dim = 0;
  int32_t layer = -1;        ///< KvRegion and KV ops: layer index
  int32_t kv_which = 0;      ///< KvRegion: 0 = K, 1 = V
  int64_t n_kv = 0;          ///< Attn, KvcacheLoad: cells in the attention window
  int32_t seq_tokens = 0;    ///< Attn: most tokens of one sequence in the op (0: all n tokens)
  int64_t seq_window = 0;    ///< Attn with kv bounds: at least every token's hi - lo (0: n_kv)
  uint64_t offset = 0;       ///< View: byte offset into src0
  bool has_bias = false;     ///< FusedQKV
  bool has_norm = false;     ///< FusedQKV, FusedFFN: RmsNorm folded in ("Fused ops"; p.eps)
  bool has_qk_norm = false;  ///< QkvBiasRopeStore: sources 5, 6 are the q and k norm weights
};

struct Node {
  Op op = Op::Input;
  TensorType type = TensorType::F32;  ///< element type of this node's output
  Shape ne{1, 1, 1, 1};
  std::array<NodeId, kMaxSrc> src{kNoNode, kNoNode, kNoNode, kNoNode,
                                  kNoNode, kNoNode, kNoNode, kNoNode};
  uint8_t n_src = 0;
  NodeParams p;
  std::string name;
  InputKind input = InputKind::Other;   ///< Input nodes
  const WeightTensor* weight = nullptr;  ///< Weight nodes (owned by the model)
  BackendKind backend = BackendKind::Cpu;
  bool is_output = false;  ///< read back by the engine after execution
  bool dead = false;       ///< removed by a pass; skipped when allocating and executing

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  /// Bytes of this node's output (block layout of `type`; throws for an unsupported type).
  uint64_t nbytes() const;
};

/// Key of a prepared graph: everything the topology depends on.
struct GraphParams {
  int32_t n_tokens = 1;      ///< tokens in this ubatch
  int32_t n_outputs = 1;     ///< rows that produce logits (n_tokens for all, 1 for the last)
  int64_t n_kv = 256;        ///< attention window (cells), a multiple of the window granule
  /// Most tokens of one sequence in this ubatch (0: n_tokens). A decode step of several
  /// sequences has 1: its attention can take the one-token kernels for every token.
  int32_t seq_tokens = 0;
  /// Cells of the widest per-token bounds [lo, hi) (the KvBounds input), a multiple of the window
  /// granule, at most n_kv (0: n_kv). Attention kernels may split this span instead of the window.
  int64_t seq_window = 0;
  TensorType kv_type = TensorType::F32;
  bool operator==(const GraphParams&) const = default;
};

class Graph {
 public:
  Graph();

  // ---- leaves ----
  NodeId input(InputKind kind, TensorType type, Shape ne, std::string name);
  NodeId weight(const WeightTensor& w);
  /// A persistent KV region of layer `layer`: [kv_dim, n_ctx] elements of `type`.
  NodeId kv_region(int32_t layer, int32_t which, TensorType type, int64_t kv_dim, int64_t n_ctx);

  // ---- elementwise ----
  NodeId add(NodeId a, NodeId b, std::string name);
  NodeId mul(NodeId a, NodeId b, std::string name);
  NodeId silu(NodeId a, std::string name);
  NodeId swiglu(NodeId gate, NodeId up, std::string name);

  // ---- norms, matmul, rope ----
  NodeId rms_norm(NodeId a, NodeId w, float eps, std::string name);
  /// a [head_dim * n_head, n] viewed as heads; w [head_dim].
  NodeId qk_norm(NodeId a, NodeId w, int32_t head_dim, float eps, std::string name);
  NodeId matmul(NodeId w, NodeId x, std::string name);
  /// a [head_dim * n_head, n]; pos i32 [n]; rotation of the first n_rot dims of each head in
  /// cfg.layout, angles by rope_math.h. `freq_factors`: a f32 [n_rot / 2] node of frequency
  /// divisors (Llama-3.1 rope_freqs.weight) or kNoNode; it sets cfg.has_freq_factors.
  NodeId rope(NodeId a, NodeId pos, int32_t head_dim, int32_t n_rot, float theta, std::string name,
              RopeConfig cfg = {}, NodeId freq_factors = kNoNode);

  // ---- attention and KV ----
  /// Causal GQA attention of q [head_dim * n_head, n] over cells [0, n_kv) of the K and V
  /// regions. A cell c is visible to token t when kv_pos[c] >= 0, kv_seq[c] == seq[t] and
  /// kv_pos[c] <= pos[t]. Output [head_dim * n_head, n].
  /// Optional hints that change no result: `kv_bounds` (i32 [2 * n], source 7) gives per token
  /// cells [lo, hi), 0 <= lo <= hi <= n_kv, that hold every cell it sees, with hi - lo <=
  /// `seq_window` (0: n_kv); `seq_tokens` is the most tokens of one sequence among the n (0: n).
  /// Throws minfer::Error for shapes or hints that do not fit.
  NodeId attn(NodeId q, NodeId k_region, NodeId v_region, NodeId pos, NodeId seq, NodeId kv_pos,
              NodeId kv_seq, int32_t n_head, int32_t n_head_kv, int32_t head_dim, int64_t n_kv,
              float scale, std::string name, NodeId kv_bounds = kNoNode, int32_t seq_tokens = 0,
              int64_t seq_window = 0);
  /// Stores rows of src [kv_dim, n] into `region` at cells (i32 [n]); converts f32 to the
  /// region's type. Output aliases the region (a dependency token for later readers).
  NodeId kv_store(NodeId src, NodeId region, NodeId cells, std::string name);
  NodeId kv_load(NodeId region, int64_t n_kv, std::string name);

  // ---- layout ----
  NodeId view(NodeId a, uint64_t offset_bytes, Shape ne, std::string name);
  NodeId reshape(NodeId a, Shape ne, std::string name);
  NodeId get_rows(NodeId table, NodeId ids, std::string name);

  /// Appends a node built by a pass (fused ops); sources must already exist.
  NodeId append(Node n);

  void mark_output(NodeId id);

  const Node& node(NodeId id) const { return nodes_.at(static_cast<size_t>(id)); }
  Node& node(NodeId id) { return nodes_.at(static_cast<size_t>(id)); }
  size_t size() const { return nodes_.size(); }
  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Node>& nodes() { return nodes_; }
  const std::vector<NodeId>& outputs() const { return outputs_; }

  /// The Input node of a kind (first one), or kNoNode.
  NodeId find_input(InputKind kind) const;

  /// Unique id of this graph instance (process-wide counter): keys captured device graphs.
  uint64_t uid() const { return uid_; }

  /// Number of live consumers of each node (dead nodes excluded), indexed by NodeId.
  std::vector<int> consumer_counts() const;

  /// Checks every live node's sources exist, come earlier, and are live. Throws on violation.
  void validate() const;

 private:
  NodeId push(Node n);
  const Node& src_node(NodeId id, const std::string& user) const;

  std::vector<Node> nodes_;
  std::vector<NodeId> outputs_;
  uint64_t uid_;
};

}  // namespace minfer::graph
