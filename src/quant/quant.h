// Tensor types minfer computes with: block layouts (blocks.h), reference dequantization,
// reference quantization and reference row dot products. The layouts are ggml's
// (ggml/src/ggml-common.h); the fixtures in ../shared/fixtures/quant/ hold the ground truth.
//
// Dot products pair a weight row with an activation row quantized to the weight type's
// `vec_dot_type`: Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants, and the
// type itself for F16/BF16 (F32 pairs with F32).
//
// The reference kernels, what is bit-exact with ggml, the errors they throw and the exact
// accumulation order of the dot products (which SIMD and CUDA kernels are tested against) are
// documented in quant_ref.h; docs/quant.md gives the overview and the measured quantizer error.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace minfer {

/// Dequantize `n` elements (a multiple of block_size) from packed blocks to f32.
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
/// Quantize `n` elements (a multiple of block_size) from f32 to packed blocks.
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
/// Dot product of `n` elements: weight row `w` (this type) and activation row `a` (vec_dot_type).
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);

struct TypeTraits {
  TensorType type;
  int64_t block_size;    ///< elements per block (1 for F32/F16/BF16)
  size_t block_bytes;    ///< bytes per block
  bool quantized;        ///< block-quantized (not F32/F16/BF16)
  TensorType vec_dot_type;
  DequantizeRowFn dequantize_row;  ///< reference (scalar) implementation
  QuantizeRowFn quantize_row;      ///< reference (scalar) implementation
  VecDotFn vec_dot;                ///< reference (scalar) implementation; null for Q8_1/Q8_K
};

/// Traits of a type minfer computes with, or nullptr (e.g. Q2_K, IQ types).
const TypeTraits* find_type_traits(TensorType type);

/// Like find_type_traits but throws minfer::Error "tensor type X is not supported" when absent.
const TypeTraits& type_traits(TensorType type);

/// Bytes of one row of `n` elements. Throws minfer::Error naming the row length and the type
/// when `n` is negative, not a multiple of the block size, or the byte count overflows size_t,
/// and "tensor type X is not supported" for a type without traits.
size_t row_bytes(TensorType type, int64_t n);

/// Block size / bytes per block for any GGUF type ggml defines (including types minfer cannot
/// compute with), so the GGUF reader can size every tensor. false for an unknown type id.
bool type_block_layout(TensorType type, int64_t* block_size, size_t* block_bytes);

}  // namespace minfer
