#include "cuda/kernels/batch_matmul.cuh"

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {

__global__ void batch_matmul_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                    float* __restrict__ y, int64_t k, int64_t m, int64_t n,
                                    int64_t batches) {
  const int64_t total = m * n * batches;
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < total;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = o % m;
    const int64_t t = (o / m) % n;
    const int64_t bi = o / (m * n);
    const float* ar = a + (bi * m + j) * k;
    const float* br = b + (bi * n + t) * k;
    float s = 0.0f;
    for (int64_t i = 0; i < k; ++i) s = __fadd_rn(s, __fmul_rn(ar[i], br[i]));
    y[o] = s;
  }
}

}  // namespace

bool batch_matmul_f32(const float* a, const float* b, float* y, int64_t k, int64_t m, int64_t n,
                      int64_t batches, cudaStream_t stream) {
  const int64_t total = m * n * batches;
  if (total <= 0) return true;
  batch_matmul_kernel<<<grid_for(total, kBlock), kBlock, 0, stream>>>(a, b, y, k, m, n, batches);
  return MINFER_LAUNCH_CHECK("batch_matmul_f32");
}

}  // namespace minfer::cuda
