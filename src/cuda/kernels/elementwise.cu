#include "cuda/kernels/elementwise.cuh"

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {

struct Dims {
  int64_t ne[4];
  int64_t nb[4];
};

template <BinaryOp OP>
__global__ void binary_kernel(const float* __restrict__ a, const float* __restrict__ b,
                              float* __restrict__ out, Dims s) {
  const int64_t total = s.ne[0] * s.ne[1] * s.ne[2] * s.ne[3];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i0 = i % s.ne[0];
    int64_t r = i / s.ne[0];
    const int64_t i1 = r % s.ne[1];
    r /= s.ne[1];
    const int64_t i2 = r % s.ne[2];
    const int64_t i3 = r / s.ne[2];
    const int64_t j = (s.nb[0] == 1 ? 0 : i0) +
                      s.nb[0] * ((s.nb[1] == 1 ? 0 : i1) +
                                 s.nb[1] * ((s.nb[2] == 1 ? 0 : i2) + s.nb[2] * (s.nb[3] == 1 ? 0 : i3)));
    out[i] = OP == BinaryOp::Add ? __fadd_rn(a[i], b[j]) : __fmul_rn(a[i], b[j]);
  }
}

// The CPU's silu (common.cuh silu_cpu: exp correctly rounded to float).
__device__ __forceinline__ float silu_f(float x) { return silu_cpu(x); }

__global__ void silu_kernel(const float* __restrict__ a, float* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = silu_f(a[i]);
}

// out may alias gate: each element is read before it is written by the same thread.
__global__ void swiglu_kernel(const float* gate, const float* __restrict__ up, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __fmul_rn(silu_f(gate[i]), up[i]);
}

__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ b, int64_t m, int64_t n) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], b[i % m]);
}

}  // namespace

bool binary(BinaryOp op, const float* a, const float* b, float* out, const Shape4& ne,
            const Shape4& nb, cudaStream_t stream) {
  Dims d{};
  for (int i = 0; i < 4; ++i) {
    d.ne[i] = ne[static_cast<size_t>(i)];
    d.nb[i] = nb[static_cast<size_t>(i)];
  }
  const int64_t total = ne[0] * ne[1] * ne[2] * ne[3];
  if (total <= 0) return true;
  if (op == BinaryOp::Add) {
    binary_kernel<BinaryOp::Add><<<grid_for(total, kBlock), kBlock, 0, stream>>>(a, b, out, d);
    return MINFER_LAUNCH_CHECK("add");
  }
  binary_kernel<BinaryOp::Mul><<<grid_for(total, kBlock), kBlock, 0, stream>>>(a, b, out, d);
  return MINFER_LAUNCH_CHECK("mul");
}

bool silu(const float* a, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return true;
  silu_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(a, out, n);
  return MINFER_LAUNCH_CHECK("silu");
}

bool swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return true;
  swiglu_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(gate, up, out, n);
  return MINFER_LAUNCH_CHECK("swiglu");
}

bool add_bias(float* y, const float* b, int64_t m, int64_t n, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return true;
  add_bias_kernel<<<grid_for(m * n, kBlock), kBlock, 0, stream>>>(y, b, m, n);
  return MINFER_LAUNCH_CHECK("add_bias");
}

}  // namespace minfer::cuda
