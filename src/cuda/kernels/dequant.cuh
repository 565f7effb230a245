// Dequantization of one element of a row on the device (and, for tests, on the host), for every
// weight type minfer computes with.
// Layouts: quant/blocks.h (ggml-common.h block_q4_0 ... block_q6_K). The arithmetic is the CPU
// reference's (quant_ref.h, ggml-quants.c dequantize_row_*) operation for operation, with the
// rounded-operation wrappers of common.cuh so nvcc cannot fuse a multiply and an add, which makes
// every element the CPU's float bit for bit:
//   Q4_0 (q - 8) * d        Q4_1 q * d + m        Q5_0 (q - 16) * d      Q5_1 q * d + m
//   Q8_0 q * d              Q4_K/Q5_K (d * sc) * q - (dmin * m)          Q6_K (d * sc) * (q - 32)
//   F16 / BF16 exact widening, F32 a copy.
// Rows are read as bytes (blocks are 2-byte aligned: every field read is a byte or an aligned u16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/types.h"
#include "cuda/kernels/common.cuh"
#include "quant/blocks.h"

namespace minfer::cuda {

/// Elements per block of the types dequant_element handles (1 for F32/F16/BF16).
__host__ __device__ constexpr int64_t dequant_block_size(TensorType t) {
  return (t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::Q6_K) ? 256
         : (t == TensorType::F32 || t == TensorType::F16 || t == TensorType::BF16) ? 1
                                                                                   : 32;
}

/// Bytes per block of the types dequant_element handles.
__host__ __device__ constexpr int64_t dequant_block_bytes(TensorType t) {
  switch (t) {
    case TensorType::F32: return 4;
    case TensorType::F16: return 2;
    case TensorType::BF16: return 2;
    case TensorType::Q4_0: return sizeof(block_q4_0);
    case TensorType::Q4_1: return sizeof(block_q4_1);
    case TensorType::Q5_0: return sizeof(block_q5_0);
    case TensorType::Q5_1: return sizeof(block_q5_1);
    case TensorType::Q8_0: return sizeof(block_q8_0);
    case TensorType::Q4_K: return sizeof(block_q4_K);
    case TensorType::Q5_K: return sizeof(block_q5_K);
    case TensorType::Q6_K: return sizeof(block_q6_K);
    default: return 0;
  }
}

/// The 4-bit value of element j (0..31) of a legacy 32-element block: low nibble of qs[j] for
/// j < 16, high nibble of qs[j - 16] above.
__host__ __device__ __forceinline__ int legacy_nibble(const uint8_t* qs, int j) {
  return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
}

/// Bit j of the little-endian u32 `qh` of a Q5_0/Q5_1 block (bit 4 of element j).
__host__ __device__ __forceinline__ int q5_high_bit(const uint8_t* qh, int j) {
  return (qh[j >> 3] >> (j & 7)) & 1;
}

/// Sub-block j's 6-bit scale and min of a Q4_K/Q5_K block (blocks.h k4_scale_min).
__host__ __device__ __forceinline__ void k4_scale_min_dev(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/// Element e of a row of type T that starts at `row`.
template <TensorType T>
__host__ __device__ __forceinline__ float dequant_element(const uint8_t* row, int64_t e) {
  if constexpr (T == TensorType::F32) {
    return reinterpret_cast<const float*>(row)[e];
  } else if constexpr (T == TensorType::F16) {
    return half_bits_to_float(reinterpret_cast<const uint16_t*>(row)[e]);
  } else if constexpr (T == TensorType::BF16) {
    return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[e]);
  } else if constexpr (T == TensorType::Q4_0) {
    const uint8_t* b = row + (e / 32) * sizeof(block_q4_0);
    const int j = static_cast<int>(e % 32);
    const float d = half_bits_to_float(load_u16(b + offsetof(block_q4_0, d)));
    const int q = legacy_nibble(b + offsetof(block_q4_0, qs), j);
    return mul_rn(static_cast<float>(q - 8), d);
  } else if constexpr (T == TensorType::Q4_1) {
    const uint8_t* b = row + (e / 32) * sizeof(block_q4_1);
    const int j = static_cast<int>(e % 32);
    const float d = half_bits_to_float(load_u16(b + offsetof(block_q4_1, d)));
    const float m = half_bits_to_float(load_u16(b + offsetof(block_q4_1, m)));
    const int q = legacy_nibble(b + offsetof(block_q4_1, qs), j);
    return add_rn(mul_rn(static_cast<float>(q), d), m);
  } else if constexpr (T == TensorType::Q5_0) {
    const uint8_t* b = row + (e / 32) * sizeof(block_q5_0);
    const int j = static_cast<int>(e % 32);
    const float d = half_bits_to_float(load_u16(b + offsetof(block_q5_0, d)));
    const int q = legacy_nibble(b + offsetof(block_q5_0, qs), j) |
                  q5_high_bit(b + offsetof(block_q5_0, qh), j) << 4;
    return mul_rn(static_cast<float>(q - 16), d);
  } else if constexpr (T == TensorType::Q5_1) {
    const uint8_t* b = row + (e / 32) * sizeof(block_q5_1);
    const int j = static_cast<int>(e % 32);
    const float d = half_bits_to_float(load_u16(b + offsetof(block_q5_1, d)));
    const float m = half_bits_to_float(load_u16(b + offsetof(block_q5_1, m)));
    const int q = legacy_nibble(b + offsetof(block_q5_1, qs), j) |
                  q5_high_bit(b + offsetof(block_q5_1, qh), j) << 4;
    return add_rn(mul_rn(static_cast<float>(q), d), m);
  } else if constexpr (T == TensorType::Q8_0) {
    const uint8_t* b = row + (e / 32) * sizeof(block_q8_0);
    const int j = static_cast<int>(e % 32);
    const float d = half_bits_to_float(load_u16(b + offsetof(block_q8_0, d)));
    const int8_t q = reinterpret_cast<const int8_t*>(b + offsetof(block_q8_0, qs))[j];
    return mul_rn(static_cast<float>(q), d);
  } else if constexpr (T == TensorType::Q4_K || T == TensorType::Q5_K) {
    using Block = std::conditional_t<T == TensorType::Q4_K, block_q4_K, block_q5_K>;
    const uint8_t* b = row + (e / 256) * sizeof(Block);
    const int k = static_cast<int>(e % 256);
    const int j = k / 32, l = k % 32;
    const float d = half_bits_to_float(load_u16(b + offsetof(Block, d)));
    const float dmin = half_bits_to_float(load_u16(b + offsetof(Block, dmin)));
    int sc, m;
    k4_scale_min_dev(j, b + offsetof(Block, scales), &sc, &m);
    const uint8_t byte = b[offsetof(Block, qs) + 32 * (j / 2) + l];
    int q = (j & 1) ? byte >> 4 : byte & 0xF;
    if constexpr (T == TensorType::Q5_K) q |= ((b[offsetof(block_q5_K, qh) + l] >> j) & 1) << 4;
    const float scale = mul_rn(d, static_cast<float>(sc));
    const float offset = mul_rn(dmin, static_cast<float>(m));
    return sub_rn(mul_rn(scale, static_cast<float>(q)), offset);
  } else if constexpr (T == TensorType::Q6_K) {
    const uint8_t* b = row + (e / 256) * sizeof(block_q6_K);
    const int k = static_cast<int>(e % 256);
    const int h = k / 128, r = (k / 32) % 4, l = k % 32;
    const uint8_t lo_byte = b[offsetof(block_q6_K, ql) + 64 * h + l + 32 * (r & 1)];
    const int lo = r < 2 ? (lo_byte & 0xF) : (lo_byte >> 4);
    const int hi = (b[offsetof(block_q6_K, qh) + 32 * h + l] >> (2 * r)) & 3;
    const int q = lo | hi << 4;
    const float d = half_bits_to_float(load_u16(b + offsetof(block_q6_K, d)));
    const int8_t sc = reinterpret_cast<const int8_t*>(b + offsetof(block_q6_K, scales))[k / 16];
    const float scale = mul_rn(d, static_cast<float>(sc));
    return mul_rn(scale, static_cast<float>(q - 32));
  } else {
    static_assert(T == TensorType::F32, "dequant_element: type without a device kernel");
    return 0.0f;
  }
}

}  // namespace minfer::cuda
