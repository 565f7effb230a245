// vec_dot_* and the row-at-a-time gemm_rows_* of one SIMD level (see level_api.h): every weight
// type, one weight row against one activation row at a time. gemm_rows_* is the decode path
// (nc of 1 or 2) of gemm_* and its whole implementation for the types without a tiled kernel.
// Included only by vecdot_avx2.cpp / vecdot_avx512.cpp.
#pragma once

#include "cpu/simd/level_api.h"
#include "cpu/simd/levels.h"
#include "cpu/simd/vecdot_float.h"
#include "cpu/simd/vecdot_kquants.h"
#include "cpu/simd/vecdot_legacy.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {
namespace {

template <TensorType T, class K, bool kQ8_1>
float legacy_vec_dot(int64_t k, const void* w, const void* a) {
  const int64_t nb = detail::check_row("vec_dot", T, k);
  return legacy_dot_row<K>(nb, w, make_act_row(a, nb, kQ8_1));
}

/// Weight bytes of one block of rows that the row-at-a-time paths run against every token
/// before moving on (L1-sized: each weight row is read from memory once per call, not once per
/// token). Each output is the same dot product either way, so the order changes no bit.
constexpr size_t kRowBlockBytes = size_t{16} << 10;

inline int64_t row_block(size_t w_row_bytes) {
  return std::max<int64_t>(1, static_cast<int64_t>(kRowBlockBytes / std::max<size_t>(w_row_bytes, 1)));
}

template <TensorType T, class K, bool kQ8_1>
void legacy_gemm_rows(int64_t k, const void* w, size_t w_row_bytes, int64_t nr, const void* a,
                      size_t a_row_bytes, int64_t nc, float* out, int64_t out_stride) {
  const int64_t nb = detail::check_gemm(T, k, w_row_bytes, nr, a_row_bytes, nc, out_stride);
  if (nr == 0 || nc == 0) return;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  if (nc == 1) {
    const ActRow row = make_act_row(ab, nb, kQ8_1);
    for (int64_t j = 0; j < nr; ++j) out[j] = legacy_dot_row<K>(nb, wb + static_cast<size_t>(j) * w_row_bytes, row);
    return;
  }
  // Every token's ActRow prepared once (the ActRow array, then each row's data), then blocks of
  // weight rows against all tokens.
  const size_t per = act_row_bytes(nb), head = (static_cast<size_t>(nc) * sizeof(ActRow) + 63) / 64 * 64;
  auto* mem = static_cast<uint8_t*>(scratch(ScratchSlot::kActRows, head + static_cast<size_t>(nc) * per));
  auto* rows = reinterpret_cast<ActRow*>(mem);
  for (int64_t t = 0; t < nc; ++t)
    rows[t] = make_act_row_at(ab + static_cast<size_t>(t) * a_row_bytes, nb, kQ8_1, mem + head + static_cast<size_t>(t) * per);
  const int64_t block = row_block(w_row_bytes);
  for (int64_t j0 = 0; j0 < nr; j0 += block) {
    const int64_t j1 = std::min(nr, j0 + block);
    for (int64_t t = 0; t < nc; ++t)
      for (int64_t j = j0; j < j1; ++j)
        out[j + t * out_stride] = legacy_dot_row<K>(nb, wb + static_cast<size_t>(j) * w_row_bytes, rows[t]);
  }
}

template <TensorType T, float (*Dot)(int64_t, const void*, const void*)>
float checked_dot(int64_t k, const void* w, const void* a) {
  return Dot(detail::check_row("vec_dot", T, k), w, a);
}

/// Pairs loop for the types whose dot needs no per-row preparation.
template <TensorType T, float (*Dot)(int64_t, const void*, const void*)>
void pairs_gemm_rows(int64_t k, const void* w, size_t w_row_bytes, int64_t nr, const void* a,
                     size_t a_row_bytes, int64_t nc, float* out, int64_t out_stride) {
  const int64_t nb = detail::check_gemm(T, k, w_row_bytes, nr, a_row_bytes, nc, out_stride);
  if (nr == 0 || nc == 0) return;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  const int64_t block = row_block(w_row_bytes);
  for (int64_t j0 = 0; j0 < nr; j0 += block) {
    const int64_t j1 = std::min(nr, j0 + block);
    for (int64_t t = 0; t < nc; ++t)
      for (int64_t j = j0; j < j1; ++j)
        out[j + t * out_stride] = Dot(nb, wb + static_cast<size_t>(j) * w_row_bytes,
                                      ab + static_cast<size_t>(t) * a_row_bytes);
  }
}

float f32_row(int64_t n, const void* w, const void* a) { return dot_row_f32(n, w, a); }
float f16_row(int64_t n, const void* w, const void* a) { return dot_row_f16(n, w, a); }
float bf16_row(int64_t n, const void* w, const void* a) { return dot_row_bf16(n, w, a); }
float q4k_row(int64_t n, const void* w, const void* a) { return kquant_dot_row<4>(n, w, a); }
float q5k_row(int64_t n, const void* w, const void* a) { return kquant_dot_row<5>(n, w, a); }
float q6k_row(int64_t n, const void* w, const void* a) { return kquant_dot_row<6>(n, w, a); }

}  // namespace

#define MINFER_SIMD_LEGACY(name, T, K, q81)                                                     \
  float vec_dot_##name(int64_t k, const void* w, const void* a) {                               \
    return legacy_vec_dot<T, K, q81>(k, w, a);                                                  \
  }                                                                                             \
  void gemm_rows_##name(int64_t k, const void* w, size_t wr, int64_t nr, const void* a,         \
                        size_t ar, int64_t nc, float* out, int64_t os) {                        \
    legacy_gemm_rows<T, K, q81>(k, w, wr, nr, a, ar, nc, out, os);                              \
  }
MINFER_SIMD_LEGACY(q4_0, TensorType::Q4_0, LegacyQ4_0, false)
MINFER_SIMD_LEGACY(q5_0, TensorType::Q5_0, LegacyQ5_0, false)
MINFER_SIMD_LEGACY(q8_0, TensorType::Q8_0, LegacyQ8_0, false)
MINFER_SIMD_LEGACY(q4_1, TensorType::Q4_1, LegacyQ4_1, true)
MINFER_SIMD_LEGACY(q5_1, TensorType::Q5_1, LegacyQ5_1, true)
#undef MINFER_SIMD_LEGACY

#define MINFER_SIMD_PAIRS(name, T, Row)                                                         \
  float vec_dot_##name(int64_t k, const void* w, const void* a) {                               \
    return checked_dot<T, Row>(k, w, a);                                                        \
  }                                                                                             \
  void gemm_rows_##name(int64_t k, const void* w, size_t wr, int64_t nr, const void* a,         \
                        size_t ar, int64_t nc, float* out, int64_t os) {                        \
    pairs_gemm_rows<T, Row>(k, w, wr, nr, a, ar, nc, out, os);                                  \
  }
MINFER_SIMD_PAIRS(f32, TensorType::F32, f32_row)
MINFER_SIMD_PAIRS(f16, TensorType::F16, f16_row)
MINFER_SIMD_PAIRS(bf16, TensorType::BF16, bf16_row)
MINFER_SIMD_PAIRS(q4_K, TensorType::Q4_K, q4k_row)
MINFER_SIMD_PAIRS(q5_K, TensorType::Q5_K, q5k_row)
MINFER_SIMD_PAIRS(q6_K, TensorType::Q6_K, q6k_row)
#undef MINFER_SIMD_PAIRS

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
