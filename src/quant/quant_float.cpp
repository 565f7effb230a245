// Reference kernels of the float types: F32 (copy), F16 and BF16 (one conversion per element,
// core/fp16.h) and their dot products (accumulation contract in quant_ref.h).
#include <cstring>

#include "core/fp16.h"
#include "quant/dot_lanes.h"
#include "quant/quant_ref.h"
#include "quant/row_check.h"

namespace minfer::ref {

using quant_detail::blocks_in_row;
using quant_detail::DotLanes;

void dequantize_row_f32(const void* src, float* dst, int64_t n) {
  blocks_in_row("dequantize", TensorType::F32, n, 1);
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void quantize_row_f32(const float* src, void* dst, int64_t n) {
  blocks_in_row("quantize", TensorType::F32, n, 1);
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

float vec_dot_f32(int64_t n, const void* w, const void* a) {
  blocks_in_row("vec_dot", TensorType::F32, n, 1);
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  DotLanes acc;
  for (int64_t i = 0; i < n; ++i) {
    const float term = x[i] * y[i];
    acc.add(i, term);
  }
  return acc.finish();
}

void dequantize_row_f16(const void* src, float* dst, int64_t n) {
  blocks_in_row("dequantize", TensorType::F16, n, 1);
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

void quantize_row_f16(const float* src, void* dst, int64_t n) {
  blocks_in_row("quantize", TensorType::F16, n, 1);
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

float vec_dot_f16(int64_t n, const void* w, const void* a) {
  blocks_in_row("vec_dot", TensorType::F16, n, 1);
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  DotLanes acc;
  for (int64_t i = 0; i < n; ++i) acc.add(i, fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
  return acc.finish();
}

void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
  blocks_in_row("dequantize", TensorType::BF16, n, 1);
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
}

void quantize_row_bf16(const float* src, void* dst, int64_t n) {
  blocks_in_row("quantize", TensorType::BF16, n, 1);
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
}

float vec_dot_bf16(int64_t n, const void* w, const void* a) {
  blocks_in_row("vec_dot", TensorType::BF16, n, 1);
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  DotLanes acc;
  for (int64_t i = 0; i < n; ++i) acc.add(i, bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
  return acc.finish();
}

}  // namespace minfer::ref
