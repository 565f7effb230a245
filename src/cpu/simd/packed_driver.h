// The group driver of the packed-weight kernels (packed_legacy.h, packed_kquants.h): for one
// group of kW rows and up to 4 tokens, the terms of every block in the contract's lane order
// and the halving fold. Included only from *_avx2.cpp / *_avx512.cpp files (isa.h).
#pragma once

#include <algorithm>
#include <type_traits>

#include "cpu/simd/gemm_pack.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {

/// res[t * kW + r] = dot(row r of the group, token t) for NT tokens over nb blocks. `lanes` is
/// scratch of 32 * NT * kW floats. Term of block b to contract lane b % 32 (lanes start at
/// +0.0); lanes from min(32, nb) on stay +0.0 and are skipped in the fold, which is exact.
/// How far ahead of the block being computed the packed weights are prefetched, in bytes.
/// Decode streams every weight once, and the hardware prefetcher alone leaves loads waiting on
/// memory: at the start of each group when groups are short (the demo model's one-super-block
/// output rows, 1,680 bytes a group on AVX2), and within long groups too. Measured on an AVX2
/// EPYC, tg at -t 1 (docs/perf/2026-12-05-cpu-pool-and-prefetch.md): synth Qwen2.5-0.5B Q4_0
/// 15.5-15.8 t/s without, 17.3-18.3 at 4 KB, 17.0-17.4 at 8 KB, 16.3-17.5 at 16 KB.
/// Prefetches never fault, so reading past the last group is harmless.
constexpr size_t kPrefetchAheadBytes = 4096;

template <class K, int NT>
void packed_group(const uint8_t* grp, int64_t nb, const typename K::Act* acts, float* lanes, float* res) {
  const int nl = static_cast<int>(std::min<int64_t>(32, nb));
  // Blocks 0 .. nl - 1 each start their lane: +0.0 + term, stored without reading the lane (no
  // zeroing pass: a 896-wide Q4_0 row group would clear 1.8 KB of lanes for 8 KB of weights);
  // adding +0.0 keeps the contract's start value, so a -0.0 term becomes +0.0 as before.
  const auto block = [&](int64_t b, auto first) {
    const uint8_t* ahead = grp + static_cast<size_t>(b) * K::kBytes + kPrefetchAheadBytes;
    for (size_t off = 0; off < K::kBytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + off), _MM_HINT_T0);
    F term[NT];
    K::template terms<NT>(grp + static_cast<size_t>(b) * K::kBytes, b, acts, term);
    float* lane = lanes + static_cast<size_t>(b % 32) * NT * kW;
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      if constexpr (decltype(first)::value) TV::store(lane + t * kW, TV::add(TV::zero(), term[t]));
      else TV::store(lane + t * kW, TV::add(TV::loadf(lane + t * kW), term[t]));
    }
  };
  for (int64_t b = 0; b < nl; ++b) block(b, std::true_type{});
  for (int64_t b = nl; b < nb; ++b) block(b, std::false_type{});
  for (int w = 16; w >= 1; w /= 2)
    for (int k = 0; k < w && k + w < nl; ++k)
      for (int i = 0; i < NT * kW; i += kW)
        TV::store(lanes + k * NT * kW + i,
                  TV::add(TV::loadf(lanes + k * NT * kW + i), TV::loadf(lanes + (k + w) * NT * kW + i)));
  std::copy(lanes, lanes + NT * kW, res);
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
