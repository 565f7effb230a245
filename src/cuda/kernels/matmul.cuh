// The device matrix-product API the CUDA backend calls for MatMul and the fused QKV/FFN ops.
// Weights stay in their file format on the device (GGUF/ggml block layouts, src/quant/blocks.h);
// activations are f32. For quantized weights the activations are first quantized once per op
// input (quantize_activations), exactly as the CPU backend quantizes them (Q8_0 blocks for
// Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants; f16/bf16 for f16/bf16 weights), in
// whatever device layout the kernels prefer, and reused by every matmul sharing that input.
//
// Shapes (ggml order): W [k, m] = m rows of k elements; x [k, n] f32 = n token rows; y [m, n]
// f32 with y[j + t * ldy]. All pointers are device pointers; everything is issued on `stream`.
// Each launch is checked with MINFER_LAUNCH_CHECK (launch.cuh); the functions return false when
// a launch failed (the failure is recorded with its site).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace minfer::cuda {

/// True when a kernel exists for weights of `type` with rows of `k` elements (e.g. k a multiple
/// of the block size). When false, `why` (if not null) receives a one-line reason.
bool matmul_supported(TensorType type, int64_t k, const char** why);

/// Device bytes of the quantized-activation buffer for x [k, n] paired with weights of `type`
/// (0 when the kernels read f32 activations directly).
size_t quantized_activation_bytes(TensorType type, int64_t k, int64_t n);

/// Quantizes x [k, n] into `qx` (quantized_activation_bytes(type, k, n) bytes) for weights of
/// `type`. No-op (returns true) when the type reads f32 activations.
bool quantize_activations(TensorType type, const float* x, int64_t k, int64_t n, void* qx,
                          cudaStream_t stream);

/// y = W^T x. `qx` is the buffer quantize_activations filled for this x (or x itself when
/// quantized_activation_bytes is 0). Chooses the kernel family by n: matrix-vector kernels
/// (MMVQ) for n <= 8, a matrix-matrix path above.
bool matmul(TensorType type, const void* W, int64_t k, int64_t m, const float* x, const void* qx,
            int64_t n, float* y, int64_t ldy, cudaStream_t stream);

}  // namespace minfer::cuda
