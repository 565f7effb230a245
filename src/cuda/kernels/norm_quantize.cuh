// RMS norm fused with the activation quantization of the matmuls that read its output: one
// launch writes the quantized planes (quantize_acts.cuh layout) of rms_norm(x) * w directly, for
// the weight types whose kernels read Q8 or Q8K activations. The bytes equal those of
// rms_norm() (norm.cuh) followed by quantize_activations() (matmul.cuh) on the device: the same
// per-row sum order (rms_norm_threads(k) threads per row) and the same block quantizers
// (quantize_blocks.cuh). The f32 normalized row is never written to global memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/types.h"

namespace minfer::cuda {

/// Longest row (elements) the fused kernel takes: the normalized row is staged in shared memory
/// (44 KiB, under the 48 KiB a launch gets without opt-in).
inline constexpr int64_t kNormQuantizeMaxK = 11264;

/// True when rms_norm_quantize serves weights of `type` with rows of k elements: the type reads
/// Q8 or Q8K activations (matmul_fused_supported's types), k is a multiple of its block size
/// (32 / 256) and k <= kNormQuantizeMaxK.
bool rms_norm_quantize_supported(TensorType type, int64_t k);

/// qx = quantize_activations(type, rms_norm(x, w, eps)) for x [k, n] (f32, token row t at
/// x + t * k), w [k] (f32). qx: quantized_activation_bytes(type, k, n) bytes, 16-byte aligned.
/// One block of rms_norm_threads(k) threads per token row. Returns false (recorded as launch
/// failure "rms_norm_quantize_bad_args") when !rms_norm_quantize_supported(type, k), n < 1 or
/// a pointer is misaligned; false when the launch failed ("rms_norm_quantize_q8" / "_q8k").
bool rms_norm_quantize(TensorType type, const float* x, const float* w, int64_t k, int64_t n, float eps, void* qx,
                       cudaStream_t stream);

}  // namespace minfer::cuda
