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

// Block (t, j) of rms_norm_threads(k) threads: token row t = blockIdx.x, share j =
// blockIdx.y of `parts` (norm_quantize_share). Each warp (Q8K: one super-block, 8 elements a
// lane) or 8-lane group (Q8: one block, 4 elements a lane) owning a unit of the share loads its
// elements of w first, so that load overlaps the row sum's; the whole block computes the row's
// scale exactly as rms_norm_kernel (norm.cu) does; the owners then read their elements of x
// (cached by the sum's loads) and normalize and quantize them in registers. The plan guarantees
// a share never exceeds the block's warps / groups. (Prefetching x too raised the Q8 kernel past
// the 32 registers that let two 1024-thread blocks share an SM; ptxas then spilled.)
template <bool kQ8K>
__global__ void __launch_bounds__(kRmsNormMaxThreads)
    rms_norm_quantize_kernel(const float* __restrict__ x, const float* __restrict__ w, int64_t k, float eps,
                             int units, int parts, int8_t* __restrict__ qs, float2* __restrict__ ds,
                             float* __restrict__ dplane, int16_t* __restrict__ bsums) {
  pdl_prologue();
  constexpr int kPerLane = kQ8K ? 8 : 4;    // elements each lane quantizes
  constexpr int kUnit = kQ8K ? 256 : 32;    // elements of one unit
  constexpr int kLanesLog2 = kQ8K ? 5 : 3;  // lanes per unit: 32 or 8
  __shared__ double scratch[32];
  const int64_t t = blockIdx.x;
  const float* xr = x + t * k;
  const NormQuantizeShare share = norm_quantize_share(units, parts, static_cast<int>(blockIdx.y));
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int part = kQ8K ? lane : (lane & 7);
  const int64_t b = share.begin + static_cast<int>(threadIdx.x >> kLanesLog2);
  const bool owner = b < share.end;  // uniform over the unit's lanes (the quantizers' shuffle masks)
  const int64_t e0 = b * kUnit + part * kPerLane;
  float wv[kPerLane];
  if (owner) {
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) wv[e] = w[e0 + e];
  }
  const float s = rms_row_scale(xr, k, eps, scratch);  // every thread: block_sum synchronizes
  if (!owner) return;
  float v[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) v[e] = __fmul_rn(__fmul_rn(xr[e0 + e], s), wv[e]);  // as rms_row_apply
  if constexpr (kQ8K) {
    mm::quantize_q8k_values(v, lane, qs + t * k + b * 256, bsums + (t * units + b) * 16, dplane + t * units + b);
  } else {
    const unsigned mask = 0xFFu << (lane & 24);  // the 8 lanes of this block
    mm::quantize_q8_values(v, part, mask, qs + t * k + b * 32, ds + t * units + b);
  }
}

bool bad_args() {
  note_launch_failure("rms_norm_quantize_bad_args", cudaErrorInvalidValue);
  return false;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool rms_norm_quantize_supported(TensorType type, int64_t k) {
  mm::ActKind kind;
  if (!mm::act_kind_for(type, &kind) || k < 1 || k > kNormQuantizeMaxK) return false;
  if (kind == mm::ActKind::Q8) return k % 32 == 0;
  if (kind == mm::ActKind::Q8K) return k % 256 == 0;
  return false;
}

NormQuantizePlan norm_quantize_plan(TensorType type, int64_t k, int64_t n) {
  NormQuantizePlan p;
  mm::ActKind kind;
  if (!rms_norm_quantize_supported(type, k) || n < 1 || !mm::act_kind_for(type, &kind)) return p;
  const bool q8k = kind == mm::ActKind::Q8K;
  p.threads = rms_norm_threads(k);
  p.units = q8k ? k / 256 : k / 32;
  p.per_block = q8k ? p.threads / 32 : p.threads / 8;
  p.min_parts = ceil_div(p.units, p.per_block);
  p.max_parts = ceil_div(k, 256);
  if (p.max_parts < p.min_parts) p.max_parts = p.min_parts;
  const int64_t want = ceil_div(kNormQuantizeWaveBlocks, n);
  p.parts = want < p.min_parts ? p.min_parts : want > p.max_parts ? p.max_parts : want;
  return p;
}

bool rms_norm_quantize_split(TensorType type, const float* x, const float* w, int64_t k, int64_t n, float eps,
                             void* qx, int64_t parts, cudaStream_t stream) {
  const auto addr = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
  if (!rms_norm_quantize_supported(type, k) || n < 1 || n > 0x7FFFFFFF || x == nullptr || w == nullptr ||
      qx == nullptr || (addr(x) & 3) != 0 || (addr(w) & 3) != 0 || (addr(qx) & 15) != 0)
    return bad_args();
  const NormQuantizePlan plan = norm_quantize_plan(type, k, n);
  if (parts < plan.min_parts || parts > plan.max_parts) return bad_args();
  mm::ActKind kind;
  mm::act_kind_for(type, &kind);
  const mm::ActLayout L = mm::act_layout(kind, k, n);
  auto* base = static_cast<uint8_t*>(qx);
  auto* qs = reinterpret_cast<int8_t*>(base + L.qs_off);
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(parts));
  const int units = static_cast<int>(plan.units), nparts = static_cast<int>(parts);  // <= 1024, <= 128
  if (kind == mm::ActKind::Q8K) {
    launch_pdl(rms_norm_quantize_kernel<true>, grid, dim3(plan.threads), 0, stream, x, w, k, eps, units, nparts, qs,
               nullptr, reinterpret_cast<float*>(base + L.ds_off), reinterpret_cast<int16_t*>(base + L.bsums_off));
    return MINFER_LAUNCH_CHECK("rms_norm_quantize_q8k");
  }
  launch_pdl(rms_norm_quantize_kernel<false>, grid, dim3(plan.threads), 0, stream, x, w, k, eps, units, nparts, qs,
             reinterpret_cast<float2*>(base + L.ds_off), nullptr, nullptr);
  return MINFER_LAUNCH_CHECK("rms_norm_quantize_q8");
}

bool rms_norm_quantize(TensorType type, const float* x, const float* w, int64_t k, int64_t n, float eps, void* qx,
                       cudaStream_t stream) {
  if (!rms_norm_quantize_supported(type, k) || n < 1) return bad_args();
  return rms_norm_quantize_split(type, x, w, k, n, eps, qx, norm_quantize_plan(type, k, n).parts, stream);
}

}  // namespace minfer::cuda
