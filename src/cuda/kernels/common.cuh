// Device helpers shared by the kernel families: exact half/bfloat16 conversions (the same bit
// algorithms as core/fp16.h, so a device and the CPU produce identical bytes and floats for every
// input, NaN payloads included), warp reductions, and grid sizing.
//
// Arithmetic that must match the CPU bit for bit is written with the _rn intrinsics (__fmul_rn,
// __fadd_rn, __fsub_rn): nvcc contracts a * b + c into one fused multiply-add by default, which
// rounds once where the CPU rounds twice. The conversions and the mul_rn/add_rn/sub_rn/div_rn
// wrappers are __host__ __device__, so the host can evaluate the exact device formulas (the
// *_on_host functions that tests check without a device).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cuda/kernels/fault.h"

namespace minfer::cuda {

/// Threads per block of the simple kernels (a multiple of the warp size).
inline constexpr int kBlock = 256;
/// Most blocks a grid-stride kernel launches in x (keeps launches within every arch's limits;
/// the kernels loop over the rest).
inline constexpr int64_t kMaxGridX = 65535LL * 8;
/// Most blocks in grid dimensions y and z (CUDA limit).
inline constexpr int64_t kMaxGridYZ = 65535;

/// Blocks for `n` items at `per_block` items per block, capped at kMaxGridX (>= 1).
inline unsigned grid_for(int64_t n, int64_t per_block) {
  int64_t b = (n + per_block - 1) / per_block;
  if (b < 1) b = 1;
  if (b > kMaxGridX) b = kMaxGridX;
  return static_cast<unsigned>(b);
}

__host__ __device__ __forceinline__ float u32_as_float(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
#endif
}

__host__ __device__ __forceinline__ uint32_t float_as_u32(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
#endif
}

// One rounded f32 operation each (never contracted into a fused multiply-add).
__host__ __device__ __forceinline__ float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ __forceinline__ float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ __forceinline__ float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
__host__ __device__ __forceinline__ float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// Half (binary16 bits) -> float, exact; the algorithm of core/fp16.h fp16_to_fp32.
__host__ __device__ __forceinline__ float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3FFu) << 13;
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | mant << 13;
  } else {
    bits = sign | (exp + (127 - 15)) << 23 | mant << 13;
  }
  return u32_as_float(bits);
}

/// Float -> half bits, round to nearest even, overflow to +-inf, NaN kept quiet with the same
/// payload bits as core/fp16.h fp32_to_fp16 (identical bytes for every input).
__host__ __device__ __forceinline__ uint16_t float_to_half_bits(float f) {
  const uint32_t x = float_as_u32(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x1FFu));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (abs < 0x38800000u) {
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // in [14, 24]
    uint32_t half = m >> (shift - 1);
    const uint32_t rem_mask = (1u << (shift - 1)) - 1u;
    const bool sticky = (m & rem_mask) != 0;
    const uint32_t round_bit = half & 1u;
    half >>= 1;
    if (round_bit && (sticky || (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = (abs >> 13) - ((127 - 15) << 10);
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

/// bfloat16 bits -> float, exact.
__host__ __device__ __forceinline__ float bf16_bits_to_float(uint16_t b) {
  return u32_as_float(static_cast<uint32_t>(b) << 16);
}

/// The CPU's silu, x / (1 + exp(-x)), with exp evaluated in double and rounded to float (the
/// correctly rounded expf) and one rounded add and division: shared by every kernel that applies
/// silu, so a fused epilogue gives the bits of the unfused kernel.
__device__ __forceinline__ float silu_cpu(float x) {
  const float e = static_cast<float>(exp(-static_cast<double>(x)));
  return __fdiv_rn(x, __fadd_rn(1.0f, e));
}

/// Records a bad input in a backend's fault words (fault.h): the first reporter's value wins.
__device__ __forceinline__ void report_fault(uint32_t* fault, uint32_t code, int32_t value) {
  if (atomicOr(&fault[0], code) == 0) fault[1] = static_cast<uint32_t>(value);
}

/// Reads a little-endian u16 at a 2-byte aligned address.
__host__ __device__ __forceinline__ uint16_t load_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024). `scratch` holds 32 values.
/// Every thread gets the total. Must be called by every thread of the block.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = static_cast<int>(blockDim.x >> 5);
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T t = lane < n_warps ? scratch[lane] : T(0);
  return warp_sum(t);
}

/// Max over the block; same contract as block_sum.
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = static_cast<int>(blockDim.x >> 5);
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < n_warps ? scratch[lane] : -INFINITY;
  return warp_max(t);
}

}  // namespace minfer::cuda
