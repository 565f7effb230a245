// Device bodies of the activation quantizers (quantize_acts.cuh layout), shared by the plain
// quantize kernels (quantize_acts.cu) and the fused RMS norm + quantize kernel (norm_quantize.cu)
// so that both produce the same bytes. The source row may be in global or shared memory.
#pragma once

#include <cstdint>

#include "cuda/kernels/mmvq_common.cuh"

namespace minfer::cuda::mm {

/// One 32-element Q8 block, 8 lanes (`part` = lane & 7, `mask` = those 8 lanes, all active):
/// lane part holds v = elements part * 4 .. part * 4 + 3 of the block, writes those 4 qs at
/// qs[part * 4 ..] and, from part 0, the block's (d, sum) at *ds.
/// d = max|x| / 127, id = 1 / d (0 when d = 0), q = round_away(x * id) in [-127, 127], d stored
/// rounded to half (quant_legacy.cpp quantize_block_q8); a non-finite element gives d = NaN,
/// qs = 0.
__device__ __forceinline__ void quantize_q8_values(const float (&v)[4], int part, unsigned mask, int8_t* qs,
                                                   float2* ds) {
  bool finite = true;
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    finite = finite && is_finite(v[i]);
    amax = fmaxf(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(mask, amax, o));
    finite = __shfl_xor_sync(mask, static_cast<int>(finite), o) != 0 && finite;
  }
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  uint32_t packed = 0;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int q = finite ? round_away_clamped(__fmul_rn(v[i], id), -127, 127) : 0;
    sum += q;
    packed |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * i);
  }
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(mask, sum, o);
  *reinterpret_cast<uint32_t*>(qs + part * 4) = packed;
  if (part == 0) {
    const float dh = finite ? half_to_float(float_to_half_bits(d)) : __uint_as_float(0x7FC00000u);
    *ds = make_float2(dh, __int_as_float(finite ? sum : 0));
  }
}

/// quantize_q8_values of the block at `src` (global or shared memory): lane part reads
/// src[part * 4 .. part * 4 + 3].
__device__ __forceinline__ void quantize_q8_block(const float* src, int part, unsigned mask, int8_t* qs,
                                                  float2* ds) {
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = src[part * 4 + i];
  quantize_q8_values(v, part, mask, qs, ds);
}

/// One 256-element Q8K super-block, the whole warp (all 32 lanes active): lane holds v =
/// elements lane * 8 .. lane * 8 + 7, writes those 8 qs at qs[lane * 8 ..], bsums[0..15] and *d.
/// xm = the element of largest magnitude (first on ties), iscale = -127 / xm,
/// q = round_even(iscale * x) in [-128, 127], d = 1 / iscale, bsums = sums of 16 q
/// (quant_kquants.cpp quantize_row_q8_K). An all-zero super-block gives d = 0, q = 0; a
/// non-finite element gives d = NaN, q = 0.
__device__ __forceinline__ void quantize_q8k_values(const float (&v)[8], int lane, int8_t* qs, int16_t* bsums,
                                                    float* d) {
  bool finite = true;
  float best_a = 0.0f, best_x = 0.0f;
  int best_i = 1 << 30;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    finite = finite && is_finite(v[e]);
    if (fabsf(v[e]) > best_a) {  // strict: the first of equal magnitudes wins
      best_a = fabsf(v[e]);
      best_x = v[e];
      best_i = lane * 8 + e;
    }
  }
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) {
    const float oa = __shfl_xor_sync(kFullMask, best_a, o);
    const float ox = __shfl_xor_sync(kFullMask, best_x, o);
    const int oi = __shfl_xor_sync(kFullMask, best_i, o);
    if (oa > best_a || (oa == best_a && oi < best_i)) {
      best_a = oa;
      best_x = ox;
      best_i = oi;
    }
  }
  finite = __all_sync(kFullMask, finite);
  int8_t* dst = qs + lane * 8;
  if (!finite || best_a == 0.0f) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(0u, 0u);
    if ((lane & 1) == 0) bsums[lane >> 1] = 0;
    if (lane == 0) *d = finite ? 0.0f : __uint_as_float(0x7FC00000u);
    return;
  }
  const float iscale = __fdiv_rn(-127.0f, best_x);
  uint32_t w[2] = {0u, 0u};
  int sum = 0;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int q = round_even_clamped(__fmul_rn(iscale, v[e]), -128, 127);
    sum += q;
    w[e / 4] |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * (e % 4));
  }
  sum += __shfl_xor_sync(kFullMask, sum, 1);  // lanes 2g and 2g+1 hold group g's 16 elements
  *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
  if ((lane & 1) == 0) bsums[lane >> 1] = static_cast<int16_t>(sum);
  if (lane == 0) *d = __fdiv_rn(1.0f, iscale);
}

/// quantize_q8k_values of the super-block at `src` (global or shared memory): lane reads
/// src[lane * 8 .. lane * 8 + 7].
__device__ __forceinline__ void quantize_q8k_block(const float* src, int lane, int8_t* qs, int16_t* bsums,
                                                   float* d) {
  float v[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = src[lane * 8 + e];
  quantize_q8k_values(v, lane, qs, bsums, d);
}

}  // namespace minfer::cuda::mm
