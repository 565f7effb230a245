// KV store / load and attention on the CUDA backend against the CPU backend: stores give the
// CPU's bytes (f32, f16, q8_0), loads its floats, attention stays within the "attention"
// tolerance class (flash prefill shapes: their f16 rounding bound) for decode and prefill shapes
// with GQA, several sequences and masked cells, and a 3-token decode step equals three 1-token
// steps bit for bit.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>

#include "attn_test_util.h"
#include "cuda/kernels/attention.cuh"
#include "cuda/kernels/flash_attn.cuh"
#include "cuda_test_util.h"
#include "quant/quant.h"

namespace minfer {
namespace {

using graph::InputKind;
using graph::NodeId;
using test::AttnCase;
using test::AttnData;
using test::as_bytes;
using test::attn_data;
using test::attn_graph;
using test::region_bytes;
using test::as_floats;
using test::random_floats;
using test::TestGraph;

// "attention" tolerance class: outputs are weighted means of V rows (|V| ~ 1); the device sums
// in another order and exponentiates in double (docs/cuda.md).
constexpr double kAttnAbs = 3e-5;
constexpr double kAttnRel = 3e-5;
// Prefill shapes the flash kernel takes (flash_attn.cuh) round Q, K, V and P to f16: with these
// unit normal inputs a score moves by <= 2 u scale sum |q_d k_d| (7e-3 at head dim 128, u = 2^-11),
// the output by that relative amount of mean |v - o| plus u max |v| for V and u for P: <= 1.1e-2.
// test_cuda_flash_attn.cpp checks the kernel tightly on f16-exact inputs.
constexpr double kFlashTolRounded = 1.5e-2;

class CudaKv : public ::testing::TestWithParam<TensorType> {};

TEST_P(CudaKv, StoreWritesTheCpusBytes) {
  MINFER_REQUIRE_CUDA();
  const TensorType type = GetParam();
  const int64_t kv_dim = 128, n_cells = 16, n = 5;
  std::vector<float> src = random_floats(static_cast<size_t>(kv_dim * n), 91, 2.0f);
  // Row 1, block 0: max |x| = 127 gives d = 1, so these are exact q8_0 rounding ties.
  const float ties[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, -126.5f, 1.5f, 100.49999f};
  for (size_t j = 0; j < std::size(ties); ++j) src[static_cast<size_t>(kv_dim) + j] = ties[j];
  // Row 2, block 1: all zeros (d = 0). Row 3, block 2: tiny values (subnormal half scale).
  for (int j = 0; j < 32; ++j) src[static_cast<size_t>(2 * kv_dim + 32 + j)] = 0.0f;
  for (int j = 0; j < 32; ++j) src[static_cast<size_t>(3 * kv_dim + 64 + j)] = 1e-6f * static_cast<float>(j - 16);
  if (type != TensorType::Q8_0) {
    // Half rounding edges (the CPU's f16 conversion takes non-finite values too).
    const float edges[] = {65519.0f, 65520.0f, -65536.0f, 6e-8f, 2.9802322e-8f, 8.9406967e-8f, -0.0f,
                           std::nanf("0x123"), INFINITY, 1.0009766f, 1.00048828125f};
    for (size_t j = 0; j < std::size(edges); ++j) src[static_cast<size_t>(4 * kv_dim) + j] = edges[j];
  }
  const std::vector<int32_t> cells = {3, 0, 15, 7, 8};
  const auto make = [&] {
    TestGraph t;
    const NodeId s = t.g.input(InputKind::Other, TensorType::F32, {kv_dim, n, 1, 1}, "k");
    t.inputs.emplace_back(s, as_bytes(src));
    const NodeId r = t.g.kv_region(0, 0, type, kv_dim, n_cells);
    const NodeId c = t.g.input(InputKind::KvCells, TensorType::I32, {n, 1, 1, 1}, "cells");
    t.inputs.emplace_back(c, as_bytes(cells));
    t.g.kv_store(s, r, c, "store_k");
    t.regions.push_back({0, 0, std::vector<uint8_t>(row_bytes(type, kv_dim) * n_cells, 0)});
    return t;
  };
  const auto r = test::run_both(make);
  ASSERT_EQ(r.cuda.regions.size(), 1u);
  EXPECT_TRUE(test::bytes_equal(r.cuda.regions[0], r.cpu.regions[0], type == TensorType::F32)) << type_name(type);
}

TEST_P(CudaKv, LoadDequantizesLikeTheCpu) {
  MINFER_REQUIRE_CUDA();
  const TensorType type = GetParam();
  const int64_t kv_dim = 256, n_cells = 40, n_kv = 32;
  const auto bytes = region_bytes(type, kv_dim, n_cells, 92);
  const auto make = [&] {
    TestGraph t;
    const NodeId r = t.g.kv_region(0, 1, type, kv_dim, n_cells);
    const NodeId y = t.g.kv_load(r, n_kv, "load_v");
    t.regions.push_back({0, 1, bytes});
    t.g.mark_output(y);
    t.outputs.push_back(y);
    return t;
  };
  const auto r = test::run_both(make);
  EXPECT_TRUE(test::bytes_equal(r.cuda.outputs[0], r.cpu.outputs[0])) << type_name(type);
}

TEST_P(CudaKv, AttentionMatchesTheCpuForDecodeAndPrefillShapes) {
  MINFER_REQUIRE_CUDA();
  const TensorType type = GetParam();
  const AttnCase cases[] = {
      {"decode nt=1 gqa2", 1, 4, 2, 64, 512, 256},
      {"decode nt=3 gqa7 two seqs", 3, 14, 2, 64, 768, 512},
      {"decode nt=8 mha", 8, 4, 4, 128, 300, 300},
      {"prefill nt=20 gqa8 hd128", 20, 8, 1, 128, 256, 256},
      {"prefill nt=9 gqa16 hd256", 9, 16, 1, 256, 512, 384},
      {"prefill nt=70 three seqs", 70, 4, 2, 64, 2048, 1792},
      {"prefill nt=20 hd96 (the split kernel)", 20, 6, 2, 96, 256, 256},
  };
  for (const AttnCase& c : cases) {
    const int n_seq = c.nt == 70 ? 3 : (c.nt == 3 ? 2 : 1);
    const AttnData d = attn_data(c, n_seq);
    const auto q = random_floats(static_cast<size_t>(c.hd * c.n_head * c.nt), 101);
    const auto kb = region_bytes(type, c.n_head_kv * c.hd, c.n_ctx, 102);
    const auto vb = region_bytes(type, c.n_head_kv * c.hd, c.n_ctx, 103);
    const auto r = test::run_both([&] { return attn_graph(c, type, d, q, kb, vb); });
    const auto got = as_floats(r.cuda.outputs[0]), want = as_floats(r.cpu.outputs[0]);
    const bool flash = *cuda::flash_attn_unsupported({c.nt, c.n_head, c.n_head_kv, c.hd, c.n_kv}, type) == '\0';
    EXPECT_TRUE(test::floats_close(got, want, flash ? kFlashTolRounded : kAttnAbs, flash ? kFlashTolRounded : kAttnRel))
        << c.name << " " << type_name(type) << (flash ? " (flash)" : "");
    if (n_seq == 3) {  // the last token's sequence holds no cell: zeros on both backends
      const size_t row = static_cast<size_t>(c.hd * c.n_head);
      for (size_t i = got.size() - row; i < got.size(); ++i) ASSERT_EQ(got[i], 0.0f) << c.name << " at " << i;
    }
  }
}

TEST_P(CudaKv, ThreeTokenDecodeStepEqualsThreeOneTokenSteps) {
  MINFER_REQUIRE_CUDA();
  const TensorType type = GetParam();
  const AttnCase c3{"nt=3", 3, 14, 2, 64, 512, 512};
  const AttnCase c1{"nt=1", 1, 14, 2, 64, 512, 512};
  AttnData d3 = attn_data(c3, 1);
  d3.pos = {400, 401, 402};  // three consecutive tokens of sequence 0, their cells already stored
  const auto q = random_floats(static_cast<size_t>(c3.hd * c3.n_head * 3), 111);
  const auto kb = region_bytes(type, c3.n_head_kv * c3.hd, c3.n_ctx, 112);
  const auto vb = region_bytes(type, c3.n_head_kv * c3.hd, c3.n_ctx, 113);
  cpu::CpuBackend cpu(1);
  cuda::CudaBackend dev;
  const auto all = test::run_graph([&] { return attn_graph(c3, type, d3, q, kb, vb); }, graph::BackendKind::Cuda, cpu, &dev);
  const size_t row = static_cast<size_t>(c3.hd * c3.n_head);
  for (size_t t = 0; t < 3; ++t) {
    AttnData d1 = d3;
    d1.pos = {d3.pos[t]};
    d1.seq = {d3.seq[t]};
    const std::vector<float> q1(q.begin() + static_cast<std::ptrdiff_t>(t * row),
                                q.begin() + static_cast<std::ptrdiff_t>((t + 1) * row));
    const auto one = test::run_graph([&] { return attn_graph(c1, type, d1, q1, kb, vb); }, graph::BackendKind::Cuda,
                                     cpu, &dev);
    const std::vector<uint8_t> slice(all.outputs[0].begin() + static_cast<std::ptrdiff_t>(t * row * 4),
                                     all.outputs[0].begin() + static_cast<std::ptrdiff_t>((t + 1) * row * 4));
    EXPECT_TRUE(test::bytes_equal(one.outputs[0], slice)) << "token " << t << " " << type_name(type);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaKv, ::testing::Values(TensorType::F32, TensorType::F16, TensorType::Q8_0),
                         [](const auto& param_info) { return std::string(type_name(param_info.param)); });

TEST(CudaKv, AttentionPlanIsTheSameForEveryDecodeTokenCount) {
  // Pure host function: runs without a device. The decode plan must not depend on nt (the
  // bit-identity of nt <= 8 steps rests on it) and must cover the window exactly.
  for (int64_t n_kv : {1, 63, 64, 256, 4096, 32768}) {
    cuda::AttnShape s{1, 28, 4, 128, n_kv};
    const cuda::AttnPlan p1 = cuda::attn_plan(s, 132);
    for (int64_t nt = 2; nt <= cuda::kAttnDecodeMaxTokens; ++nt) {
      s.n_tok = nt;
      const cuda::AttnPlan p = cuda::attn_plan(s, 132);
      EXPECT_EQ(p.n_splits, p1.n_splits) << "n_kv " << n_kv << " nt " << nt;
      EXPECT_EQ(p.chunk, p1.chunk) << "n_kv " << n_kv << " nt " << nt;
    }
    EXPECT_GE(p1.n_splits * p1.chunk, n_kv);
    EXPECT_LT((p1.n_splits - 1) * p1.chunk, n_kv) << "an empty range";
  }
  // Prefill plans bound their scratch to 64 MiB of partials when one range fits in it...
  const cuda::AttnPlan mid = cuda::attn_plan(cuda::AttnShape{512, 28, 4, 128, 32768}, 132);
  EXPECT_GT(mid.n_splits, 1);
  EXPECT_LE(mid.scratch_bytes, size_t{65} << 20);
  // ... and use a single range otherwise, which writes the output directly (no scratch).
  const cuda::AttnPlan big = cuda::attn_plan(cuda::AttnShape{4096, 64, 8, 128, 32768}, 132);
  EXPECT_EQ(big.n_splits, 1);
  EXPECT_EQ(big.chunk, 32768);
  EXPECT_EQ(big.scratch_bytes, 0u);
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
