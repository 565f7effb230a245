// Decode attention (attn_decode.cuh) against the CPU at the context lengths where its phases
// change shape: 1, 2, 31, 32, 33 cells (one warp's worth of cells and its edges), 257 (just past
// one range: the window is cut and combined) and 4097 (many ranges), for every KV format, GQA
// ratios 1 to 8 and 16 (head slices), head dims 64, 128 and 256, 1 to 8 query tokens. The window
// is either exactly the filled cells or rounded up to the engine's 256-cell granule with empty
// cells after them; every cell no token can see holds 0xFF bytes (NaN in f32, f16 and q8_0), so a
// kernel that reads a masked cell's K or V row fails the comparison.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "attn_test_util.h"
#include "cuda/kernels/attn_decode.cuh"
#include "cuda_test_util.h"

namespace minfer {
namespace {

using test::AttnCase;
using test::AttnData;
using test::as_floats;
using test::random_floats;
using test::region_bytes;

// "attention" tolerance class (docs/cuda.md), as test_cuda_attn_decode.cpp.
constexpr double kAttnAbs = 3e-5;
constexpr double kAttnRel = 3e-5;

struct Shape {
  int64_t n_head, n_head_kv, hd, nt;
};

/// One sequence in cells 0 .. ctx-1 at positions 0 .. ctx-1, empty cells up to n_kv; the nt
/// tokens are the last nt positions (token t at ctx - nt + t, at least 0), so the earlier tokens
/// of a step see fewer cells (causal).
AttnData context_data(int64_t ctx, int64_t n_kv, int64_t nt) {
  AttnData d;
  for (int64_t c = 0; c < n_kv; ++c) {
    d.kv_pos.push_back(c < ctx ? static_cast<int32_t>(c) : -1);
    d.kv_seq.push_back(c < ctx ? 0 : -1);
  }
  for (int64_t t = 0; t < nt; ++t) {
    const int64_t p = ctx - nt + t;
    d.pos.push_back(static_cast<int32_t>(p > 0 ? p : 0));
    d.seq.push_back(0);
  }
  return d;
}

class CudaAttnDecodeContexts : public ::testing::TestWithParam<TensorType> {};

TEST_P(CudaAttnDecodeContexts, MatchesTheCpuAtEveryPhaseEdgeWithMaskedCellsPoisoned) {
  MINFER_REQUIRE_CUDA();
  const TensorType type = GetParam();
  const Shape shapes[] = {
      {28, 4, 128, 1},  // 7B: GQA 7
      {14, 2, 64, 2},   // 0.5B: GQA 7, head_dim 64
      {12, 2, 128, 1},  // 1.5B: GQA 6
      {8, 8, 64, 1},    // GQA 1
      {4, 2, 64, 3},    // GQA 2
      {6, 2, 128, 4},   // GQA 3
      {8, 2, 128, 5},   // GQA 4
      {10, 2, 64, 6},   // GQA 5
      {16, 2, 128, 8},  // GQA 8, 8 tokens
      {16, 1, 256, 2},  // GQA 16, head_dim 256: four slices of four heads
  };
  cpu::CpuBackend cpu(2);
  cuda::CudaBackend dev;
  int run = 0;
  for (int64_t ctx : {1, 2, 31, 32, 33, 257, 4097}) {
    for (const Shape& sh : shapes) {
      // Alternate the exact window and the window rounded up to the 256-cell granule.
      const bool rounded = (run++ % 2) == 0;
      const int64_t n_kv = rounded ? (ctx + 255) / 256 * 256 : ctx;
      const AttnCase c{"context", sh.nt, sh.n_head, sh.n_head_kv, sh.hd, n_kv, n_kv};
      const AttnData d = context_data(ctx, n_kv, sh.nt);
      const auto seed = static_cast<uint32_t>(300 + 3 * run);
      const auto q = random_floats(static_cast<size_t>(sh.hd * sh.n_head * sh.nt), seed);
      auto kb = region_bytes(type, sh.n_head_kv * sh.hd, n_kv, seed + 1);
      auto vb = region_bytes(type, sh.n_head_kv * sh.hd, n_kv, seed + 2);
      const size_t rb = row_bytes(type, sh.n_head_kv * sh.hd);
      const int32_t last_pos = d.pos.back();
      for (int64_t cell = 0; cell < n_kv; ++cell) {
        if (cell < ctx && cell <= last_pos) continue;  // seen by the last token
        std::memset(kb.data() + static_cast<size_t>(cell) * rb, 0xFF, rb);
        std::memset(vb.data() + static_cast<size_t>(cell) * rb, 0xFF, rb);
      }
      const cuda::AttnShape shape{sh.nt, sh.n_head, sh.n_head_kv, sh.hd, n_kv};
      const std::string what = std::string(type_name(type)) + " ctx " + std::to_string(ctx) + " window " +
                               std::to_string(n_kv) + " heads " + std::to_string(sh.n_head) + "/" +
                               std::to_string(sh.n_head_kv) + " hd " + std::to_string(sh.hd) + " nt " +
                               std::to_string(sh.nt) + " ranges (132 SMs) " +
                               std::to_string(cuda::attn_decode_plan(shape, 132).n_splits);
      ASSERT_STREQ(cuda::attn_decode_unsupported(shape, type), "") << what;
      const auto make = [&] { return test::attn_graph(c, type, d, q, kb, vb); };
      const auto want = as_floats(test::run_graph(make, graph::BackendKind::Cpu, cpu, nullptr).outputs[0]);
      const auto got = as_floats(test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev).outputs[0]);
      bool finite = true;
      for (float w : want) finite = finite && std::isfinite(w);
      ASSERT_TRUE(finite) << what << ": the CPU output is not finite";
      EXPECT_TRUE(test::floats_close(got, want, kAttnAbs, kAttnRel)) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaAttnDecodeContexts,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::Q8_0),
                         [](const auto& param_info) { return std::string(type_name(param_info.param)); });

TEST(CudaAttnDecodeContexts, WindowsOfAtMost256CellsAreOneRangeAndLongerOnesAreCut) {
  // Pure host function: runs without a device. One range means one launch (no combine).
  for (int64_t n_kv : {1, 2, 31, 32, 33, 255, 256}) {
    const cuda::AttnDecodePlan p = cuda::attn_decode_plan({1, 28, 4, 128, n_kv}, 132);
    EXPECT_EQ(p.n_splits, 1) << n_kv;
    EXPECT_EQ(p.scratch_bytes, 0u) << n_kv;
  }
  for (int64_t n_kv : {257, 512, 4097, 32768, 262144}) {
    const cuda::AttnDecodePlan p = cuda::attn_decode_plan({1, 28, 4, 128, n_kv}, 132);
    EXPECT_GT(p.n_splits, 1) << n_kv;
    EXPECT_LE(p.chunk, 256) << n_kv;
    EXPECT_GE(p.n_splits * p.chunk, n_kv) << n_kv;
  }
  // Past one range, head_dim 256 takes at most 4 heads per block and 128 takes 8; a window of one
  // range takes one block per query head.
  EXPECT_EQ(cuda::attn_decode_plan({1, 16, 1, 256, 257}, 132).heads_per_slice, 4);
  EXPECT_EQ(cuda::attn_decode_plan({1, 16, 1, 256, 257}, 132).head_slices, 4);
  EXPECT_EQ(cuda::attn_decode_plan({1, 16, 2, 128, 257}, 132).heads_per_slice, 8);
  EXPECT_EQ(cuda::attn_decode_plan({1, 16, 2, 128, 256}, 132).heads_per_slice, 1);
  EXPECT_EQ(cuda::attn_decode_plan({1, 16, 2, 128, 256}, 132).head_slices, 8);
  // One block per query head never asks for more than 65535 blocks per range (grid y).
  const cuda::AttnDecodePlan wide = cuda::attn_decode_plan({1, 131072, 2, 128, 100}, 132);
  EXPECT_LE(2 * wide.head_slices, 65535);
  EXPECT_GE(wide.head_slices * wide.heads_per_slice, 65536);
  EXPECT_LE(wide.heads_per_slice, 8);
  // Windows past 256 * 1024 cells go to the general kernel.
  EXPECT_STREQ(cuda::attn_decode_unsupported({1, 28, 4, 128, 262144}, TensorType::F16), "");
  EXPECT_STRNE(cuda::attn_decode_unsupported({1, 28, 4, 128, 262145}, TensorType::F16), "");
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
