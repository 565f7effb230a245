// BatchMatMul (f32 x f32, used by tests and small graphs): per batch b,
// y[j, t, b] = sum_i A[i, j, b] * B[i, t, b]. One thread per output, the sum in the CPU's order
// (i ascending, one rounded multiply and one rounded add per term), so the result is the CPU
// backend's bit for bit. Not fast; the model graphs never use it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

/// A [k, m, batches], B [k, n, batches], y [m, n, batches] (all f32, contiguous).
bool batch_matmul_f32(const float* a, const float* b, float* y, int64_t k, int64_t m, int64_t n,
                      int64_t batches, cudaStream_t stream);

}  // namespace minfer::cuda
