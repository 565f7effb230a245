// The KV store's element formulas, shared by the KV store kernels (kv.cu) and the fused
// rope-and-store kernel (rope_store.cu), so both write the same bytes as the CPU
// (src/cpu/kernels_attn.cpp + quant_ref.h quantize_row_q8_0; ggml-common.h block_q8_0):
//   f32  the value;  f16  core/fp16.h's rounding (float_to_half_bits, common.cuh);
//   q8_0 per 32 elements d = max|x| / 127, id = 1 / d (0 when d = 0),
//        q = round-half-away(x * id) clamped to [-127, 127] (NaN -> 0), d stored as half.
// __host__ __device__: kv_quantize_row_on_host evaluates them on the host for tests.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "quant/blocks.h"

namespace minfer::cuda {

// quant_ref.h round_away_clamped: NaN -> 0, clamp to [lo, hi], then round half away from zero.
__host__ __device__ __forceinline__ int round_away_clamped_dev(float t, int lo, int hi) {
  if (t != t) t = 0.0f;
  if (t <= static_cast<float>(lo)) return lo;
  if (t >= static_cast<float>(hi)) return hi;
  return static_cast<int>(roundf(t));
}

__host__ __device__ __forceinline__ float q8_0_scale(float amax) { return div_rn(amax, 127.0f); }
__host__ __device__ __forceinline__ float q8_0_inverse(float d) { return d != 0.0f ? div_rn(1.0f, d) : 0.0f; }
__host__ __device__ __forceinline__ int8_t q8_0_level(float x, float id) {
  return static_cast<int8_t>(round_away_clamped_dev(mul_rn(x, id), -127, 127));
}

#ifdef __CUDACC__
/// One warp stores element `lane` of a 32-element q8_0 block `x` at `blk` (block_q8_0 bytes).
/// Called by all 32 lanes (warp_max).
__device__ __forceinline__ void store_q8_0_block(uint8_t* blk, float x, int lane) {
  const float d = q8_0_scale(warp_max(fabsf(x)));
  const float id = q8_0_inverse(d);
  reinterpret_cast<int8_t*>(blk + offsetof(block_q8_0, qs))[lane] = q8_0_level(x, id);
  if (lane == 0) *reinterpret_cast<uint16_t*>(blk + offsetof(block_q8_0, d)) = float_to_half_bits(d);
}
#endif

}  // namespace minfer::cuda
