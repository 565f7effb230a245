#include "models/qwen_graph.h"

#include <cmath>

#include "core/error.h"

namespace minfer {

using graph::Graph;
using graph::InputKind;
using graph::NodeId;

namespace {

// The weights of one decoder layer, declared as graph leaves before any of the layer's ops
// (so the FusionPass can rewrite the projections in place).
struct LayerWeights {
  NodeId attn_norm, wq, wk, wv, wo, bq = graph::kNoNode, bk = graph::kNoNode, bv = graph::kNoNode;
  NodeId q_norm = graph::kNoNode, k_norm = graph::kNoNode;
  NodeId ffn_norm, w_gate, w_up, w_down;
};

LayerWeights declare_layer(Graph& g, const Model& m, int64_t l) {
  const HParams& h = m.hparams();
  const std::string p = "blk." + std::to_string(l) + ".";
  const auto w = [&](const char* name) { return g.weight(m.weight(p + name)); };
  LayerWeights lw{};
  lw.attn_norm = w("attn_norm.weight");
  lw.wq = w("attn_q.weight");
  lw.wk = w("attn_k.weight");
  lw.wv = w("attn_v.weight");
  if (h.has_qkv_bias) {
    lw.bq = w("attn_q.bias");
    lw.bk = w("attn_k.bias");
    lw.bv = w("attn_v.bias");
  }
  if (h.has_qk_norm) {
    lw.q_norm = w("attn_q_norm.weight");
    lw.k_norm = w("attn_k_norm.weight");
  }
  lw.wo = w("attn_output.weight");
  lw.ffn_norm = w("ffn_norm.weight");
  lw.w_gate = w("ffn_gate.weight");
  lw.w_up = w("ffn_up.weight");
  lw.w_down = w("ffn_down.weight");
  return lw;
}

// y = W x (+ b), viewed as [dim, n_tokens].
NodeId projection(Graph& g, NodeId w, NodeId b, NodeId x, const std::string& name) {
  NodeId y = g.matmul(w, x, name);
  if (b != graph::kNoNode) y = g.add(y, b, name + ".bias");
  const graph::Shape s = g.node(y).ne;
  return g.reshape(y, s, name + ".out");
}

}  // namespace

Graph build_model_graph(const Model& model, const graph::GraphParams& gp, int64_t n_ctx, ModelGraphIO* io) {
  const HParams& h = model.hparams();
  const int64_t nt = gp.n_tokens;
  if (nt <= 0) fail("graph: n_tokens = {} must be positive", nt);
  if (gp.n_outputs <= 0 || gp.n_outputs > nt) fail("graph: n_outputs = {} not in [1, {}]", gp.n_outputs, nt);
  if (gp.n_kv <= 0 || gp.n_kv > n_ctx) fail("graph: KV window {} not in [1, {}]", gp.n_kv, n_ctx);

  Graph g;
  ModelGraphIO in;
  in.tokens = g.input(InputKind::TokenIds, TensorType::I32, {nt, 1, 1, 1}, "inp_tokens");
  in.positions = g.input(InputKind::Positions, TensorType::I32, {nt, 1, 1, 1}, "inp_pos");
  in.seq_ids = g.input(InputKind::SeqIds, TensorType::I32, {nt, 1, 1, 1}, "inp_seq");
  in.kv_cells = g.input(InputKind::KvCells, TensorType::I32, {nt, 1, 1, 1}, "inp_kv_cells");
  in.kv_pos = g.input(InputKind::KvPos, TensorType::I32, {gp.n_kv, 1, 1, 1}, "inp_kv_pos");
  in.kv_seq = g.input(InputKind::KvSeq, TensorType::I32, {gp.n_kv, 1, 1, 1}, "inp_kv_seq");
  // Per-token cell bounds: asked for by a non-zero seq_window (the engine always gives one); the
  // attention node checks the hints' ranges.
  if (gp.seq_window > 0)
    in.kv_bounds = g.input(InputKind::KvBounds, TensorType::I32, {2 * nt, 1, 1, 1}, "inp_kv_bounds");
  if (gp.n_outputs < nt)
    in.out_ids = g.input(InputKind::OutIds, TensorType::I32, {gp.n_outputs, 1, 1, 1}, "inp_out_ids");

  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(h.head_dim));
  const auto rope_theta = h.rope_theta;
  // Llama 3.1: one f32 [n_rot / 2] tensor of frequency divisors shared by every layer.
  const NodeId rope_freqs = h.has_rope_freqs ? g.weight(model.weight("rope_freqs.weight")) : graph::kNoNode;
  const auto rope = [&](NodeId t, const std::string& name) {
    return g.rope(t, in.positions, static_cast<int32_t>(h.head_dim), static_cast<int32_t>(h.n_rot), rope_theta,
                  name, h.rope, rope_freqs);
  };

