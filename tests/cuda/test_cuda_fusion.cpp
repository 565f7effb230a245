// The FusionPass on the CUDA backend: a decoder-layer-shaped graph (norm, q/k/v projections with
// biases, output projection + residual, SwiGLU FFN + residual) run with and without fusion on the
// device. The fused ops (FusedQKV in one launch per activation family, MatMulAdd, FusedFFN with
// the gate/up/SwiGLU launch and the residual epilogue) must give the unfused graph's bits for
// decode token counts (1..8, the MMVQ kernels) and for prefill counts (their fallbacks; from 16
// tokens the f16 tensor-core path, where only the FFN, which keeps h in f16, may differ: by less
// than 5% of the outputs' RMS; bitwise again under MINFER_CUDA_PREFILL_MATMUL=mmq), for K-quant,
// legacy and f16 weights. Skips without a CUDA device.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/kernels/hgemm.cuh"
#include "cuda/kernels/matmul.cuh"
#include "cuda/kernels/mmq.cuh"
#include "cuda_matmul_util.h"
#include "cuda_test_util.h"
#include "../gguf_test_util.h"
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
        // The random quantized weights reach |w| ~ 60 (real models: ~0.1); with norm2 of unit
        // scale the FFN's h = silu(g) u would leave the f16 range (65504) of the f16 prefill
        // path and turn both layers to inf/NaN (docs/cuda-matmul.md, "Range"). norm2 at 1/64
        // scale keeps h (quadratic in it) 2^12 times smaller.
        const float scale = std::string(s.name) == "norm2" ? 1.0f / 64.0f : 1.0f;
        const auto v = test::random_floats(static_cast<size_t>(s.k), seed++, 0.5f * scale, scale);
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
  for (const char* mode : {"auto", "mmq"})
    for (int64_t nt : {1, 3, 8, 12, 16, 40, 80}) {
      if (std::string(mode) == "mmq" && nt < 16) continue;  // the same kernels as auto
      test::ScopedEnv env("MINFER_CUDA_PREFILL_MATMUL", mode);
      const auto x = test::random_floats(static_cast<size_t>(kEmbd * nt), 600 + static_cast<uint32_t>(nt));
      const auto make = [&] { return layer_graph(lw, nt, x); };
      cpu::CpuBackend cpu(1);
      cuda::CudaBackend dev;
      const auto plain = test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev, 1, false);
      const auto fused = test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev, 1, true);
      ASSERT_EQ(plain.outputs.size(), 3u);
      ASSERT_EQ(fused.outputs.size(), 3u);
      const char* names[] = {"x3", "k", "v"};
      // The f16 FFN of the fused layer (f16 tensor cores, quantized weights) keeps h in f16.
      // (On sm_90 decode-sized batches, up to kMmqDecodeMaxTokens, stay on MMQ.)
      const bool mmq_decode = cuda::context_compute_capability() >= 90 && nt <= cuda::mm::kMmqDecodeMaxTokens;
      const bool f16_ffn = std::string(mode) == "auto" && nt >= cuda::mm::kF16GemmMinTokens && !mmq_decode &&
                           type_traits(ts.gu).block_size > 1 && type_traits(ts.d).block_size > 1;
      for (size_t i = 0; i < 3; ++i) {
        SCOPED_TRACE(std::string(ts.name) + " " + mode + " nt " + std::to_string(nt) + " " + names[i]);
        if (i == 0 && f16_ffn) {
          std::vector<float> a(fused.outputs[0].size() / 4), b(a.size());
          std::memcpy(a.data(), fused.outputs[0].data(), fused.outputs[0].size());
          std::memcpy(b.data(), plain.outputs[0].data(), plain.outputs[0].size());
          // The unfused layer quantizes h to the down type's Q8 blocks (error up to a block's
          // amax / 254 per element) before the f16 conversion; the fused one rounds h to f16
          // (2^-11). The outputs differ by that Q8 error through the down product. This is a
          // wiring check only (norm2 is scaled down, so the FFN is a small part of x3): the
          // RMS of the difference must stay below kF16FfnRms of the outputs' RMS, and every
          // output finite. ffn_f16's numbers are checked against a host reference in
          // CudaFfnF16 (test_cuda_hgemm.cpp), its wiring in the engine tests.
          constexpr double kF16FfnRms = 0.05;
          for (size_t e = 0; e < a.size(); ++e)
            ASSERT_TRUE(std::isfinite(a[e]) && std::isfinite(b[e])) << "element " << e << ": " << a[e] << " " << b[e];
          double ss = 0.0, sd = 0.0;
          for (size_t e = 0; e < b.size(); ++e) {
            ss += static_cast<double>(b[e]) * b[e];
            sd += (static_cast<double>(a[e]) - b[e]) * (static_cast<double>(a[e]) - b[e]);
          }
          ASSERT_TRUE(std::isfinite(ss)) << "the unfused layer left the f16 range";
          EXPECT_LE(std::sqrt(sd), kF16FfnRms * std::sqrt(ss)) << "relative RMS of fused - unfused";
          EXPECT_FALSE(test::bytes_equal(fused.outputs[0], plain.outputs[0]))
              << "the f16 FFN was expected to run (h rounded to f16, not via Q8/Q8K)";
        } else {
          EXPECT_TRUE(test::bytes_equal(fused.outputs[i], plain.outputs[i]));
        }
      }
    }
}

