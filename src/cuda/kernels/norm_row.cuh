// Device steps of one RMS-norm row shared by rms_norm (norm.cu) and the fused norm + quantize
// kernel (norm_quantize.cu): both must give the same scale bit for bit (norm.cuh's contract), so
// the order of the sum lives here once. Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/common.cuh"

namespace minfer::cuda {

/// s = 1 / sqrt(mean(x^2) + eps) of the row xr[0 .. len), computed by the whole block (call from
/// uniform control flow): thread i sums the squares (each rounded to float) of elements i,
/// i + blockDim.x, ... in double, block_sum adds the threads' sums; the mean is rounded to float
/// and the rest is IEEE float. `scratch`: 32 doubles of shared memory. Every thread gets s.
__device__ __forceinline__ float rms_row_scale(const float* __restrict__ xr, int64_t len, float eps, double* scratch) {
  double sum = 0.0;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    const float v = xr[i];
    sum += static_cast<double>(__fmul_rn(v, v));
  }
  sum = block_sum(sum, scratch);
  const float mean = static_cast<float>(sum / static_cast<double>(len));
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

/// out[i] = (xr[i] * s) * w[i] for the block's elements i = threadIdx.x, + blockDim.x, ... (two
/// rounded multiplies, as the CPU). `out` may be global or shared memory.
__device__ __forceinline__ void rms_row_apply(const float* __restrict__ xr, const float* __restrict__ w, float s,
                                              int64_t len, float* __restrict__ out) {
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) out[i] = __fmul_rn(__fmul_rn(xr[i], s), w[i]);
}

}  // namespace minfer::cuda
