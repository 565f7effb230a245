// The FusionPass rewrite rules for the device-only fused ops, checked on the graph alone (no
// execution): a backend that claims every fused op (a CPU backend with supports_fused
// overridden) must see residual Adds folded into MatMulAdd and FusedFFN and the q/k/v -> rope ->
// KV store chain folded into QkvBiasRopeStore, and nothing fused where the pattern does not
// hold; the CPU backend itself must keep the plain ops.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cpu/cpu_backend.h"
#include "fusion_test_util.h"
#include "graph/fusion.h"

namespace minfer::graph {
namespace {

using test::f32_weight;
using test::FusesEverything;

struct Weights {
  WeightTensor o = f32_weight("o", 8, 8), g = f32_weight("g", 8, 16), u = f32_weight("u", 8, 16),
               d = f32_weight("d", 16, 8), b = f32_weight("b", 8, 1);
};

/// x2 = x + o x ; x3 = x2 + d (silu(g x2) * u x2). `extra` adds a second reader of the o product.
Graph residual_graph(const Weights& w, bool extra, NodeId* x3_out) {
  Graph g;
  const NodeId x = g.input(InputKind::Other, TensorType::F32, {8, 2, 1, 1}, "x");
  const NodeId wo = g.weight(w.o), wg = g.weight(w.g), wu = g.weight(w.u), wd = g.weight(w.d);
  const NodeId po = g.matmul(wo, x, "attn_out");
  const NodeId x2 = g.add(po, x, "attn_resid");  // product first: either operand order fuses
  const NodeId act = g.mul(g.silu(g.matmul(wg, x2, "gate"), "silu"), g.matmul(wu, x2, "up"), "act");
  const NodeId x3 = g.add(x2, g.matmul(wd, act, "down"), "ffn_resid");
  g.mark_output(x3);
  if (extra) g.mark_output(g.silu(po, "another_reader"));
  *x3_out = x3;
  return g;
}

TEST(FusionRules, ResidualAddsFoldIntoMatMulAddAndFusedFfn) {
  const Weights w;
  NodeId x3;
  Graph g = residual_graph(w, false, &x3);
  FusesEverything be;
  Backend* bks[2] = {&be, nullptr};
  const FusionStats st = run_fusion_pass(g, bks);
  EXPECT_EQ(st.ffn, 1);
  EXPECT_EQ(st.residual, 2);
  const Node& resid = g.node(g.node(x3).src[0]);  // the first residual: the Add's slot, now MatMulAdd
  ASSERT_EQ(resid.op, Op::MatMulAdd);
  EXPECT_EQ(resid.name, "attn_resid");
  ASSERT_EQ(resid.n_src, 3);
  EXPECT_EQ(g.node(resid.src[0]).name, "o");
  EXPECT_EQ(g.node(resid.src[1]).name, "x");
  EXPECT_EQ(g.node(resid.src[2]).name, "x");
  const Node& out = g.node(x3);
  ASSERT_EQ(out.op, Op::FusedFFN);
  EXPECT_TRUE(out.is_output);
  ASSERT_EQ(out.n_src, 5);
  EXPECT_EQ(out.src[4], out.src[0]) << "the residual is the FFN's own input x2";
  int live_matmuls = 0, live_adds = 0;
  for (const Node& n : g.nodes()) {
    if (n.dead) continue;
    live_matmuls += n.op == Op::MatMul;
    live_adds += n.op == Op::Add;
  }
  EXPECT_EQ(live_matmuls, 0);
  EXPECT_EQ(live_adds, 0);
  g.validate();
}

TEST(FusionRules, AProductWithAnotherReaderOrABroadcastAddIsNotFused) {
  const Weights w;
  NodeId x3;
  Graph g = residual_graph(w, true, &x3);
  // A bias-shaped (broadcast) Add of a product: never a residual.
  const NodeId x = g.find_input(InputKind::Other);
  const NodeId pb = g.add(g.matmul(g.weight(w.o), x, "proj"), g.weight(w.b), "proj.bias");
  g.mark_output(pb);
  FusesEverything be;
  Backend* bks[2] = {&be, nullptr};
  const FusionStats st = run_fusion_pass(g, bks);
  EXPECT_EQ(st.residual, 1) << "only the FFN's residual";
  int matmul_add = 0;
  for (const Node& n : g.nodes()) matmul_add += !n.dead && n.op == Op::MatMulAdd;
  EXPECT_EQ(matmul_add, 0);
  EXPECT_EQ(g.node(pb).op, Op::Add);
}

TEST(FusionRules, TheCpuBackendKeepsThePlainAdds) {
  const Weights w;
  NodeId x3;
  Graph g = residual_graph(w, false, &x3);
  cpu::CpuBackend cpu(1);
  Backend* bks[2] = {&cpu, nullptr};
  const FusionStats st = run_fusion_pass(g, bks);
  EXPECT_EQ(st.ffn, 1);
  EXPECT_EQ(st.residual, 0);
  EXPECT_EQ(g.node(x3).op, Op::Add);
}

struct BlockWeights {
  WeightTensor q = f32_weight("q", 16, 16), k = f32_weight("k", 16, 8), v = f32_weight("v", 16, 8),
               bq = f32_weight("bq", 16, 1), bk = f32_weight("bk", 8, 1), bv = f32_weight("bv", 8, 1),
               qn = f32_weight("qn", 4, 1), kn = f32_weight("kn", 4, 1), ff = f32_weight("ff", 2, 1);
};

/// x -> q/k/v (+ biases, or q/k norms) -> rope -> KV stores -> attention (4 heads of 4, 2 KV
/// heads). `other_pos` ropes k with another positions input (not fusable).
/// `rope`: the q rope's config (the llama layout with frequency factors when has_freq_factors);
/// `k_rope`: the k rope's, when it should differ.
Graph block_graph(const BlockWeights& w, bool norm, bool other_pos, NodeId* attn, const RopeConfig& rope = {},
                  const RopeConfig* k_rope = nullptr) {
  Graph g;
  const NodeId x = g.input(InputKind::Other, TensorType::F32, {16, 2, 1, 1}, "x");
  const NodeId pos = g.input(InputKind::Positions, TensorType::I32, {2, 1, 1, 1}, "pos");
  const NodeId pos2 = g.input(InputKind::Other, TensorType::I32, {2, 1, 1, 1}, "pos2");
  const NodeId seq = g.input(InputKind::SeqIds, TensorType::I32, {2, 1, 1, 1}, "seq");
  const NodeId cells = g.input(InputKind::KvCells, TensorType::I32, {2, 1, 1, 1}, "cells");
  const NodeId kvp = g.input(InputKind::KvPos, TensorType::I32, {32, 1, 1, 1}, "kv_pos");
  const NodeId kvs = g.input(InputKind::KvSeq, TensorType::I32, {32, 1, 1, 1}, "kv_seq");
  const NodeId wq = g.weight(w.q), wk = g.weight(w.k), wv = g.weight(w.v);
  const NodeId bq = g.weight(w.bq), bk = g.weight(w.bk), bv = g.weight(w.bv);
  const NodeId qn = g.weight(w.qn), kn = g.weight(w.kn);
  const NodeId kr = g.kv_region(0, 0, TensorType::F16, 8, 32), vr = g.kv_region(0, 1, TensorType::F16, 8, 32);
  const auto proj = [&](NodeId wm, NodeId b, const char* name) {
    NodeId y = g.matmul(wm, x, name);
    if (!norm) y = g.add(y, b, std::string(name) + ".bias");
    return g.reshape(y, g.node(y).ne, std::string(name) + ".out");
  };
  NodeId q = proj(wq, bq, "q"), k = proj(wk, bk, "k");
  const NodeId v = proj(wv, bv, "v");
  if (norm) {
    q = g.qk_norm(q, qn, 4, 1e-6f, "q_norm");
    k = g.qk_norm(k, kn, 4, 1e-6f, "k_norm");
  }
  const NodeId ff = rope.has_freq_factors ? g.weight(w.ff) : kNoNode;
  const RopeConfig& kr_cfg = k_rope ? *k_rope : rope;
  q = g.rope(q, pos, 4, 4, 1e6f, "rope_q", rope, ff);
  k = g.rope(k, other_pos ? pos2 : pos, 4, 4, 1e6f, "rope_k", kr_cfg, kr_cfg.has_freq_factors ? ff : kNoNode);
  const NodeId sk = g.kv_store(k, kr, cells, "store_k"), sv = g.kv_store(v, vr, cells, "store_v");
  *attn = g.attn(q, sk, sv, pos, seq, kvp, kvs, 4, 2, 4, 32, 0.5f, "attn");
  g.mark_output(*attn);
  return g;
}

TEST(FusionRules, TheQkvRopeStoreChainBecomesOneOpAndTheAttnReadsTheRegions) {
  const BlockWeights w;
  for (bool norm : {false, true}) {
    NodeId attn;
    Graph g = block_graph(w, norm, false, &attn);
    FusesEverything be;
    Backend* bks[2] = {&be, nullptr};
    const FusionStats st = run_fusion_pass(g, bks);
    EXPECT_EQ(st.qkv, 1);
    EXPECT_EQ(st.rope_store, 1) << (norm ? "norms" : "biases");
    const Node& a = g.node(attn);
    EXPECT_EQ(g.node(a.src[1]).op, Op::KvRegion);
    EXPECT_EQ(g.node(a.src[2]).op, Op::KvRegion);
    const Node& rs = g.node(a.src[0]);
    ASSERT_EQ(rs.op, Op::QkvBiasRopeStore);
    EXPECT_EQ(rs.name, "rope_q");
    EXPECT_EQ(g.node(rs.src[0]).op, Op::FusedQKV);
    EXPECT_EQ(g.node(rs.src[0]).p.has_bias, !norm) << "the biases stay in the FusedQKV";
    EXPECT_EQ(rs.src[1], a.src[1]);
    EXPECT_EQ(rs.src[2], a.src[2]);
    EXPECT_EQ(g.node(rs.src[3]).name, "pos");
    EXPECT_EQ(g.node(rs.src[4]).name, "cells");
    EXPECT_EQ(rs.p.head_dim, 4);
    EXPECT_EQ(rs.p.n_rot, 4);
    EXPECT_EQ(rs.p.n_head, 4);
    EXPECT_EQ(rs.p.n_head_kv, 2);
    EXPECT_EQ(rs.p.has_qk_norm, norm);
    EXPECT_EQ(rs.n_src, norm ? 7 : 5);
    if (norm) {
      EXPECT_EQ(g.node(rs.src[5]).name, "qn");
      EXPECT_EQ(g.node(rs.src[6]).name, "kn");
      EXPECT_EQ(rs.p.eps, 1e-6f);
    }
    for (const Node& n : g.nodes()) {
      if (n.dead) continue;
      EXPECT_NE(n.op, Op::Rope);
      EXPECT_NE(n.op, Op::KvcacheStore);
      EXPECT_NE(n.op, Op::QkNorm);
      EXPECT_NE(n.op, Op::View) << n.name << ": the q/k/v planes are read by the fused op only";
    }
  }
}

TEST(FusionRules, TheFusedRopeStoreKeepsTheLlamaRopeConfigAndTheFrequencyFactorsLast) {
  const BlockWeights w;
  RopeConfig llama;
  llama.layout = RopeLayout::Normal;
  llama.has_freq_factors = true;
  llama.freq_scale = 0.25f;
  for (bool norm : {false, true}) {
    NodeId attn;
    Graph g = block_graph(w, norm, false, &attn, llama);
    FusesEverything be;
    Backend* bks[2] = {&be, nullptr};
    EXPECT_EQ(run_fusion_pass(g, bks).rope_store, 1);
    const Node& rs = g.node(g.node(attn).src[0]);
    ASSERT_EQ(rs.op, Op::QkvBiasRopeStore);
    EXPECT_TRUE(rs.p.rope == llama);
    EXPECT_EQ(rs.n_src, norm ? 8 : 6);
    EXPECT_EQ(g.node(rs.src[rs.n_src - 1]).name, "ff");
  }
  // q and k roped differently: no fusion (the fused op has one config).
  RopeConfig other = llama;
  other.layout = RopeLayout::Neox;
  NodeId attn;
  Graph g = block_graph(w, false, false, &attn, llama, &other);
  FusesEverything be;
  Backend* bks[2] = {&be, nullptr};
  EXPECT_EQ(run_fusion_pass(g, bks).rope_store, 0);
}

TEST(FusionRules, TheCpuBackendKeepsTheRopesAndKvStores) {
  const BlockWeights w;
  for (bool norm : {false, true}) {
    NodeId attn;
    Graph g = block_graph(w, norm, false, &attn);
    cpu::CpuBackend cpu(1);
    Backend* bks[2] = {&cpu, nullptr};
    const FusionStats st = run_fusion_pass(g, bks);
    EXPECT_EQ(st.qkv, 1) << "the CPU fuses q/k/v";
    EXPECT_EQ(st.rope_store, 0);
    EXPECT_EQ(st.residual, 0);
    const Node& a = g.node(attn);
    EXPECT_EQ(g.node(a.src[0]).op, Op::Rope);
    EXPECT_EQ(g.node(a.src[1]).op, Op::KvcacheStore);
    EXPECT_EQ(g.node(a.src[2]).op, Op::KvcacheStore);
    for (const Node& n : g.nodes()) {
      if (n.dead) continue;
      EXPECT_NE(n.op, Op::QkvBiasRopeStore);
      EXPECT_NE(n.op, Op::MatMulAdd);
    }
  }
}

TEST(FusionRules, RopesOfDifferentPositionsAreNotFused) {
  const BlockWeights w;
  NodeId attn;
  Graph g = block_graph(w, false, true, &attn);
  FusesEverything be;
  Backend* bks[2] = {&be, nullptr};
  const FusionStats st = run_fusion_pass(g, bks);
  EXPECT_EQ(st.qkv, 1);
  EXPECT_EQ(st.rope_store, 0);
  EXPECT_EQ(g.node(g.node(attn).src[0]).op, Op::Rope);
  EXPECT_EQ(g.node(g.node(attn).src[1]).op, Op::KvcacheStore);
}

}  // namespace
}  // namespace minfer::graph
