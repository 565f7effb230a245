// Host emulation of the quantized MMVQ kernels, for tests on machines without a GPU (plain C++
// header: test files include it). It runs the kernels' own arithmetic (mmvq_blocks.cuh decode,
// partial sums and terms, mmvq_common.cuh stage geometry) in their lane assignment and term
// order, sequentially: a bug in those shared pieces shows up here as a difference from the CPU
// reference. What it cannot check (shuffles, shared-memory races, launch shapes) is left to the
// device tests.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/types.h"

namespace minfer::cuda::mm {

/// The device layout of quantized activations (quantize_acts.cuh) built on the host from the
/// CPU's blocks (n rows of row_bytes(vec_dot_type, k) bytes, as cpu::quantize_activations
/// writes them) for weights of `type` (a block type). False for F32/F16/BF16 or an unsupported k.
bool host_activations_from_blocks(TensorType type, const void* blocks, int64_t k, int64_t n,
                                  std::vector<uint8_t>* out);

/// y[j + t * ldy] as the MMVQ kernel for `type` computes it, n in 1..8, from host copies of the
/// weights `w` (m rows; the pointer's alignment modulo 16 is honoured as on the device) and of
/// the quantized activations (host_activations_from_blocks). False for a type without a
/// quantized MMVQ kernel or n outside 1..8.
bool emulate_mmvq(TensorType type, const void* w, int64_t k, int64_t m, const void* acts,
                  int64_t n, float* y, int64_t ldy);

/// How many warps of a lane-kernel grid of grid_warps warps (whole blocks), of which the launcher
/// counts n_warps, the kernel's deal (mmvq_lane.cuh lane_warp_run, split 0 or 1) gives each of
/// n_groups row groups to: every entry must be 1.
std::vector<int> lane_group_visits(int split, int64_t grid_warps, int64_t n_warps, int64_t n_groups,
                                   int64_t groups_per_warp);

/// How often the mixed-type deal (mmvq_lane.cuh lane_mixed_row) maps a slot of its n_groups =
/// ceil(rows_a / k_rows) + ceil((rows_total - rows_a) / k_rows) row groups to each grid row
/// (every entry must be 1), and -1 at a row given the wrong type (rows below rows_a are the first
/// type's).
std::vector<int> lane_mixed_row_visits(int64_t rows_a, int64_t rows_total, int k_rows);

/// The byte intervals [first, second) of the concatenated ranges that each warp of an n_warps
/// grid asks the L2 cache for (mmvq_lane.cuh l2_share_bounds; at most 3 ranges), in warp order.
std::vector<std::pair<uint64_t, uint64_t>> l2_share_intervals(const std::vector<uint32_t>& bytes, int64_t n_warps);

/// How often the warps' prefetch requests, cut per range as the kernel cuts them
/// (l2_range_piece), name each 16-byte word of each range (every entry must be 1), and -1 at a
/// word of a request that is misaligned or runs past its range.
std::vector<std::vector<int>> l2_request_word_visits(const std::vector<uint32_t>& bytes, int64_t n_warps);

}  // namespace minfer::cuda::mm
