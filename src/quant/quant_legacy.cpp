// Reference dequantize / quantize of the legacy 32-element block types Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0 and Q8_1. Layouts: blocks.h. The quantizers reproduce ggml's reference quantizers byte
// for byte (ggml-quants.c quantize_row_*_ref at llama.cpp 80fb11ac): the same scale formula, the
// same f32 operations in the same order, the same rounding rule (rounding.h).
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/quant_ref.h"
#include "quant/rounding.h"
#include "quant/row_check.h"

namespace minfer::ref {
namespace {

using quant_detail::blocks_in_row;
using quant_detail::check_finite;
using quant_detail::half_field;
using quant_detail::round_away_clamped;
using quant_detail::trunc_clamped;

void store_qh(uint32_t v, uint8_t qh[4]) {
  for (int i = 0; i < 4; ++i) qh[i] = static_cast<uint8_t>(v >> (8 * i));
}

/// The element of largest magnitude (the first one when several tie), as a signed value.
float signed_absmax(const float* x) {
  float amax = 0.0f;
  float xm = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      xm = x[j];
    }
  }
  return xm;
}

void min_max(const float* x, float* lo, float* hi) {
  float mn = x[0];
  float mx = x[0];
  for (int j = 1; j < kQK; ++j) {
    if (x[j] < mn) mn = x[j];
    if (x[j] > mx) mx = x[j];
  }
  *lo = mn;
  *hi = mx;
}

}  // namespace

// ---- dequantize --------------------------------------------------------------------------------

void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_in_row("dequantize", TensorType::Q4_0, n, kQK);
  const auto* b = static_cast<const block_q4_0*>(src);
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = static_cast<float>((b[i].qs[j] & 0xF) - 8) * d;
      dst[j + kQK / 2] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q4_1(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_in_row("dequantize", TensorType::Q4_1, n, kQK);
  const auto* b = static_cast<const block_q4_1*>(src);
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    const float m = fp16_to_fp32(b[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      dst[j] = static_cast<float>(b[i].qs[j] & 0xF) * d + m;
      dst[j + kQK / 2] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_row_q5_0(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_in_row("dequantize", TensorType::Q5_0, n, kQK);
  const auto* b = static_cast<const block_q5_0*>(src);
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    const uint32_t qh = q5_high_bits(b[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b[i].qs[j] & 0xF) | static_cast<int>((qh >> j) & 1u) << 4;
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      dst[j] = static_cast<float>(lo - 16) * d;
      dst[j + kQK / 2] = static_cast<float>(hi - 16) * d;
    }
  }
}

void dequantize_row_q5_1(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_in_row("dequantize", TensorType::Q5_1, n, kQK);
  const auto* b = static_cast<const block_q5_1*>(src);
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    const float m = fp16_to_fp32(b[i].m);
    const uint32_t qh = q5_high_bits(b[i].qh);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = (b[i].qs[j] & 0xF) | static_cast<int>((qh >> j) & 1u) << 4;
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      dst[j] = static_cast<float>(lo) * d + m;
      dst[j + kQK / 2] = static_cast<float>(hi) * d + m;
    }
  }
}

void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_in_row("dequantize", TensorType::Q8_0, n, kQK);
  const auto* b = static_cast<const block_q8_0*>(src);
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

