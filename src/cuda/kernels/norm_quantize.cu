// RMS norm + activation quantization in one launch (norm_quantize.cuh).
#include "cuda/kernels/norm_quantize.cuh"

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/norm.cuh"
#include "cuda/kernels/norm_row.cuh"
#include "cuda/kernels/quantize_acts.cuh"
#include "cuda/kernels/quantize_blocks.cuh"

namespace minfer::cuda {
namespace {

// One block of rms_norm_threads(k) threads per token row t. The norm's steps are rms_norm_kernel's
// (norm.cu) with the same thread count; the normalized row goes to shared memory, then warps quantize it: Q8, 8 lanes
// per 32-element block; Q8K, one warp per 256-element super-block.
template <bool kQ8K>
__global__ void __launch_bounds__(kRmsNormMaxThreads)
    rms_norm_quantize_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t k, float eps,
                             int8_t* __restrict__ qs, float2* __restrict__ ds, float* __restrict__ dplane,
                             int16_t* __restrict__ bsums) {
  extern __shared__ float row[];  // k floats
  __shared__ double scratch[32];
  const int64_t t = blockIdx.x;
  const float* xr = x + t * k;
  rms_row_apply(xr, w, rms_row_scale(xr, k, eps, scratch), k, row);
  __syncthreads();

  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  if constexpr (kQ8K) {
    const int64_t nb = k / 256;
    for (int64_t b = warp; b < nb; b += blockDim.x / 32)  // warp-uniform
      mm::quantize_q8k_block(row + b * 256, lane, qs + t * k + b * 256, bsums + (t * nb + b) * 16,
                             dplane + t * nb + b);
  } else {
    const int64_t nb = k / 32;
    const int part = lane & 7;
    const unsigned mask = 0xFFu << (lane & 24);  // the 8 lanes of one block (uniform among them)
    for (int64_t b = threadIdx.x >> 3; b < nb; b += blockDim.x / 8)
      mm::quantize_q8_block(row + b * 32, part, mask, qs + t * k + b * 32, ds + t * nb + b);
  }
}

bool bad_args() {
  note_launch_failure("rms_norm_quantize_bad_args", cudaErrorInvalidValue);
  return false;
}

}  // namespace

bool rms_norm_quantize_supported(TensorType type, int64_t k) {
  mm::ActKind kind;
  if (!mm::act_kind_for(type, &kind) || k < 1 || k > kNormQuantizeMaxK) return false;
  if (kind == mm::ActKind::Q8) return k % 32 == 0;
  if (kind == mm::ActKind::Q8K) return k % 256 == 0;
  return false;
}

bool rms_norm_quantize(TensorType type, const float* x, const float* w, int64_t k, int64_t n, float eps, void* qx,
                       cudaStream_t stream) {
  const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  if (!rms_norm_quantize_supported(type, k) || n < 1 || n > 0x7FFFFFFF || x == nullptr || w == nullptr ||
      qx == nullptr || (addr(x) & 3) != 0 || (addr(w) & 3) != 0 || (addr(qx) & 15) != 0)
    return bad_args();
  mm::ActKind kind;
  mm::act_kind_for(type, &kind);
  const mm::ActLayout L = mm::act_layout(kind, k, n);
  auto* base = static_cast<uint8_t*>(qx);
  auto* qs = reinterpret_cast<int8_t*>(base + L.qs_off);
  const size_t smem = static_cast<size_t>(k) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(n));
  const int threads = rms_norm_threads(k);
  if (kind == mm::ActKind::Q8K) {
    rms_norm_quantize_kernel<true><<<grid, threads, smem, stream>>>(
        x, w, k, eps, qs, nullptr, reinterpret_cast<float*>(base + L.ds_off),
        reinterpret_cast<int16_t*>(base + L.bsums_off));
    return MINFER_LAUNCH_CHECK("rms_norm_quantize_q8k");
  }
  rms_norm_quantize_kernel<false><<<grid, threads, smem, stream>>>(
      x, w, k, eps, qs, reinterpret_cast<float2*>(base + L.ds_off), nullptr, nullptr);
  return MINFER_LAUNCH_CHECK("rms_norm_quantize_q8");
}

}  // namespace minfer::cuda
