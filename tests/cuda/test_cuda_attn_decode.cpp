// The decode attention kernels (attn_decode.cuh, nt <= 8) against the CPU backend: long windows
// cut into many ranges, GQA groups cut into head slices, every lane width (head_dim 8 .. 256,
// with idle lanes), the general kernel for head dims that are not a multiple of 8, masked cells
// whose K/V bytes are NaN (never used), forced range sizes (one range, ranges of 7 cells), and
// bitwise equality of a multi-token step with single-token steps on a many-range window.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

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

// "attention" tolerance class (docs/cuda.md).
constexpr double kAttnAbs = 3e-5;
constexpr double kAttnRel = 3e-5;

class CudaAttnDecode : public ::testing::TestWithParam<TensorType> {};

/// Runs `c` on both backends and checks the CUDA output against the CPU's. `poison` fills the
/// K and V rows of every cell no token can see with 0xFF bytes (NaN in f32, f16 and q8_0).
::testing::AssertionResult matches_cpu(const AttnCase& c, TensorType type, int n_seq, bool poison = false) {
  const AttnData d = test::attn_data(c, n_seq);
  const auto q = random_floats(static_cast<size_t>(c.hd * c.n_head * c.nt), 201);
  auto kb = region_bytes(type, c.n_head_kv * c.hd, c.n_ctx, 202);
  auto vb = region_bytes(type, c.n_head_kv * c.hd, c.n_ctx, 203);
  if (poison) {
    const size_t rb = row_bytes(type, c.n_head_kv * c.hd);
    for (int64_t cell = 0; cell < c.n_ctx; ++cell) {
      bool seen = false;
      for (int64_t t = 0; t < c.nt && cell < c.n_kv; ++t) {
        const auto ti = static_cast<size_t>(t), ci = static_cast<size_t>(cell);
        seen = seen || (d.kv_pos[ci] >= 0 && d.kv_seq[ci] == d.seq[ti] && d.kv_pos[ci] <= d.pos[ti]);
      }
      if (seen) continue;
      std::memset(kb.data() + static_cast<size_t>(cell) * rb, 0xFF, rb);
      std::memset(vb.data() + static_cast<size_t>(cell) * rb, 0xFF, rb);
    }
  }
  const auto r = test::run_both([&] { return test::attn_graph(c, type, d, q, kb, vb); });
  const auto got = as_floats(r.cuda.outputs[0]), want = as_floats(r.cpu.outputs[0]);
  for (float w : want)
    if (!std::isfinite(w)) return ::testing::AssertionFailure() << c.name << ": the CPU output is not finite";
  auto res = test::floats_close(got, want, kAttnAbs, kAttnRel);
  if (!res) return res << " [" << c.name << ", " << type_name(type) << "]";
  if (n_seq == 3) {  // the last token's sequence holds no cell: zeros
    const size_t row = static_cast<size_t>(c.hd * c.n_head);
    for (size_t i = got.size() - row; i < got.size(); ++i)
      if (got[i] != 0.0f)
        return ::testing::AssertionFailure() << c.name << ": token without cells got " << got[i] << " at " << i;
  }
  return ::testing::AssertionSuccess();
}

TEST_P(CudaAttnDecode, MatchesTheCpuOnLongWindowsWideGroupsAndEveryLaneWidth) {
  MINFER_REQUIRE_CUDA();
  const TensorType type = GetParam();
  struct Case {
    AttnCase c;
    int n_seq;
  };
  const Case cases[] = {
      {{"7B shape, 4096 cells, nt=1", 1, 28, 4, 128, 4096, 4096}, 1},
      {{"1.5B shape, 1000 cells, nt=2, two seqs", 2, 12, 2, 128, 1024, 1000}, 2},
      {{"group 16 (two head slices), nt=8", 8, 16, 1, 128, 2048, 2048}, 1},
      {{"group 12 (two slices of 6), hd 64", 1, 12, 1, 64, 512, 512}, 1},
      {{"group 3, hd 256 (32 lanes), three seqs", 3, 6, 2, 256, 768, 700}, 3},
      {{"hd 96 (16 lanes, 4 idle)", 1, 6, 3, 96, 300, 300}, 1},
      {{"hd 32 mha (4 lanes), nt=4", 4, 4, 4, 32, 100, 64}, 2},
      {{"one visible cell", 1, 4, 2, 64, 64, 18}, 1},
      {{"50 cells, 33 used (one range)", 1, 14, 2, 64, 64, 50}, 1},
  };
  for (const Case& k : cases) EXPECT_TRUE(matches_cpu(k.c, type, k.n_seq));
  if (type != TensorType::Q8_0) {  // the CPU stores q8_0 only for head_dim a multiple of 32
    EXPECT_TRUE(matches_cpu({"hd 8 (4 lanes, 3 idle)", 2, 4, 2, 8, 64, 64}, type, 1));
    EXPECT_TRUE(matches_cpu({"hd 20: the general kernel", 1, 4, 2, 20, 64, 64}, type, 1));
  }
}

