// Packed-weight entry points of one SIMD level (see level_api.h, packed_legacy.h,
// packed_kquants.h). gemm_packed runs the packed kernels for fewer than kMinTiledTokensPacked
// tokens and otherwise the tiled kernel on rows rebuilt from the packed form. Included only by
// packed_avx2.cpp / packed_avx512.cpp.
#pragma once

#include <cstdint>
#include <new>

#include "cpu/simd/gemm_driver.h"
#include "cpu/simd/level_api.h"
#include "cpu/simd/levels.h"
#include "cpu/simd/packed_driver.h"
#include "cpu/simd/packed_kquants.h"
#include "cpu/simd/packed_legacy.h"
#include "cpu/simd/scratch.h"
#include "quant/quant.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {
namespace {

template <TensorType T, class K>
size_t packed_bytes(int64_t k, int64_t rows) {
  const int64_t nb = detail::check_pack(T, k, rows, SIZE_MAX);
  return static_cast<size_t>((rows + kW - 1) / kW) * static_cast<size_t>(nb) * K::kBytes;
}

template <TensorType T, class K>
void pack(int64_t k, const void* w, size_t w_row_bytes, int64_t rows, void* dst) {
  const int64_t nb = detail::check_pack(T, k, rows, w_row_bytes);
  K::pack(nb, static_cast<const uint8_t*>(w), w_row_bytes, rows, static_cast<uint8_t*>(dst));
}

template <class K, int NT>
void run_group(const uint8_t* grp, int64_t nb, const typename K::Act* acts, float* lanes, int64_t g0, int64_t row0,
               int64_t nr, int64_t t0, float* out, int64_t out_stride) {
  alignas(64) float res[4 * kW];
  packed_group<K, NT>(grp, nb, acts, lanes, res);
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < kW; ++r) {
      const int64_t j = g0 + r;
      if (j >= row0 && j < row0 + nr) out[(j - row0) + (t0 + t) * out_stride] = res[t * kW + r];
    }
}

template <TensorType T, class K, class G>
void gemm_packed(int64_t k, const void* packed, int64_t rows, int64_t row0, int64_t nr, const void* a,
                 size_t a_row_bytes, int64_t nc, float* out, int64_t out_stride) {
  const int64_t nb = detail::check_gemm_packed(T, k, rows, row0, nr, a_row_bytes, nc, out_stride);
  if (nr == 0 || nc == 0) return;
  const auto* pk = static_cast<const uint8_t*>(packed);
  const size_t group_bytes = static_cast<size_t>(nb) * K::kBytes;
  if (nc >= kMinTiledTokensPacked) {
    // The tiled kernel asks for rows in increasing order: rebuild a whole group at a time.
    const size_t rb = row_bytes(T, k);
    auto* rows_buf = static_cast<uint8_t*>(scratch(ScratchSlot::kRows, rb * kW));
    int64_t cached = -1;
    gemm_tiled<G, kTileRows>(
        nb * type_traits(T).block_size / G::kUnit,
        [&](int64_t i) {
          const int64_t j = row0 + i;
          if (j / kW != cached) {
            cached = j / kW;
            K::unpack_group(pk + static_cast<size_t>(cached) * group_bytes, nb, rows_buf, rb);
          }
          return static_cast<const uint8_t*>(rows_buf + static_cast<size_t>(j % kW) * rb);
        },
        nr, a, a_row_bytes, nc, out, out_stride);
    return;
  }
  using Act = typename K::Act;
  const size_t act_bytes = K::act_bytes(nb);
  auto* act_mem = static_cast<uint8_t*>(scratch(ScratchSlot::kPackedActData, act_bytes * static_cast<size_t>(nc)));
  auto* acts = static_cast<Act*>(scratch(ScratchSlot::kPackedActs, sizeof(Act) * static_cast<size_t>(nc)));
  auto* lanes = static_cast<float*>(scratch(ScratchSlot::kLanes, sizeof(float) * 32 * 4 * kW));
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int64_t t = 0; t < nc; ++t)
    new (acts + t) Act(K::make_act(ab + static_cast<size_t>(t) * a_row_bytes, nb, act_mem + static_cast<size_t>(t) * act_bytes));
  for (int64_t G0 = row0 / kW; G0 * kW < row0 + nr; ++G0) {
    const uint8_t* grp = pk + static_cast<size_t>(G0) * group_bytes;
    int64_t t0 = 0;
    for (; t0 + 4 <= nc; t0 += 4) run_group<K, 4>(grp, nb, acts + t0, lanes, G0 * kW, row0, nr, t0, out, out_stride);
    switch (nc - t0) {
      case 3: run_group<K, 3>(grp, nb, acts + t0, lanes, G0 * kW, row0, nr, t0, out, out_stride); break;
      case 2: run_group<K, 2>(grp, nb, acts + t0, lanes, G0 * kW, row0, nr, t0, out, out_stride); break;
      case 1: run_group<K, 1>(grp, nb, acts + t0, lanes, G0 * kW, row0, nr, t0, out, out_stride); break;
      default: break;
    }
  }
}

template <TensorType T, class K, class G>
void set_packed(CpuKernels& k) {
  TypeKernels& e = k.types[static_cast<size_t>(detail::kernel_type_index(T))];
  e.packed_bytes = packed_bytes<T, K>;
  e.pack = pack<T, K>;
  e.gemm_packed = gemm_packed<T, K, G>;
  e.pack_rows = kW;
}

}  // namespace

void fill_packed(CpuKernels& k) {
  set_packed<TensorType::Q4_0, PackedLegacyKernel<block_q4_0>, GemmQ4_0>(k);
  set_packed<TensorType::Q4_1, PackedLegacyKernel<block_q4_1>, GemmQ4_1>(k);
  set_packed<TensorType::Q5_0, PackedLegacyKernel<block_q5_0>, GemmQ5_0>(k);
  set_packed<TensorType::Q5_1, PackedLegacyKernel<block_q5_1>, GemmQ5_1>(k);
#if MINFER_SIMD_AVX512
  // avx2 has no packed Q8_0: its VPMADDUBSW pairs of (w + 128) * a would overflow int16 (and no
  // tiled Q8_0 kernel either).
  set_packed<TensorType::Q8_0, PackedLegacyKernel<block_q8_0>, GemmQ8_0>(k);
#endif
  set_packed<TensorType::Q4_K, PackedK45Kernel<false>, GemmQ4_K>(k);
  set_packed<TensorType::Q5_K, PackedK45Kernel<true>, GemmQ5_K>(k);
  set_packed<TensorType::Q6_K, PackedK6Kernel, GemmQ6_K>(k);
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
