// The group driver of the packed-weight kernels (packed_legacy.h, packed_kquants.h): for one
// group of kW rows and up to 4 tokens, the terms of every block in the contract's lane order
// and the halving fold. Included only from *_avx2.cpp / *_avx512.cpp files (isa.h).
#pragma once

#include <algorithm>

#include "cpu/simd/gemm_pack.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {

/// res[t * kW + r] = dot(row r of the group, token t) for NT tokens over nb blocks. `lanes` is
/// scratch of 32 * NT * kW floats. Term of block b to contract lane b % 32 (lanes start at
/// +0.0); lanes from min(32, nb) on stay +0.0 and are skipped in the fold, which is exact.
template <class K, int NT>
void packed_group(const uint8_t* grp, int64_t nb, const typename K::Act* acts, float* lanes, float* res) {
  const int nl = static_cast<int>(std::min<int64_t>(32, nb));
  for (int i = 0; i < nl * NT * kW; i += kW) TV::store(lanes + i, TV::zero());
  for (int64_t b = 0; b < nb; ++b) {
    F term[NT];
    K::template terms<NT>(grp + static_cast<size_t>(b) * K::kBytes, b, acts, term);
    float* lane = lanes + static_cast<size_t>(b % 32) * NT * kW;
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) TV::store(lane + t * kW, TV::add(TV::loadf(lane + t * kW), term[t]));
  }
  for (int w = 16; w >= 1; w /= 2)
    for (int k = 0; k < w && k + w < nl; ++k)
      for (int i = 0; i < NT * kW; i += kW)
        TV::store(lanes + k * NT * kW + i,
                  TV::add(TV::loadf(lanes + k * NT * kW + i), TV::loadf(lanes + (k + w) * NT * kW + i)));
  std::copy(lanes, lanes + NT * kW, res);
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
