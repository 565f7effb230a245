// Reference dequantization of the K-quants (Q4_K, Q5_K, Q6_K, Q8_K) and the Q8_K activation
// quantizer. Dequantization is bit-exact with ggml-quants.c dequantize_row_q*_K: the sub-block
// scale and min are formed first (d * sc, dmin * m), then y = (d * sc) * q - (dmin * m).
// The Q4_K/Q5_K/Q6_K quantizers (a search) live in kquant_search.cpp.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/quant_ref.h"
#include "quant/rounding.h"
#include "quant/row_check.h"

namespace minfer::ref {

using quant_detail::blocks_in_row;
using quant_detail::check_finite;
using quant_detail::round_even_clamped;

namespace {

/// Q4_K and Q5_K differ only in how q is stored.
template <typename Block>
void dequantize_q45_K(const Block& b, const uint8_t q[kQKK], float* y) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, b.scales, &sc, &m);
    const float scale = d * static_cast<float>(sc);
    const float offset = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l)
      y[32 * j + l] = scale * static_cast<float>(q[32 * j + l]) - offset;
  }
}

}  // namespace

void dequantize_row_q4_K(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_in_row("dequantize", TensorType::Q4_K, n, kQKK);
  const auto* b = static_cast<const block_q4_K*>(src);
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i) {
    unpack_q4_K(b[i], q);
    dequantize_q45_K(b[i], q, dst + i * kQKK);
  }
}

void dequantize_row_q5_K(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_in_row("dequantize", TensorType::Q5_K, n, kQKK);
  const auto* b = static_cast<const block_q5_K*>(src);
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i) {
    unpack_q5_K(b[i], q);
    dequantize_q45_K(b[i], q, dst + i * kQKK);
  }
}

void dequantize_row_q6_K(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_in_row("dequantize", TensorType::Q6_K, n, kQKK);
  const auto* b = static_cast<const block_q6_K*>(src);
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i) {
    unpack_q6_K(b[i], q);
    const float d = fp16_to_fp32(b[i].d);
    float* y = dst + i * kQKK;
    for (int g = 0; g < 16; ++g) {
      const float scale = d * static_cast<float>(b[i].scales[g]);
      for (int l = 0; l < 16; ++l)
        y[16 * g + l] = scale * static_cast<float>(static_cast<int>(q[16 * g + l]) - 32);
    }
  }
}

void dequantize_row_q8_K(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks_in_row("dequantize", TensorType::Q8_K, n, kQKK);
  const auto* b = static_cast<const block_q8_K*>(src);
  for (int64_t i = 0; i < nb; ++i)
    for (int e = 0; e < kQKK; ++e) dst[i * kQKK + e] = b[i].d * static_cast<float>(b[i].qs[e]);
}

void quantize_row_q8_K(const float* src, void* dst, int64_t n) {
  constexpr TensorType kType = TensorType::Q8_K;
  const int64_t nb = blocks_in_row("quantize", kType, n, kQKK);
  auto* b = static_cast<block_q8_K*>(dst);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kQKK;
    check_finite(kType, x, kQKK, i * kQKK);
    float amax = 0.0f;
    float xm = 0.0f;  // the element of largest magnitude, the first one on ties
    for (int e = 0; e < kQKK; ++e) {
      if (std::fabs(x[e]) > amax) {
        amax = std::fabs(x[e]);
        xm = x[e];
      }
    }
    std::memset(b[i].bsums, 0, sizeof(b[i].bsums));
    if (amax == 0.0f) {
      b[i].d = 0.0f;
      std::memset(b[i].qs, 0, sizeof(b[i].qs));
      continue;
    }
    // xm maps to -127. For |xm| below ~2^-120 iscale is infinite and d = 1/iscale = 0: such a
    // block dequantizes to zeros, within 2^-120 of the input.
    const float iscale = -127.0f / xm;
    for (int e = 0; e < kQKK; ++e)
      b[i].qs[e] = static_cast<int8_t>(round_even_clamped(iscale * x[e], -128, 127));
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += b[i].qs[16 * g + l];
      b[i].bsums[g] = static_cast<int16_t>(sum);
    }
    b[i].d = 1.0f / iscale;
  }
}

}  // namespace minfer::ref
