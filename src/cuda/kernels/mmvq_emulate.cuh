// Host emulation of the quantized MMVQ kernels, for tests on machines without a GPU (plain C++
// header: test files include it). It runs the kernels' own arithmetic (mmvq_blocks.cuh decode,
// partial sums and terms, mmvq_common.cuh stage geometry) in their lane assignment and term
// order, sequentially: a bug in those shared pieces shows up here as a difference from the CPU
// reference. What it cannot check (shuffles, shared-memory races, launch shapes) is left to the
// device tests.
#pragma once

#include <cstdint>
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

}  // namespace minfer::cuda::mm
