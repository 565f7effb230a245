// The 32-lane float accumulator that defines the summation order of every reference dot product
// (the contract is written out in quant_ref.h). Internal to src/quant.
#pragma once

#include <cstdint>

namespace minfer::quant_detail {

/// Number of partial sums. A kernel with 8-wide (4 registers), 16-wide (2 registers) or 32-wide
/// (one CUDA warp) vectors reproduces the order exactly.
inline constexpr int kDotLanes = 32;

/// Term t goes to lane t % 32 (float add, lanes start at +0.0f); finish() folds the lanes by
/// halving: lane[k] += lane[k + w] for w = 16, 8, 4, 2, 1, and returns lane[0].
class DotLanes {
 public:
  void add(int64_t t, float term) { lane_[t % kDotLanes] += term; }

  float finish() {
    for (int w = kDotLanes / 2; w >= 1; w /= 2)
      for (int k = 0; k < w; ++k) lane_[k] += lane_[k + w];
    return lane_[0];
  }

 private:
  float lane_[kDotLanes] = {};
};

}  // namespace minfer::quant_detail
