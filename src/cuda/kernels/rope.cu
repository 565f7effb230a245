#include "cuda/kernels/rope.cuh"

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {

// One block per token (grid-stride). Dynamic shared memory: n_rot floats (cos, sin pairs).
// `other`: offset of pair i's second member from its first (n_rot / 2 NEOX, 1 normal);
// `stride`: offset of pair i's first member from pair 0's (1 NEOX, 2 normal).
__global__ void rope_kernel(const float* x, const int32_t* __restrict__ pos, float* out, int64_t hd,
                            int64_t n_head, int64_t n_tok, int64_t n_rot, float theta_scale,
                            graph::RopeConfig cfg, const float* __restrict__ ff) {
  extern __shared__ float cs[];  // cs[2i] = cos, cs[2i + 1] = sin
  const int64_t half = n_rot / 2;
  const bool neox = cfg.layout == graph::RopeLayout::Neox;
  const int64_t stride = neox ? 1 : 2, other = neox ? half : 1;
  for (int64_t t = blockIdx.x; t < n_tok; t += gridDim.x) {
    __syncthreads();  // the previous token's table is no longer read
    if (threadIdx.x == 0) {
      float theta = static_cast<float>(pos[t]);
      for (int64_t i = 0; i < half; ++i) {
        cs[2 * i] = theta;
        theta = __fmul_rn(theta, theta_scale);
      }
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
      const float th = graph::rope_angle(cs[2 * i], i, ff != nullptr ? ff[i] : 1.0f, cfg);
      const double td = static_cast<double>(th);
      cs[2 * i + 1] = __fmul_rn(static_cast<float>(sin(td)), cfg.mscale);
      cs[2 * i] = __fmul_rn(static_cast<float>(cos(td)), cfg.mscale);
    }
    __syncthreads();
    const int64_t row = t * n_head * hd;
    for (int64_t k = threadIdx.x; k < n_head * hd; k += blockDim.x) {
      const int64_t h = k / hd, i = k % hd;
      const int64_t base = row + h * hd;
      if (i < half) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const int64_t a = base + i * stride, b = a + other;
        const float x0 = x[a], x1 = x[b];
        out[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        out[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
      } else if (i >= n_rot) {
        out[base + i] = x[base + i];
      }
    }
  }
}

}  // namespace

bool rope(const float* x, const int32_t* pos, float* out, int64_t head_dim, int64_t n_head, int64_t n_tok,
          int64_t n_rot, float theta_scale, const graph::RopeConfig& cfg, const float* freq_factors,
          cudaStream_t stream) {
  if (n_tok <= 0 || n_head <= 0) return true;
  const size_t smem = static_cast<size_t>(n_rot > 0 ? n_rot : 2) * sizeof(float);
  rope_kernel<<<grid_for(n_tok, 1), kBlock, smem, stream>>>(x, pos, out, head_dim, n_head, n_tok, n_rot,
                                                            theta_scale, cfg, freq_factors);
  return MINFER_LAUNCH_CHECK("rope");
}

}  // namespace minfer::cuda