TEST_P(CudaAttnDecode, MaskedCellsHoldingNanBytesAreNeverUsed) {
  MINFER_REQUIRE_CUDA();
  const TensorType type = GetParam();
  // Two sequences interleaved, empty cells at the end, tokens inside their sequences: every cell
  // of the other sequence, of a later position or empty is NaN in K and V.
  EXPECT_TRUE(matches_cpu({"1.5B shape, 256 cells", 1, 12, 2, 128, 256, 256}, type, 2, true));
  EXPECT_TRUE(matches_cpu({"7B shape, 4096 cells, nt=2", 2, 28, 4, 128, 4096, 4096}, type, 2, true));
  EXPECT_TRUE(matches_cpu({"hd 64, nt=3", 3, 14, 2, 64, 512, 300}, type, 3, true));
}

TEST_P(CudaAttnDecode, ForcedRangeSizesStayWithinTolerance) {
  MINFER_REQUIRE_CUDA();
  const TensorType type = GetParam();
  const AttnCase c{"1.5B shape, 700 cells, nt=2", 2, 12, 2, 128, 768, 700};
  {
    test::ScopedEnv env("MINFER_CUDA_ATTN_CHUNK", "7");  // 100 ranges, the last of 0 < 7 cells
    EXPECT_TRUE(matches_cpu(c, type, 2)) << "ranges of 7 cells";
  }
  {
    test::ScopedEnv env("MINFER_CUDA_ATTN_CHUNK", "100000");  // clamped to the largest ranges (256 cells)
    EXPECT_TRUE(matches_cpu(c, type, 2)) << "largest ranges";
  }
  {
    const AttnCase c1{"1.5B shape, 250 cells, nt=2", 2, 12, 2, 128, 256, 250};
    test::ScopedEnv env("MINFER_CUDA_ATTN_CHUNK", "0");  // one range: the output is written directly
    EXPECT_TRUE(matches_cpu(c1, type, 2)) << "one range";
  }
}

TEST_P(CudaAttnDecode, ThreeTokenStepEqualsThreeOneTokenStepsOnAManyRangeWindow) {
  MINFER_REQUIRE_CUDA();
  const TensorType type = GetParam();
  const AttnCase c3{"nt=3", 3, 28, 4, 128, 4096, 4096};
  const AttnCase c1{"nt=1", 1, 28, 4, 128, 4096, 4096};
  ASSERT_GT(cuda::attn_decode_plan({1, 28, 4, 128, 4096}, 132).n_splits, 1);
  AttnData d3 = test::attn_data(c3, 1);
  d3.pos = {4000, 4001, 4002};
  const auto q = random_floats(static_cast<size_t>(c3.hd * c3.n_head * 3), 211);
  const auto kb = region_bytes(type, c3.n_head_kv * c3.hd, c3.n_ctx, 212);
  const auto vb = region_bytes(type, c3.n_head_kv * c3.hd, c3.n_ctx, 213);
  cpu::CpuBackend cpu(1);
  cuda::CudaBackend dev;
  const auto all = test::run_graph([&] { return test::attn_graph(c3, type, d3, q, kb, vb); },
                                   graph::BackendKind::Cuda, cpu, &dev);
  const size_t row = static_cast<size_t>(c3.hd * c3.n_head);
  for (size_t t = 0; t < 3; ++t) {
    AttnData d1 = d3;
    d1.pos = {d3.pos[t]};
    d1.seq = {d3.seq[t]};
    const std::vector<float> q1(q.begin() + static_cast<std::ptrdiff_t>(t * row),
                                q.begin() + static_cast<std::ptrdiff_t>((t + 1) * row));
    const auto one = test::run_graph([&] { return test::attn_graph(c1, type, d1, q1, kb, vb); },
                                     graph::BackendKind::Cuda, cpu, &dev);
    const std::vector<uint8_t> slice(all.outputs[0].begin() + static_cast<std::ptrdiff_t>(t * row * 4),
                                     all.outputs[0].begin() + static_cast<std::ptrdiff_t>((t + 1) * row * 4));
    EXPECT_TRUE(test::bytes_equal(one.outputs[0], slice)) << "token " << t << " " << type_name(type);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaAttnDecode,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::Q8_0),
                         [](const auto& param_info) { return std::string(type_name(param_info.param)); });

