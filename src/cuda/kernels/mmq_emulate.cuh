// Host emulation of the MMQ kernels (mmq.cu), for tests on machines without a GPU (plain C++
// header: test files include it). It stages each weight row exactly as the kernel's copies do
// (the aligned 16-byte words of mmq_row_stage, bytes past the tensor zero), decodes them with
// the kernel's own functions (mmq_tile.cuh), forms each block's exact integer sum as the mma
// instructions do, and applies the kernel's per-output steps in the kernel's order: its results
// are the kernel's bit for bit. What it cannot check (fragment layouts, cp.async, barriers,
// launch shapes) is left to the device tests, which compare the kernel with this emulation.
#pragma once

#include <cstdint>

#include "core/types.h"

namespace minfer::cuda::mm {

/// y[j + t * ldy] for j < m, t < n as the MMQ kernel for `type` computes it, from a host copy of
/// the weights `w` (m rows of k elements, 16-byte aligned as the kernel requires) and the
/// activations in the device layout (host_activations_from_blocks, mmvq_emulate.cuh). False for
/// a type MMQ does not handle, a k that is not a multiple of the block size, a misaligned w, or
/// `splits` outside 1..kMmqMaxSplits. `splits` > 1: the split-k kernel (mmq_split_count): the
/// stages in `splits` contiguous ranges, each summed from zero, the sums added in range order.
bool emulate_mmq(TensorType type, const void* w, int64_t k, int64_t m, const void* acts, int64_t n,
                 float* y, int64_t ldy, int splits = 1);

}  // namespace minfer::cuda::mm
