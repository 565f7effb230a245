// The FusionPass on the CUDA backend: a decoder-layer-shaped graph (norm, q/k/v projections with
// biases, output projection + residual, SwiGLU FFN + residual) run with and without fusion on the
// device. The fused ops (FusedQKV in one launch per activation family, MatMulAdd, FusedFFN with
// the gate/up/SwiGLU launch and the residual epilogue) must give the unfused graph's bits for
// decode token counts (1..8, the MMVQ kernels) and for a prefill count (their fallbacks), for
// K-quant, legacy and f16 weights. Skips without a CUDA device.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_matmul_util.h"
#include "cuda_test_util.h"
#include "quant/quant.h"

namespace minfer {
namespace {

using graph::InputKind;
using graph::NodeId;

constexpr int64_t kEmbd = 256, kQ = 256, kKv = 64, kFf = 512;

struct LayerWeights {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<graph::WeightTensor> w;

  /// Types: q/k, v, o, gate/up, down.
  LayerWeights(TensorType tqk, TensorType tv, TensorType to, TensorType tgu, TensorType td) {
    struct Spec {
      const char* name;
      TensorType type;
      int64_t k, m;
    };
    const std::string p = "test.fusion." + std::string(type_name(tqk)) + ".";
    const Spec specs[] = {{"q", tqk, kEmbd, kQ},     {"k", tqk, kEmbd, kKv},   {"v", tv, kEmbd, kKv},
                          {"o", to, kQ, kEmbd},      {"gate", tgu, kEmbd, kFf}, {"up", tgu, kEmbd, kFf},
                          {"down", td, kFf, kEmbd},  {"bq", TensorType::F32, kQ, 1},
                          {"bk", TensorType::F32, kKv, 1}, {"bv", TensorType::F32, kKv, 1},
                          {"norm1", TensorType::F32, kEmbd, 1}, {"norm2", TensorType::F32, kEmbd, 1}};
    uint32_t seed = 500;
    for (const Spec& s : specs) {
      if (s.m == 1) {
        const auto v = test::random_floats(static_cast<size_t>(s.k), seed++, 0.5f, 1.0f);
        bytes.push_back(test::as_bytes(v));
      } else {
        bytes.push_back(test::random_weights(s.type, s.m, s.k, seed++));
      }
    }
    for (size_t i = 0; i < std::size(specs); ++i) {
      const Spec& s = specs[i];
      graph::WeightTensor t;
      t.name = p + s.name;
      t.type = s.type;
      t.ne = {s.k, s.m, 1, 1};
      t.n_dims = s.m == 1 ? 1 : 2;
      t.data = bytes[i].data();
      t.nbytes = bytes[i].size();
      w.push_back(t);
    }
  }
};

/// x -> norm -> q/k/v (+bias) ; x2 = x + Wo q ; x3 = x2 + down(silu(gate h2) * up h2), h2 = norm(x2).
/// Outputs: x3, k, v.
test::TestGraph layer_graph(const LayerWeights& lw, int64_t nt, const std::vector<float>& x_in) {
  test::TestGraph t;
  graph::Graph& g = t.g;
  const NodeId x = g.input(InputKind::Other, TensorType::F32, {kEmbd, nt, 1, 1}, "x");
  t.inputs.emplace_back(x, test::as_bytes(x_in));
  std::vector<NodeId> w;
  for (const auto& wt : lw.w) {
    w.push_back(g.weight(wt));
    t.weights.push_back(&wt);
  }
  const NodeId h = g.rms_norm(x, w[10], 1e-6f, "attn_norm");
  const auto proj = [&](NodeId wm, NodeId b, const char* name) {
    const NodeId y = g.add(g.matmul(wm, h, name), b, std::string(name) + ".bias");
    return g.reshape(y, g.node(y).ne, std::string(name) + ".out");
  };
  const NodeId q = proj(w[0], w[7], "q");
  const NodeId k = proj(w[1], w[8], "k");
  const NodeId v = proj(w[2], w[9], "v");
  const NodeId x2 = g.add(x, g.matmul(w[3], q, "attn_out"), "attn_resid");
  const NodeId h2 = g.rms_norm(x2, w[11], 1e-6f, "ffn_norm");
  const NodeId act = g.mul(g.silu(g.matmul(w[4], h2, "gate"), "silu"), g.matmul(w[5], h2, "up"), "act");
  const NodeId x3 = g.add(x2, g.matmul(w[6], act, "down"), "ffn_resid");
  for (NodeId o : {x3, k, v}) {
    g.mark_output(o);
    t.outputs.push_back(o);
  }
  return t;
}

struct TypeSet {
  const char* name;
  TensorType qk, v, o, gu, d;
};

class CudaFusion : public ::testing::TestWithParam<TypeSet> {};

TEST_P(CudaFusion, FusedLayerIsBitwiseEqualToTheUnfusedLayer) {
  MINFER_REQUIRE_CUDA();
  const TypeSet ts = GetParam();
  const LayerWeights lw(ts.qk, ts.v, ts.o, ts.gu, ts.d);
  for (int64_t nt : {1, 3, 8, 12}) {
    const auto x = test::random_floats(static_cast<size_t>(kEmbd * nt), 600 + static_cast<uint32_t>(nt));
    const auto make = [&] { return layer_graph(lw, nt, x); };
    cpu::CpuBackend cpu(1);
    cuda::CudaBackend dev;
    const auto plain = test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev, 1, false);
    const auto fused = test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev, 1, true);
    ASSERT_EQ(plain.outputs.size(), 3u);
    ASSERT_EQ(fused.outputs.size(), 3u);
    const char* names[] = {"x3", "k", "v"};
    for (size_t i = 0; i < 3; ++i)
      EXPECT_TRUE(test::bytes_equal(fused.outputs[i], plain.outputs[i])) << ts.name << " nt " << nt << " " << names[i];
  }
}