TEST(CudaAttnDecode, PlanIsIndependentOfTheTokenCountAndCoversTheWindow) {
  // Pure host function: runs without a device.
  struct Shape {
    int64_t n_head, n_head_kv, hd;
    int lanes;
    int64_t slices, per_slice;
  };
  const Shape shapes[] = {{12, 2, 128, 16, 1, 6}, {28, 4, 128, 16, 1, 7}, {14, 2, 64, 8, 1, 7},
                          {32, 8, 128, 16, 1, 4}, {16, 1, 128, 16, 2, 8}, {12, 1, 64, 8, 2, 6},
                          {6, 2, 256, 32, 1, 3},  {4, 4, 32, 4, 1, 1},    {4, 2, 8, 4, 1, 2},
                          {9, 1, 96, 16, 2, 5},   {8, 1, 256, 32, 2, 4}};
  for (const Shape& sh : shapes) {
    for (int64_t n_kv : {1, 18, 31, 32, 33, 256, 700, 4096, 32768, 131072}) {
      for (int64_t override_chunk : {0, 7, 100000}) {
        cuda::AttnShape s{1, sh.n_head, sh.n_head_kv, sh.hd, n_kv};
        const cuda::AttnDecodePlan p1 = cuda::attn_decode_plan(s, 132, override_chunk);
        const std::string what = "heads " + std::to_string(sh.n_head) + "/" + std::to_string(sh.n_head_kv) +
                                 " hd " + std::to_string(sh.hd) + " n_kv " + std::to_string(n_kv) +
                                 " chunk " + std::to_string(override_chunk);
        EXPECT_EQ(p1.lanes, sh.lanes) << what;
        // One range (n_kv <= 256): one block per query head; longer windows: the table.
        const int64_t group = sh.n_head / sh.n_head_kv;
        EXPECT_EQ(p1.head_slices, n_kv <= 256 ? group : sh.slices) << what;
        EXPECT_EQ(p1.heads_per_slice, n_kv <= 256 ? 1 : sh.per_slice) << what;
        EXPECT_GE(p1.n_splits, 1) << what;
        EXPECT_LE(p1.n_splits, cuda::kAttnDecodeMaxSplits) << what;
        EXPECT_GE(p1.n_splits * p1.chunk, n_kv) << what;
        EXPECT_LT((p1.n_splits - 1) * p1.chunk, n_kv) << what << ": an empty range";
        EXPECT_EQ(p1.scratch_bytes == 0, p1.n_splits == 1) << what;
        if (override_chunk == 7 && n_kv <= 7 * cuda::kAttnDecodeMaxSplits) {
          EXPECT_EQ(p1.chunk, 7) << what;
        }
        // MINFER_CUDA_ATTN_HEAD_SLICES: at least the default, at most the group, no empty block.
        for (int64_t want : {2, 3, 64}) {
          const cuda::AttnDecodePlan o = cuda::attn_decode_plan(s, 132, override_chunk, want);
          const int64_t target = std::min(std::max(want, sh.slices), group);
          const int64_t per = (group + target - 1) / target;
          EXPECT_EQ(o.heads_per_slice, per) << what << " slices " << want;
          EXPECT_EQ(o.head_slices, (group + per - 1) / per) << what << " slices " << want;
        }
        for (int64_t nt = 2; nt <= cuda::kAttnDecodeMaxTokens; ++nt) {
          s.n_tok = nt;
          const cuda::AttnDecodePlan p = cuda::attn_decode_plan(s, 132, override_chunk);
          EXPECT_EQ(p.n_splits, p1.n_splits) << what << " nt " << nt;
          EXPECT_EQ(p.chunk, p1.chunk) << what << " nt " << nt;
          EXPECT_EQ(p.lanes, p1.lanes) << what << " nt " << nt;
          EXPECT_EQ(p.head_slices, p1.head_slices) << what << " nt " << nt;
        }
      }
    }
  }
  // A long window on a 7B shape fills the device: at least 2 blocks per SM per token.
  const cuda::AttnDecodePlan big = cuda::attn_decode_plan({1, 28, 4, 128, 32768}, 132);
  EXPECT_GE(big.n_splits * 4, 2 * 132);
  // Which shapes the decode kernels take.
  EXPECT_STREQ(cuda::attn_decode_unsupported({1, 28, 4, 128, 256}, TensorType::F16), "");
  EXPECT_STRNE(cuda::attn_decode_unsupported({9, 28, 4, 128, 256}, TensorType::F16), "");
  EXPECT_STRNE(cuda::attn_decode_unsupported({1, 4, 2, 20, 256}, TensorType::F16), "");
  EXPECT_STRNE(cuda::attn_decode_unsupported({1, 4, 2, 48, 256}, TensorType::Q8_0), "");
  EXPECT_STREQ(cuda::attn_decode_unsupported({8, 16, 1, 256, 256}, TensorType::Q8_0), "");
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