void dequantize_row_q8_1(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_in_row("dequantize", TensorType::Q8_1, n, kQK);
  const auto* b = static_cast<const block_q8_1*>(src);
  for (int64_t i = 0; i < nb; ++i, dst += kQK) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK; ++j) dst[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

// ---- quantize ----------------------------------------------------------------------------------

void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
  constexpr TensorType kType = TensorType::Q4_0;
  const int64_t nb = blocks_in_row("quantize", kType, n, kQK);
  auto* b = static_cast<block_q4_0*>(dst);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kQK;
    check_finite(kType, x, kQK, i * kQK);
    const float d = signed_absmax(x) / -8.0f;  // the largest magnitude maps to q = 0 (-8)
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = half_field(kType, i, "d", d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = trunc_clamped(x[j] * id + 8.5f, 0, 15);
      const int hi = trunc_clamped(x[j + kQK / 2] * id + 8.5f, 0, 15);
      b[i].qs[j] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

void quantize_row_q4_1(const float* src, void* dst, int64_t n) {
  constexpr TensorType kType = TensorType::Q4_1;
  const int64_t nb = blocks_in_row("quantize", kType, n, kQK);
  auto* b = static_cast<block_q4_1*>(dst);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kQK;
    check_finite(kType, x, kQK, i * kQK);
    float lo_v, hi_v;
    min_max(x, &lo_v, &hi_v);
    const float d = (hi_v - lo_v) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = half_field(kType, i, "d", d);
    b[i].m = half_field(kType, i, "m", lo_v);
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = trunc_clamped((x[j] - lo_v) * id + 0.5f, 0, 15);
      const int hi = trunc_clamped((x[j + kQK / 2] - lo_v) * id + 0.5f, 0, 15);
      b[i].qs[j] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

void quantize_row_q5_0(const float* src, void* dst, int64_t n) {
  constexpr TensorType kType = TensorType::Q5_0;
  const int64_t nb = blocks_in_row("quantize", kType, n, kQK);
  auto* b = static_cast<block_q5_0*>(dst);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kQK;
    check_finite(kType, x, kQK, i * kQK);
    const float d = signed_absmax(x) / -16.0f;  // the largest magnitude maps to q = 0 (-16)
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = half_field(kType, i, "d", d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = trunc_clamped(x[j] * id + 16.5f, 0, 31);
      const int hi = trunc_clamped(x[j + kQK / 2] * id + 16.5f, 0, 31);
      b[i].qs[j] = static_cast<uint8_t>((lo & 0xF) | (hi & 0xF) << 4);
      qh |= static_cast<uint32_t>(lo >> 4) << j | static_cast<uint32_t>(hi >> 4) << (j + 16);
    }
    store_qh(qh, b[i].qh);
  }
}

void quantize_row_q5_1(const float* src, void* dst, int64_t n) {
  constexpr TensorType kType = TensorType::Q5_1;
  const int64_t nb = blocks_in_row("quantize", kType, n, kQK);
  auto* b = static_cast<block_q5_1*>(dst);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kQK;
    check_finite(kType, x, kQK, i * kQK);
    float lo_v, hi_v;
    min_max(x, &lo_v, &hi_v);
    const float d = (hi_v - lo_v) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = half_field(kType, i, "d", d);
    b[i].m = half_field(kType, i, "m", lo_v);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int lo = trunc_clamped((x[j] - lo_v) * id + 0.5f, 0, 31);
      const int hi = trunc_clamped((x[j + kQK / 2] - lo_v) * id + 0.5f, 0, 31);
      b[i].qs[j] = static_cast<uint8_t>((lo & 0xF) | (hi & 0xF) << 4);
      qh |= static_cast<uint32_t>(lo >> 4) << j | static_cast<uint32_t>(hi >> 4) << (j + 16);
    }
    store_qh(qh, b[i].qh);
  }
}

namespace {

/// Q8_0 and Q8_1 share the scale and the rounding; returns sum(q) for Q8_1's `s`.
int quantize_block_q8(TensorType type, int64_t block, const float* x, uint16_t* d_half,
                      int8_t* qs, float* d_out) {
  check_finite(type, x, kQK, block * kQK);
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::fabs(x[j]) > amax ? std::fabs(x[j]) : amax;
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d_half = half_field(type, block, "d", d);
  int sum = 0;
  for (int j = 0; j < kQK; ++j) {
    qs[j] = static_cast<int8_t>(round_away_clamped(x[j] * id, -127, 127));
    sum += qs[j];
  }
  *d_out = d;
  return sum;
}

}  // namespace

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  const int64_t nb = blocks_in_row("quantize", TensorType::Q8_0, n, kQK);
  auto* b = static_cast<block_q8_0*>(dst);
  float d;
  for (int64_t i = 0; i < nb; ++i)
    quantize_block_q8(TensorType::Q8_0, i, src + i * kQK, &b[i].d, b[i].qs, &d);
}

void quantize_row_q8_1(const float* src, void* dst, int64_t n) {
  const int64_t nb = blocks_in_row("quantize", TensorType::Q8_1, n, kQK);
  auto* b = static_cast<block_q8_1*>(dst);
  for (int64_t i = 0; i < nb; ++i) {
    float d;
    const int sum = quantize_block_q8(TensorType::Q8_1, i, src + i * kQK, &b[i].d, b[i].qs, &d);
    // |s| can reach 32 * max|x| and saturate to +-inf in half (IEEE, as ggml does) while d is
    // finite; minfer's dot products compute the block sum from qs and never read s.
    b[i].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

}  // namespace minfer::ref
