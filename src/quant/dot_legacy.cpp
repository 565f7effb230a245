// Reference dot products of the legacy block types with their 8-bit activation blocks:
// Q4_0, Q5_0, Q8_0 x Q8_0 and Q4_1, Q5_1 x Q8_1. Integer sums inside a block, one f32 term per
// block, terms summed in the 32-lane order of the contract in quant_ref.h.
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/dot_lanes.h"
#include "quant/quant_ref.h"
#include "quant/row_check.h"

namespace minfer::ref {
namespace {

using quant_detail::blocks_in_row;
using quant_detail::DotLanes;

/// Unpacks the 32 quantized values of a weight block into `q`, in element order, with the
/// block's zero point applied for the symmetric types (Q4_0: q - 8, Q5_0: q - 16).
void unpack(const block_q4_0& b, int q[kQK]) {
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = (b.qs[j] & 0xF) - 8;
    q[j + kQK / 2] = (b.qs[j] >> 4) - 8;
  }
}
void unpack(const block_q5_0& b, int q[kQK]) {
  const uint32_t qh = q5_high_bits(b.qh);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = ((b.qs[j] & 0xF) | static_cast<int>((qh >> j) & 1u) << 4) - 16;
    q[j + kQK / 2] = ((b.qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1u) << 4) - 16;
  }
}
void unpack(const block_q8_0& b, int q[kQK]) {
  for (int j = 0; j < kQK; ++j) q[j] = b.qs[j];
}
void unpack(const block_q4_1& b, int q[kQK]) {
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = b.qs[j] & 0xF;
    q[j + kQK / 2] = b.qs[j] >> 4;
  }
}
void unpack(const block_q5_1& b, int q[kQK]) {
  const uint32_t qh = q5_high_bits(b.qh);
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = (b.qs[j] & 0xF) | static_cast<int>((qh >> j) & 1u) << 4;
    q[j + kQK / 2] = (b.qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1u) << 4;
  }
}

/// Symmetric weight blocks x Q8_0: term = (dw * da) * float(sum q_w * q_a).
template <typename Block>
float dot_x_q8_0(TensorType type, int64_t n, const void* w, const void* a) {
  const int64_t nb = blocks_in_row("vec_dot", type, n, kQK);
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const block_q8_0*>(a);
  DotLanes acc;
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i) {
    unpack(x[i], q);
    int32_t isum = 0;
    for (int j = 0; j < kQK; ++j) isum += q[j] * y[i].qs[j];
    const float scale = fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
    acc.add(i, scale * static_cast<float>(isum));
  }
  return acc.finish();
}

/// Offset weight blocks (x = d*q + m) x Q8_1:
/// term = (dw * da) * float(sum q_w * q_a) + (mw * da) * float(sum q_a).
template <typename Block>
float dot_x_q8_1(TensorType type, int64_t n, const void* w, const void* a) {
  const int64_t nb = blocks_in_row("vec_dot", type, n, kQK);
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const block_q8_1*>(a);
  DotLanes acc;
  int q[kQK];
  for (int64_t i = 0; i < nb; ++i) {
    unpack(x[i], q);
    int32_t isum = 0;
    int32_t asum = 0;
    for (int j = 0; j < kQK; ++j) {
      isum += q[j] * y[i].qs[j];
      asum += y[i].qs[j];
    }
    const float da = fp16_to_fp32(y[i].d);
    const float scale = fp16_to_fp32(x[i].d) * da;
    const float offset = fp16_to_fp32(x[i].m) * da;
    acc.add(i, scale * static_cast<float>(isum) + offset * static_cast<float>(asum));
  }
  return acc.finish();
}

}  // namespace

float vec_dot_q4_0(int64_t n, const void* w, const void* a) {
  return dot_x_q8_0<block_q4_0>(TensorType::Q4_0, n, w, a);
}
float vec_dot_q5_0(int64_t n, const void* w, const void* a) {
  return dot_x_q8_0<block_q5_0>(TensorType::Q5_0, n, w, a);
}
float vec_dot_q8_0(int64_t n, const void* w, const void* a) {
  return dot_x_q8_0<block_q8_0>(TensorType::Q8_0, n, w, a);
}
float vec_dot_q4_1(int64_t n, const void* w, const void* a) {
  return dot_x_q8_1<block_q4_1>(TensorType::Q4_1, n, w, a);
}
float vec_dot_q5_1(int64_t n, const void* w, const void* a) {
  return dot_x_q8_1<block_q5_1>(TensorType::Q5_1, n, w, a);
}

}  // namespace minfer::ref
