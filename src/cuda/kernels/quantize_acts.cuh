// Device layout of quantized activations and the kernels that fill it (quantize_acts.cu).
//
// The numbers are the CPU's (src/quant/quant_ref.h quantize_row_q8_0 / _q8_1 / _q8_K / _f16 /
// _bf16 on each token row); only the arrangement differs, into planes that the matrix kernels
// read with aligned vector loads:
//   Q8  (for Q4_0, Q5_0, Q8_0 and Q4_1, Q5_1 weights; Q8_0 and Q8_1 have the same d and qs):
//       qs   int8   [n][k]           the block's 32 qs at qs + t * k + 32 * b
//       ds   float2 [n][k / 32]      x = d as a float (the block's half d, converted exactly),
//                                    y = bit pattern of the int32 sum of the block's 32 qs
//       (Q8_1's half `s` is not kept: no kernel reads it, quant_ref.h.)
//   Q8K (for Q4_K, Q5_K, Q6_K weights):
//       qs    int8  [n][k]
//       d     float [n][k / 256]
//       bsums int16 [n][k / 256][16]  sums of 16 consecutive qs, as in block_q8_K
//   F16 / BF16: uint16 [n][stride], stride = k rounded up to 8 (16-byte aligned rows; the
//       padding is written as 0).
//   F32 weights read x itself.
// Every plane starts at a multiple of 256 bytes from the buffer start (cudaMalloc alignment).
//
// Input the CPU rejects with an error (a non-finite element in a Q8/Q8K block) cannot raise one
// on the device: such a block gets d = NaN and qs = 0, so every output that reads it is NaN.
// A Q8 block whose half d overflows (max |x| beyond 127 * 65504, also an error on the CPU) keeps
// d = inf and gives inf/NaN outputs.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace minfer::cuda::mm {

/// The activation format the kernels of a weight type read.
enum class ActKind { F32, F16, BF16, Q8, Q8K };

/// ActKind of weights of `type`; false when the type has no kernel.
bool act_kind_for(TensorType type, ActKind* kind);

/// Where each plane of the quantized activations of x [k, n] lies (bytes from the start of the
/// buffer). Defined for k a positive multiple of the block size (32 for Q8, 256 for Q8K).
struct ActLayout {
  ActKind kind = ActKind::F32;
  int64_t k = 0;
  int64_t n = 0;
  int64_t nb = 0;          ///< blocks per token row (Q8: k / 32, Q8K: k / 256)
  int64_t stride = 0;      ///< F16/BF16: elements between token rows
  size_t qs_off = 0;       ///< Q8/Q8K
  size_t ds_off = 0;       ///< Q8: float2 planes; Q8K: float d
  size_t bsums_off = 0;    ///< Q8K
  size_t total = 0;        ///< bytes of the whole buffer (0 for F32)
};

ActLayout act_layout(ActKind kind, int64_t k, int64_t n);

/// Device views of the planes (pointers already offset).
struct Q8View {
  const int8_t* qs;
  const float2* ds;
  int64_t k;
  int64_t nb;
};
struct Q8KView {
  const int8_t* qs;
  const float* d;
  const int16_t* bsums;
  int64_t k;
  int64_t nb;
};
struct HalfView {
  const uint16_t* h;
  int64_t stride;
};

inline Q8View q8_view(const ActLayout& L, const void* buf) {
  const auto* b = static_cast<const uint8_t*>(buf);
  return {reinterpret_cast<const int8_t*>(b + L.qs_off),
          reinterpret_cast<const float2*>(b + L.ds_off), L.k, L.nb};
}
inline Q8KView q8k_view(const ActLayout& L, const void* buf) {
  const auto* b = static_cast<const uint8_t*>(buf);
  return {reinterpret_cast<const int8_t*>(b + L.qs_off),
          reinterpret_cast<const float*>(b + L.ds_off),
          reinterpret_cast<const int16_t*>(b + L.bsums_off), L.k, L.nb};
}
inline HalfView half_view(const ActLayout& L, const void* buf) {
  return {static_cast<const uint16_t*>(buf), L.stride};
}

/// Fills the buffer described by `L` from x [k, n] (f32, 4-byte aligned). Returns false when a
/// launch failed (recorded by MINFER_LAUNCH_CHECK).
bool launch_quantize_acts(const ActLayout& L, const float* x, void* qx, cudaStream_t stream);

}  // namespace minfer::cuda::mm
