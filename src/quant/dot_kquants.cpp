// Reference dot products of the K-quants with Q8_K activations: Q4_K, Q5_K, Q6_K x Q8_K.
// Integer sums inside a super-block (sub-block scales applied as integers), one f32 term per
// super-block, terms summed in the 32-lane order of the contract in quant_ref.h.
#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/dot_lanes.h"
#include "quant/quant_ref.h"
#include "quant/row_check.h"

namespace minfer::ref {
namespace {

using quant_detail::blocks_in_row;
using quant_detail::DotLanes;

/// Q4_K / Q5_K: isum = sum_j sc_j * (sum_l q * aq), msum = sum_j m_j * (bsums[2j] + bsums[2j+1]);
/// term = (d * da) * float(isum) - (dmin * da) * float(msum).
template <typename Block>
float dot_q45_K(TensorType type, int64_t n, const void* w, const void* a,
                void (*unpack)(const Block&, uint8_t*)) {
  const int64_t nb = blocks_in_row("vec_dot", type, n, kQKK);
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  DotLanes acc;
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i) {
    unpack(x[i], q);
    int32_t isum = 0;
    int32_t msum = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k4_scale_min(j, x[i].scales, &sc, &m);
      int32_t sub = 0;
      for (int l = 0; l < 32; ++l) sub += q[32 * j + l] * y[i].qs[32 * j + l];
      isum += sc * sub;
      msum += m * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    }
    const float scale = fp16_to_fp32(x[i].d) * y[i].d;
    const float offset = fp16_to_fp32(x[i].dmin) * y[i].d;
    acc.add(i, scale * static_cast<float>(isum) - offset * static_cast<float>(msum));
  }
  return acc.finish();
}

}  // namespace

float vec_dot_q4_K(int64_t n, const void* w, const void* a) {
  return dot_q45_K<block_q4_K>(TensorType::Q4_K, n, w, a, unpack_q4_K);
}

float vec_dot_q5_K(int64_t n, const void* w, const void* a) {
  return dot_q45_K<block_q5_K>(TensorType::Q5_K, n, w, a, unpack_q5_K);
}

/// Q6_K: isum = sum_g scales[g] * (sum_l (q - 32) * aq); term = (d * da) * float(isum).
float vec_dot_q6_K(int64_t n, const void* w, const void* a) {
  const int64_t nb = blocks_in_row("vec_dot", TensorType::Q6_K, n, kQKK);
  const auto* x = static_cast<const block_q6_K*>(w);
  const auto* y = static_cast<const block_q8_K*>(a);
  DotLanes acc;
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i) {
    unpack_q6_K(x[i], q);
    int32_t isum = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t sub = 0;
      for (int l = 0; l < 16; ++l) sub += (q[16 * g + l] - 32) * y[i].qs[16 * g + l];
      isum += x[i].scales[g] * sub;
    }
    acc.add(i, (fp16_to_fp32(x[i].d) * y[i].d) * static_cast<float>(isum));
  }
  return acc.finish();
}

}  // namespace minfer::ref