TEST_P(CudaFusion, TheFusionPassCreatesTheFusedOps) {
  MINFER_REQUIRE_CUDA();
  const TypeSet ts = GetParam();
  const LayerWeights lw(ts.qk, ts.v, ts.o, ts.gu, ts.d);
  const auto x = test::random_floats(static_cast<size_t>(kEmbd), 610);
  test::TestGraph t = layer_graph(lw, 1, x);
  cpu::CpuBackend cpu(1);
  cuda::CudaBackend dev;
  for (const auto* w : t.weights) dev.register_weight(*w);
  graph::Backend* bks[2] = {&cpu, &dev};
  graph::PrepareOptions opt;
  opt.preferred = graph::BackendKind::Cuda;
  graph::PreparedGraph pg(std::move(t.g), bks, [](graph::BackendKind, int32_t, int32_t) { return graph::TensorRef{}; },
                          opt);
  EXPECT_EQ(pg.fusion().qkv, 1);
  EXPECT_EQ(pg.fusion().ffn, 1);
  EXPECT_EQ(pg.fusion().residual, 2);
  EXPECT_EQ(pg.fusion().norm, 2) << "both RmsNorms fold into the matvecs that read them";
  int matmul_add = 0, ffn_with_residual = 0, plain_adds = 0, norms = 0, with_norm = 0;
  for (const auto& n : pg.graph().nodes()) {
    if (n.dead) continue;
    matmul_add += n.op == graph::Op::MatMulAdd;
    // FusedFFN sources: x, Wg, Wu, Wd, r, norm weight.
    ffn_with_residual += n.op == graph::Op::FusedFFN && n.n_src == 6 && n.p.has_norm;
    plain_adds += n.op == graph::Op::Add;
    norms += n.op == graph::Op::RmsNorm;
    with_norm += (n.op == graph::Op::FusedQKV || n.op == graph::Op::FusedFFN) && n.p.has_norm;
  }
  EXPECT_EQ(matmul_add, 1);
  EXPECT_EQ(ffn_with_residual, 1);
  EXPECT_EQ(plain_adds, 0) << "bias and residual adds are all fused";
  EXPECT_EQ(norms, 0);
  EXPECT_EQ(with_norm, 2);
}

INSTANTIATE_TEST_SUITE_P(
    WeightMixes, CudaFusion,
    ::testing::Values(TypeSet{"q4_K_m", TensorType::Q4_K, TensorType::Q6_K, TensorType::Q4_K, TensorType::Q4_K,
                              TensorType::Q6_K},
                      TypeSet{"q8_0", TensorType::Q8_0, TensorType::Q8_0, TensorType::Q8_0, TensorType::Q8_0,
                              TensorType::Q8_0},
                      TypeSet{"q4_0_mixed", TensorType::Q4_0, TensorType::Q5_1, TensorType::Q4_1, TensorType::Q5_0,
                              TensorType::Q6_K},
                      TypeSet{"f16", TensorType::F16, TensorType::F16, TensorType::F16, TensorType::F16,
                              TensorType::F16}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
