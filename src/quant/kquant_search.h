// Shared pieces of minfer's K-quant scale searches (kquant_search_q45.cpp for Q4_K/Q5_K,
// kquant_search_q6.cpp for Q6_K). Internal to src/quant.
//
// The searches minimise the plain squared error sum (y - x)^2 of the dequantized super-block
// (y computed with exactly the f32 arithmetic of dequantization), which is what the row RMSE
// measures. Each one works in three steps:
//   1. per sub-block, a continuous least-squares fit of its scale (and min): a scan over
//      candidate inverse scales, each followed by a least-squares solve for the levels it
//      produced, then Lloyd iterations (best levels for the fit <-> best fit for the levels);
//   2. the super-block scale(s) from the largest sub-block fit, rounded to half, and the integer
//      sub-block scales rounded from the fits;
//   3. alternating refinement: each sub-block tries the integer scales (and mins) next to its
//      current ones; then the super-block scale(s) are refit by least squares for the chosen
//      integers and levels and the nearest half values around the fit are tried. Every
//      candidate is scored by the exact squared error; the best state seen is kept.
#pragma once

#include <cstdint>

#include "core/fp16.h"

namespace minfer::quant_detail {

/// The half `h` moved by `k` representable magnitudes (sign kept), clamped to [0, 65504] in
/// magnitude; used to try the half values next to a least-squares optimum.
inline uint16_t half_neighbor(uint16_t h, int k) {
  const int sign = h & 0x8000;
  int mag = (h & 0x7FFF) + k;
  if (mag < 0) mag = 0;
  if (mag > 0x7BFF) mag = 0x7BFF;
  return static_cast<uint16_t>(sign | mag);
}

}  // namespace minfer::quant_detail
