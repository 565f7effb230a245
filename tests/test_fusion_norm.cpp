// The FusionPass rule that folds an RmsNorm into the FusedQKV / FusedFFN reading it (has_norm),
// checked on the graph alone: a backend that claims every fused op must see both norms of a
// layer folded (input x as source 0, the norm weight as the last source, eps carried over); a
// norm with another reader and the CPU backend keep the RmsNorm.
#include <gtest/gtest.h>

#include <string>

#include "cpu/cpu_backend.h"
#include "fusion_test_util.h"
#include "graph/fusion.h"

namespace minfer::graph {
namespace {

using test::f32_weight;
using test::FusesEverything;

struct LayerWeights {
  WeightTensor q = f32_weight("q", 8, 8), k = f32_weight("k", 8, 4), v = f32_weight("v", 8, 4),
               o = f32_weight("o", 8, 8), g = f32_weight("g", 8, 16), u = f32_weight("u", 8, 16),
               d = f32_weight("d", 16, 8), n1 = f32_weight("attn_norm", 8, 1), n2 = f32_weight("ffn_norm", 8, 1);
};

struct Layer {
  NodeId qkv_tail = kNoNode;  ///< the q projection's Reshape (a View of the FusedQKV afterwards)
  NodeId out = kNoNode;       ///< x3, the FusedFFN (+ residual) afterwards
  NodeId norm1 = kNoNode;
};

/// h = norm1(x) -> q/k/v; x2 = x + o q; x3 = x2 + d (silu(g h2) * u h2), h2 = norm2(x2).
/// `norm_read_twice` marks h as an output too (a second reader).
Graph layer_graph(const LayerWeights& w, bool norm_read_twice, Layer* l) {
  Graph g;
  const NodeId x = g.input(InputKind::Other, TensorType::F32, {8, 2, 1, 1}, "x");
  const NodeId wq = g.weight(w.q), wk = g.weight(w.k), wv = g.weight(w.v), wo = g.weight(w.o);
  const NodeId wg = g.weight(w.g), wu = g.weight(w.u), wd = g.weight(w.d);
  const NodeId n1 = g.weight(w.n1), n2 = g.weight(w.n2);
  const NodeId h = g.rms_norm(x, n1, 1e-6f, "attn_norm.out");
  l->norm1 = h;
  const auto proj = [&](NodeId wm, const char* name) {
    const NodeId y = g.matmul(wm, h, name);
    return g.reshape(y, g.node(y).ne, std::string(name) + ".out");
  };
  const NodeId q = proj(wq, "q");
  const NodeId k = proj(wk, "k");
  const NodeId v = proj(wv, "v");
  l->qkv_tail = q;
  const NodeId x2 = g.add(x, g.matmul(wo, q, "attn_out"), "attn_resid");
  const NodeId h2 = g.rms_norm(x2, n2, 1e-5f, "ffn_norm.out");
  const NodeId act = g.mul(g.silu(g.matmul(wg, h2, "gate"), "silu"), g.matmul(wu, h2, "up"), "act");
  l->out = g.add(x2, g.matmul(wd, act, "down"), "ffn_resid");
  for (NodeId o : {l->out, k, v}) g.mark_output(o);
  if (norm_read_twice) g.mark_output(h);
  return g;
}

int live(const Graph& g, Op op) {
  int c = 0;
  for (const Node& n : g.nodes()) c += !n.dead && n.op == op;
  return c;
}

TEST(FusionNorm, BothNormsOfALayerFoldIntoTheFusedQkvAndFfnThatReadThem) {
  const LayerWeights w;
  Layer l;
  Graph g = layer_graph(w, false, &l);
  FusesEverything be;
  Backend* bks[2] = {&be, nullptr};
  const FusionStats st = run_fusion_pass(g, bks);
  EXPECT_EQ(st.qkv, 1);
  EXPECT_EQ(st.ffn, 1);
  EXPECT_EQ(st.norm, 2);
  EXPECT_EQ(live(g, Op::RmsNorm), 0);

  const Node& view = g.node(l.qkv_tail);
  ASSERT_EQ(view.op, Op::View);
  const Node& qkv = g.node(view.src[0]);
  ASSERT_EQ(qkv.op, Op::FusedQKV);
  EXPECT_TRUE(qkv.p.has_norm);
  EXPECT_EQ(qkv.p.eps, 1e-6f);
  ASSERT_EQ(qkv.n_src, 5) << "x, Wq, Wk, Wv, norm weight";
  EXPECT_EQ(g.node(qkv.src[0]).name, "x");
  EXPECT_EQ(g.node(qkv.src[4]).name, "attn_norm");

  const Node& ffn = g.node(l.out);
  ASSERT_EQ(ffn.op, Op::FusedFFN);
  EXPECT_TRUE(ffn.p.has_norm);
  EXPECT_EQ(ffn.p.eps, 1e-5f);
  ASSERT_EQ(ffn.n_src, 6) << "x2, Wg, Wu, Wd, residual, norm weight";
  EXPECT_EQ(g.node(ffn.src[0]).name, "attn_resid");
  EXPECT_EQ(ffn.src[4], ffn.src[0]) << "the residual is the norm's input x2";
  EXPECT_EQ(g.node(ffn.src[5]).name, "ffn_norm");
  g.validate();
}

TEST(FusionNorm, ANormWithAnotherReaderStays) {
  const LayerWeights w;
  Layer l;
  Graph g = layer_graph(w, true, &l);
  FusesEverything be;
  Backend* bks[2] = {&be, nullptr};
  const FusionStats st = run_fusion_pass(g, bks);
  EXPECT_EQ(st.norm, 1) << "only the FFN's norm";
  EXPECT_EQ(g.node(l.norm1).op, Op::RmsNorm);
  EXPECT_FALSE(g.node(l.norm1).dead);
  const Node& qkv = g.node(g.node(l.qkv_tail).src[0]);
  ASSERT_EQ(qkv.op, Op::FusedQKV);
  EXPECT_FALSE(qkv.p.has_norm);
  EXPECT_EQ(qkv.src[0], l.norm1);
}

TEST(FusionNorm, TheCpuBackendKeepsTheNorms) {
  const LayerWeights w;
  Layer l;
  Graph g = layer_graph(w, false, &l);
  cpu::CpuBackend cpu(1);
  Backend* bks[2] = {&cpu, nullptr};
  const FusionStats st = run_fusion_pass(g, bks);
  EXPECT_EQ(st.norm, 0);
  EXPECT_EQ(live(g, Op::RmsNorm), 2);
  for (const Node& n : g.nodes()) EXPECT_FALSE(!n.dead && n.p.has_norm) << n.name;
}

}  // namespace
}  // namespace minfer::graph