  // x = embd[tokens]                                               [n_embd, nt]
  NodeId x = g.get_rows(g.weight(model.weight("token_embd.weight")), in.tokens, "inp_embd");

  for (int64_t l = 0; l < h.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const LayerWeights w = declare_layer(g, model, l);
    const NodeId k_region = g.kv_region(static_cast<int32_t>(l), 0, gp.kv_type, h.kv_dim(), n_ctx);
    const NodeId v_region = g.kv_region(static_cast<int32_t>(l), 1, gp.kv_type, h.kv_dim(), n_ctx);

    // Attention block.
    NodeId hN = g.rms_norm(x, w.attn_norm, h.rms_eps, p + "attn_norm");      // [n_embd, nt]
    NodeId q = projection(g, w.wq, w.bq, hN, p + "attn_q");                  // [q_dim, nt]
    NodeId k = projection(g, w.wk, w.bk, hN, p + "attn_k");                  // [kv_dim, nt]
    NodeId v = projection(g, w.wv, w.bv, hN, p + "attn_v");                  // [kv_dim, nt]
    if (h.has_qk_norm) {
      q = g.qk_norm(q, w.q_norm, static_cast<int32_t>(h.head_dim), h.rms_eps, p + "attn_q_norm");
      k = g.qk_norm(k, w.k_norm, static_cast<int32_t>(h.head_dim), h.rms_eps, p + "attn_k_norm");
    }
    q = rope(q, p + "rope_q");                                                 // h.rope: layout, scaling
    k = rope(k, p + "rope_k");
    const NodeId k_cache = g.kv_store(k, k_region, in.kv_cells, p + "store_k");
    const NodeId v_cache = g.kv_store(v, v_region, in.kv_cells, p + "store_v");
    NodeId a = g.attn(q, k_cache, v_cache, in.positions, in.seq_ids, in.kv_pos, in.kv_seq,
                      static_cast<int32_t>(h.n_head), static_cast<int32_t>(h.n_head_kv),
                      static_cast<int32_t>(h.head_dim), gp.n_kv, kq_scale, p + "attn", in.kv_bounds,
                      gp.seq_tokens, gp.seq_window);  // [q_dim, nt]
    a = g.matmul(w.wo, a, p + "attn_out");                                   // [n_embd, nt]
    if (l == h.n_layer - 1 && in.out_ids != graph::kNoNode) {
      // Only the output rows go on: drop the others before the last FFN.
      a = g.get_rows(a, in.out_ids, p + "attn_out_rows");
      x = g.get_rows(x, in.out_ids, p + "resid_rows");
    }
    x = g.add(x, a, p + "attn_resid");

    // Feed-forward block (SwiGLU).
    hN = g.rms_norm(x, w.ffn_norm, h.rms_eps, p + "ffn_norm");
    const NodeId gate = g.matmul(w.w_gate, hN, p + "ffn_gate");              // [n_ff, nt]
    const NodeId up = g.matmul(w.w_up, hN, p + "ffn_up");                    // [n_ff, nt]
    const NodeId act = g.mul(g.silu(gate, p + "ffn_silu"), up, p + "ffn_act");
    x = g.add(x, g.matmul(w.w_down, act, p + "ffn_down"), p + "ffn_resid");  // [n_embd, nt]
  }

  x = g.rms_norm(x, g.weight(model.weight("output_norm.weight")), h.rms_eps, "output_norm");
  in.logits = g.matmul(g.weight(model.output_weight()), x, "logits");        // [n_vocab, n_out]
  g.mark_output(in.logits);
  if (io) *io = in;
  return g;
}

}  // namespace minfer
