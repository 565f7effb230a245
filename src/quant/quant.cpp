// The registry of types minfer computes with: block geometry (from blocks.h) and the reference
// kernels (quant_ref.h) of each type.
#include "quant/quant.h"

#include <array>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/quant_ref.h"

namespace minfer {
namespace {

using T = TensorType;

constexpr std::array<TypeTraits, 13> kTraits{{
    {T::F32, 1, sizeof(float), false, T::F32, ref::dequantize_row_f32, ref::quantize_row_f32,
     ref::vec_dot_f32},
    {T::F16, 1, sizeof(uint16_t), false, T::F16, ref::dequantize_row_f16, ref::quantize_row_f16,
     ref::vec_dot_f16},
    {T::BF16, 1, sizeof(uint16_t), false, T::BF16, ref::dequantize_row_bf16,
     ref::quantize_row_bf16, ref::vec_dot_bf16},
    {T::Q4_0, kQK, sizeof(block_q4_0), true, T::Q8_0, ref::dequantize_row_q4_0,
     ref::quantize_row_q4_0, ref::vec_dot_q4_0},
    {T::Q4_1, kQK, sizeof(block_q4_1), true, T::Q8_1, ref::dequantize_row_q4_1,
     ref::quantize_row_q4_1, ref::vec_dot_q4_1},
    {T::Q5_0, kQK, sizeof(block_q5_0), true, T::Q8_0, ref::dequantize_row_q5_0,
     ref::quantize_row_q5_0, ref::vec_dot_q5_0},
    {T::Q5_1, kQK, sizeof(block_q5_1), true, T::Q8_1, ref::dequantize_row_q5_1,
     ref::quantize_row_q5_1, ref::vec_dot_q5_1},
    {T::Q8_0, kQK, sizeof(block_q8_0), true, T::Q8_0, ref::dequantize_row_q8_0,
     ref::quantize_row_q8_0, ref::vec_dot_q8_0},
    {T::Q8_1, kQK, sizeof(block_q8_1), true, T::Q8_1, ref::dequantize_row_q8_1,
     ref::quantize_row_q8_1, nullptr},
    {T::Q4_K, kQKK, sizeof(block_q4_K), true, T::Q8_K, ref::dequantize_row_q4_K,
     ref::quantize_row_q4_K, ref::vec_dot_q4_K},
    {T::Q5_K, kQKK, sizeof(block_q5_K), true, T::Q8_K, ref::dequantize_row_q5_K,
     ref::quantize_row_q5_K, ref::vec_dot_q5_K},
    {T::Q6_K, kQKK, sizeof(block_q6_K), true, T::Q8_K, ref::dequantize_row_q6_K,
     ref::quantize_row_q6_K, ref::vec_dot_q6_K},
    {T::Q8_K, kQKK, sizeof(block_q8_K), true, T::Q8_K, ref::dequantize_row_q8_K,
     ref::quantize_row_q8_K, nullptr},
}};

}  // namespace

const TypeTraits* find_type_traits(TensorType type) {
  for (const auto& t : kTraits)
    if (t.type == type) return &t;
  return nullptr;
}

const TypeTraits& type_traits(TensorType type) {
  const TypeTraits* t = find_type_traits(type);
  MINFER_CHECK(t != nullptr, "tensor type {} is not supported", type_name(type));
  return *t;
}

size_t row_bytes(TensorType type, int64_t n) {
  const TypeTraits& t = type_traits(type);
  MINFER_CHECK(n >= 0, "row of {} elements of type {}: the length is negative", n, type_name(type));
  MINFER_CHECK(n % t.block_size == 0,
        "row of {} elements of type {}: not a multiple of the block size {}", n,
        type_name(type), t.block_size);
  const uint64_t blocks = static_cast<uint64_t>(n / t.block_size);
  MINFER_CHECK(blocks <= std::numeric_limits<size_t>::max() / t.block_bytes,
        "row of {} elements of type {}: {} bytes overflow size_t", n, type_name(type),
        static_cast<double>(blocks) * static_cast<double>(t.block_bytes));
  return static_cast<size_t>(blocks) * t.block_bytes;
}

}  // namespace minfer
