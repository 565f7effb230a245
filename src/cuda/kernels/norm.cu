#include "cuda/kernels/norm.cuh"

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {

// One block per row (grid-stride over rows).
__global__ void __launch_bounds__(kRmsNormMaxThreads) rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                float* __restrict__ out, int64_t len, int64_t rows, float eps) {
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * len;
    float* yr = out + r * len;
    double sum = 0.0;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      const float v = xr[i];
      sum += static_cast<double>(__fmul_rn(v, v));
    }
    sum = block_sum(sum, scratch);
    const float mean = static_cast<float>(sum / static_cast<double>(len));
    const float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) yr[i] = __fmul_rn(__fmul_rn(xr[i], s), w[i]);
  }
}

}  // namespace

bool rms_norm(const float* x, const float* w, float* out, int64_t len, int64_t rows, float eps,
              const char* site, cudaStream_t stream) {
  if (len <= 0 || rows <= 0) return true;
  rms_norm_kernel<<<grid_for(rows, 1), rms_norm_threads(len), 0, stream>>>(x, w, out, len, rows, eps);
  return MINFER_LAUNCH_CHECK(site);
}

}  // namespace minfer::cuda