// The decode switches of the lane kernel (docs/cuda.md) through the ops: q/k/v of two types in
// one grid (MINFER_CUDA_MMVQ_LANE_MIXED; the q4_K_m sets have a Q6_K v, q6_K_qk a Q6_K q/k and a
// Q4_K v, so the grid's first type is the v), the round-robin deal, and the L2 prefetch of the
// next product's weights as the executor names them (FusedQKV -> o-proj -> gate/up -> down).
// The fused decode layer must keep its bits under each; for the two-type sets the mixed launch
// must really run (a failure injected at its site fails the layer).
TEST_P(CudaFusion, DecodeLaneSwitchesKeepTheFusedBits) {
  MINFER_REQUIRE_CUDA();
  const TypeSet ts = GetParam();
  const LayerWeights lw(ts.qk, ts.v, ts.o, ts.gu, ts.d);
  const auto x = test::random_floats(static_cast<size_t>(kEmbd), 620);
  const auto make = [&] { return layer_graph(lw, 1, x); };
  cpu::CpuBackend cpu(1);
  cuda::CudaBackend dev;
  test::RunResult want;
  {
    test::ScopedEnv off("MINFER_CUDA_MMVQ_LANE_MIXED", "0");  // one launch per type
    want = test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev, 1, true);
  }
  ASSERT_EQ(want.outputs.size(), 3u);
  // {MIXED, SPLIT, L2_AHEAD_MB}
  const char* const modes[][3] = {{"1", "0", "0"}, {"0", "1", "0"}, {"0", "0", "16"}, {"1", "1", "16"}};
  for (const auto& m : modes) {
    SCOPED_TRACE(std::string(ts.name) + " MIXED=" + m[0] + " SPLIT=" + m[1] + " L2_AHEAD_MB=" + m[2]);
    test::ScopedEnv mixed("MINFER_CUDA_MMVQ_LANE_MIXED", m[0]);
    test::ScopedEnv split("MINFER_CUDA_MMVQ_LANE_SPLIT", m[1]);
    test::ScopedEnv ahead("MINFER_CUDA_L2_AHEAD_MB", m[2]);
    cuda::CudaBackend dev2;
    const auto got = test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev2, 2, true);
    ASSERT_EQ(got.outputs.size(), 6u);  // the 3 outputs of each of the 2 runs
    for (size_t i = 0; i < 6; ++i)
      EXPECT_TRUE(test::bytes_equal(got.outputs[i], want.outputs[i % 3])) << "run " << i / 3 << " output " << i % 3;
  }
  // The grid's first type is the pair's first (matmul_mixed_pair), whichever projection has it.
  const bool fwd = cuda::matmul_mixed_pair(ts.qk, ts.v);
  if (fwd || cuda::matmul_mixed_pair(ts.v, ts.qk)) {
    const TensorType first = fwd ? ts.qk : ts.v, second = fwd ? ts.v : ts.qk;
    const std::string site =
        std::string("mmvq_lane_") + std::string(type_name(first)) + "_" + std::string(type_name(second));
    test::ScopedEnv mixed("MINFER_CUDA_MMVQ_LANE_MIXED", "1");
    test::ScopedEnv inject("MINFER_CUDA_FAIL_LAUNCH", site.c_str());
    cuda::CudaBackend dev3;
    EXPECT_NE(test::error_of([&] { test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev3, 1, true); })
                  .find(site),
              std::string::npos)
        << "the q/k/v projections did not run as one grid at " << site;
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
                      TypeSet{"q6_K_qk", TensorType::Q6_K, TensorType::Q4_K, TensorType::Q4_K, TensorType::Q4_K,
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
