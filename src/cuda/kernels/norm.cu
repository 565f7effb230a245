#include "cuda/kernels/norm.cuh"

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/norm_row.cuh"

namespace minfer::cuda {
namespace {

// One block per row (grid-stride over rows).
__global__ void __launch_bounds__(kRmsNormMaxThreads) rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                float* __restrict__ out, int64_t len, int64_t rows, float eps) {
  pdl_prologue();
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * len;
    rms_row_apply(xr, w, rms_row_scale(xr, len, eps, scratch), len, out + r * len);
  }
}

}  // namespace

bool rms_norm(const float* x, const float* w, float* out, int64_t len, int64_t rows, float eps,
              const char* site, cudaStream_t stream) {
  if (len <= 0 || rows <= 0) return true;
  launch_pdl(rms_norm_kernel, dim3(grid_for(rows, 1)), dim3(rms_norm_threads(len)), 0, stream, x, w, out, len, rows,
             eps);
  return MINFER_LAUNCH_CHECK(site);
}

}  // namespace minfer::cuda
