// Element-wise dequantization for the prefill GEMM (gemm.cu): 8 consecutive weights of a row,
// and 8 consecutive activations of a token column from the quantize_acts layout. The values are
// bit-identical to the CPU's dequantize_row_* (ggml-quants.c order, e.g. Q4_K
// (d * sc) * q - (dmin * m); Q8_0 activations float(q) * d), so the GEMM multiplies exactly the
// numbers the CPU reference's dot products represent.
#pragma once

#include <cstdint>

#include "core/types.h"
#include "cuda/kernels/mmvq_common.cuh"
#include "cuda/kernels/quantize_acts.cuh"

namespace minfer::cuda::mm {

__device__ __forceinline__ uint16_t ld_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

/// Weights e0 .. e0+7 (e0 a multiple of 8) of the row at `rp`; elements at or past k read 0
/// (only F32/F16/BF16 rows can end inside a group of 8).
template <TensorType kType>
__device__ __forceinline__ void dequant8(const uint8_t* rp, int64_t e0, int64_t k, float* out) {
  if constexpr (kType == TensorType::F32 || kType == TensorType::F16 ||
                kType == TensorType::BF16) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t e = e0 + i;
      if (e >= k) {
        out[i] = 0.0f;
      } else if constexpr (kType == TensorType::F32) {
        out[i] = reinterpret_cast<const float*>(rp)[e];
      } else if constexpr (kType == TensorType::F16) {
        out[i] = half_to_float(reinterpret_cast<const uint16_t*>(rp)[e]);
      } else {
        out[i] = bf16_to_float(reinterpret_cast<const uint16_t*>(rp)[e]);
      }
    }
  } else if constexpr (kType == TensorType::Q4_K || kType == TensorType::Q5_K) {
    constexpr int kBytes = kType == TensorType::Q4_K ? 144 : 176;
    const uint8_t* bp = rp + (e0 >> 8) * kBytes;
    const int e = static_cast<int>(e0 & 255), j = e >> 5, l0 = e & 31;
    const float d = half_to_float(ld_u16(bp)), dmin = half_to_float(ld_u16(bp + 2));
    const uint8_t* s = bp + 4;
    int sc, m;
    if (j < 4) {
      sc = s[j] & 63;
      m = s[j + 4] & 63;
    } else {
      sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
      m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    const float scale = __fmul_rn(d, static_cast<float>(sc));
    const float offset = __fmul_rn(dmin, static_cast<float>(m));
    const uint8_t* qs = bp + (kType == TensorType::Q4_K ? 16 : 48) + 32 * (j >> 1);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int l = l0 + i;
      int q = (j & 1) ? qs[l] >> 4 : qs[l] & 0xF;
      if constexpr (kType == TensorType::Q5_K) q |= ((bp[16 + l] >> j) & 1) << 4;
      out[i] = __fsub_rn(__fmul_rn(scale, static_cast<float>(q)), offset);
    }
  } else if constexpr (kType == TensorType::Q6_K) {
    const uint8_t* bp = rp + (e0 >> 8) * 210;
    const int e = static_cast<int>(e0 & 255);
    const int h = e >> 7, r = (e >> 5) & 3, l0 = e & 31;
    const float d = half_to_float(ld_u16(bp + 208));
    const float scale = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(bp[192 + (e >> 4)])));
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int l = l0 + i;
      const uint8_t lb = bp[64 * h + l + 32 * (r & 1)];
      const int lo = r < 2 ? lb & 0xF : lb >> 4;
      const int hi = (bp[128 + 32 * h + l] >> (2 * r)) & 3;
      out[i] = __fmul_rn(scale, static_cast<float>((lo | hi << 4) - 32));
    }
  } else {  // legacy 32-element blocks
    constexpr int kBytes = kType == TensorType::Q4_0   ? 18
                           : kType == TensorType::Q4_1 ? 20
                           : kType == TensorType::Q5_0 ? 22
                           : kType == TensorType::Q5_1 ? 24
                                                       : 34;
    const uint8_t* bp = rp + (e0 >> 5) * kBytes;
    const int j0 = static_cast<int>(e0 & 31);
    const float d = half_to_float(ld_u16(bp));
    if constexpr (kType == TensorType::Q8_0) {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        out[i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(bp[2 + j0 + i])), d);
    } else {
      constexpr bool kMin = kType == TensorType::Q4_1 || kType == TensorType::Q5_1;
      constexpr bool kQh = kType == TensorType::Q5_0 || kType == TensorType::Q5_1;
      constexpr int kQsOff = kType == TensorType::Q4_0 ? 2
                             : kType == TensorType::Q4_1 ? 4
                             : kType == TensorType::Q5_0 ? 6
                                                         : 8;
      const float m = kMin ? half_to_float(ld_u16(bp + 2)) : 0.0f;
      uint32_t qh = 0;
      if constexpr (kQh) {
        const uint8_t* hp = bp + (kMin ? 4 : 2);
        qh = static_cast<uint32_t>(ld_u16(hp)) | static_cast<uint32_t>(ld_u16(hp + 2)) << 16;
      }
      const uint8_t* qs = bp + kQsOff;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int j = j0 + i;
        int q = j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
        if constexpr (kQh) q |= static_cast<int>((qh >> j) & 1u) << 4;
        if constexpr (kMin) {
          out[i] = __fadd_rn(__fmul_rn(static_cast<float>(q), d), m);
        } else {
          out[i] = __fmul_rn(static_cast<float>(q - (kQh ? 16 : 8)), d);
        }
      }
    }
  }
}

/// Activations e0 .. e0+7 (e0 a multiple of 8) of token column t, as the CPU's dequantize_row
/// of its quantized activations gives them (F32: x itself); elements at or past k read 0.
template <ActKind kKind>
__device__ __forceinline__ void act8(const void* acts, const ActLayout& L, int64_t t, int64_t e0,
                                     float* out) {
  if constexpr (kKind == ActKind::F32) {
    const float* x = static_cast<const float*>(acts) + t * L.k;
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = e0 + i < L.k ? x[e0 + i] : 0.0f;
  } else if constexpr (kKind == ActKind::F16 || kKind == ActKind::BF16) {
    const uint16_t* h = static_cast<const uint16_t*>(acts) + t * L.stride;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t e = e0 + i;
      out[i] = e >= L.k                     ? 0.0f
               : kKind == ActKind::F16 ? half_to_float(h[e])
                                            : bf16_to_float(h[e]);
    }
  } else if constexpr (kKind == ActKind::Q8) {
    const auto* b = static_cast<const uint8_t*>(acts);
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + L.qs_off) + t * L.k + e0;
    const float d = reinterpret_cast<const float2*>(b + L.ds_off)[t * L.nb + (e0 >> 5)].x;
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = __fmul_rn(static_cast<float>(qs[i]), d);
  } else {
    const auto* b = static_cast<const uint8_t*>(acts);
    const int8_t* qs = reinterpret_cast<const int8_t*>(b + L.qs_off) + t * L.k + e0;
    const float d = reinterpret_cast<const float*>(b + L.ds_off)[t * L.nb + (e0 >> 8)];
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = __fmul_rn(d, static_cast<float>(qs[i]));
  }
}

}  // namespace minfer::cuda::mm
