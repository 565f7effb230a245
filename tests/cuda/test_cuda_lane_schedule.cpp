// How the decode lane kernel (mmvq_lane.cu) deals its work, checked on the host with the kernel's
// own __host__ __device__ functions (mmvq_lane.cuh, through mmvq_emulate.cuh): every row group is
// computed by exactly one warp under both deals (contiguous runs, round robin), a grid of two
// weight types computes each row once with the right type's layout, and the L2
// prefetch shares of the warps tile the requested bytes in 16-byte words without gaps or overlaps.
// l2_ahead_prefix (matmul.cuh) never names a byte outside the hinted tensors. Needs a CUDA build
// but no device.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/kernels/matmul.cuh"
#include "cuda/kernels/mmvq_emulate.cuh"

namespace minfer {
namespace {

TEST(CudaLaneSchedule, every_row_group_goes_to_exactly_one_warp_under_both_deals) {
  for (const int split : {0, 1})
    for (const int64_t n_groups : {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1792}, int64_t{9472}})
      for (const int64_t fit : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{2112}, int64_t{4000}}) {
        SCOPED_TRACE("split " + std::to_string(split) + " groups " + std::to_string(n_groups) + " fit " +
                     std::to_string(fit));
        // The launcher's grid (mmvq_lane.cu launch_lpr): contiguous runs of ceil(n / fit) groups,
        // or round robin over min(n, fit) warps; blocks of 8 warps round the grid up, and the
        // warps past the launcher's count must get nothing.
        const int64_t gpw = (n_groups + fit - 1) / fit;
        const int64_t warps = split == 0 ? (n_groups + gpw - 1) / gpw : (n_groups < fit ? n_groups : fit);
        const int64_t grid_warps = (warps + 7) / 8 * 8;
        const std::vector<int> visits = cuda::mm::lane_group_visits(split, grid_warps, warps, n_groups, gpw);
        ASSERT_EQ(visits.size(), static_cast<size_t>(n_groups)) << "a warp was dealt a group outside the grid";
        for (int64_t g = 0; g < n_groups; ++g) ASSERT_EQ(visits[static_cast<size_t>(g)], 1) << "group " << g;
      }
}

TEST(CudaLaneSchedule, a_grid_of_two_weight_types_computes_every_row_once_with_its_type) {
  // q/k/v shapes: 7B (3584 + 512 rows of Q4_K, 512 of Q6_K), partial groups of either type, one
  // row of the second type, and rows of 8 / 16 / 32 lanes (4 / 2 / 1 rows a group).
  const int64_t cases[][2] = {{4096, 4608}, {13, 30}, {39, 57}, {1, 2}, {8, 9}, {7, 8}};
  for (const auto& c : cases)
    for (const int k_rows : {1, 2, 4}) {
      SCOPED_TRACE("rows " + std::to_string(c[0]) + " + " + std::to_string(c[1] - c[0]) + ", " +
                   std::to_string(k_rows) + " a group");
      const std::vector<int> visits = cuda::mm::lane_mixed_row_visits(c[0], c[1], k_rows);
      ASSERT_EQ(visits.size(), static_cast<size_t>(c[1])) << "a slot mapped outside the grid's rows";
      for (int64_t r = 0; r < c[1]; ++r) ASSERT_EQ(visits[static_cast<size_t>(r)], 1) << "row " << r;
    }
}

TEST(CudaLaneSchedule, l2_prefetch_shares_tile_the_requested_bytes) {
  const std::vector<std::vector<uint32_t>> cases = {
      {16}, {4096}, {7340032}, {1048576, 1048576, 16}, {8388608, 8388608}, {48, 32, 16}};
  for (const auto& bytes : cases)
    for (const int64_t warps : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{2112}, int64_t{5000}}) {
      SCOPED_TRACE("ranges " + std::to_string(bytes.size()) + " first " + std::to_string(bytes[0]) + " warps " +
                   std::to_string(warps));
      uint64_t total = 0;
      for (const uint32_t b : bytes) total += b;
      const auto shares = cuda::mm::l2_share_intervals(bytes, warps);
      ASSERT_EQ(shares.size(), static_cast<size_t>(warps));
      uint64_t at = 0;
      for (const auto& [lo, hi] : shares) {
        EXPECT_EQ(lo, at) << "a gap or an overlap between two warps' shares";
        EXPECT_LE(lo, hi);
        EXPECT_EQ(lo % 16, 0u);
        EXPECT_EQ(hi % 16, 0u);
        at = hi;
      }
      EXPECT_EQ(at, total) << "the shares do not end at the last byte";
      // Cut per range as the kernel issues them: every word of every range requested once.
      const auto words = cuda::mm::l2_request_word_visits(bytes, warps);
      ASSERT_EQ(words.size(), bytes.size());
      for (size_t r = 0; r < words.size(); ++r)
        for (size_t w = 0; w < words[r].size(); ++w)
          ASSERT_EQ(words[r][w], 1) << "range " << r << " word " << w;
    }
}

TEST(CudaLaneSchedule, l2_ahead_prefix_stays_inside_the_hinted_tensors) {
  alignas(256) static uint8_t arena[1 << 16];
  // In order: the first range whole, then the budget's rest of the second; starts rounded up to 16
  // and lengths down, so the 3-byte misalignment of the second costs 13 bytes there.
  cuda::L2AheadHint h;
  h.w[0] = arena;
  h.bytes[0] = 1000;
  h.w[1] = arena + 2048 + 3;
  h.bytes[1] = 20000;
  h.n = 2;
  cuda::L2AheadHint a = cuda::l2_ahead_prefix(h, 4096);
  ASSERT_EQ(a.n, 2);
  EXPECT_EQ(a.w[0], arena);
  EXPECT_EQ(a.bytes[0], 992u);  // 1000 rounded down to 16
  EXPECT_EQ(a.w[1], arena + 2048 + 16);
  EXPECT_EQ(a.bytes[1], (4096u - 992u) / 16 * 16);
  for (int i = 0; i < a.n; ++i) {
    const auto* p = static_cast<const uint8_t*>(a.w[i]);
    const auto* lo = static_cast<const uint8_t*>(h.w[i]);
    EXPECT_GE(p, lo);
    EXPECT_LE(p + a.bytes[i], lo + h.bytes[i]) << "range " << i << " runs past its tensor";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u);
    EXPECT_EQ(a.bytes[i] % 16, 0u);
  }
  // Side by side (gate and up): half the budget of each.
  h.side_by_side = true;
  h.w[1] = arena + 32768;
  a = cuda::l2_ahead_prefix(h, 1024);
  ASSERT_EQ(a.n, 2);
  EXPECT_EQ(a.bytes[0], 512u);
  EXPECT_EQ(a.bytes[1], 512u);
  // A range shorter than its alignment step, a null range and a zero budget name nothing.
  cuda::L2AheadHint tiny;
  tiny.w[0] = arena + 1;
  tiny.bytes[0] = 10;
  tiny.w[1] = nullptr;
  tiny.bytes[1] = 4096;
  tiny.n = 2;
  EXPECT_EQ(cuda::l2_ahead_prefix(tiny, 1 << 20).n, 0);
  EXPECT_EQ(cuda::l2_ahead_prefix(h, 0).n, 0);
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
