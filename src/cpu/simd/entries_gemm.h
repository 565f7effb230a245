// gemm_* of one SIMD level (see level_api.h): the tiled kernel (gemm_driver.h) when there are
// at least 3 token rows, otherwise the row-at-a-time path. The float types use gemm_float.h's
// 4 x 2 tiles on avx512 and the row-at-a-time path on avx2; Q8_0 on avx2 always takes the
// row-at-a-time path (its signed weights would overflow VPMADDUBSW against the +128 activations). Included only by gemm_avx2.cpp /
// gemm_avx512.cpp.
#pragma once

#include "cpu/simd/gemm_driver.h"
#include "cpu/simd/gemm_float.h"
#include "cpu/simd/level_api.h"
#include "cpu/simd/levels.h"
#include "quant/quant.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {
namespace {

template <TensorType T, class G, GemmTileFn Rows>
void tiled_or_rows(int64_t k, const void* w, size_t w_row_bytes, int64_t nr, const void* a,
                   size_t a_row_bytes, int64_t nc, float* out, int64_t out_stride) {
  if (nc < kMinTiledTokens) {
    Rows(k, w, w_row_bytes, nr, a, a_row_bytes, nc, out, out_stride);
    return;
  }
  const int64_t nb = detail::check_gemm(T, k, w_row_bytes, nr, a_row_bytes, nc, out_stride);
  if (nr == 0 || nc == 0) return;
  const auto* wb = static_cast<const uint8_t*>(w);
  gemm_tiled<G, kTileRows>(
      nb * type_traits(T).block_size / G::kUnit,
      [wb, w_row_bytes](int64_t j) { return wb + static_cast<size_t>(j) * w_row_bytes; }, nr, a,
      a_row_bytes, nc, out, out_stride);
}

}  // namespace

#define MINFER_SIMD_TILED(name, T, G)                                                           \
  void gemm_##name(int64_t k, const void* w, size_t wr, int64_t nr, const void* a, size_t ar,   \
                   int64_t nc, float* out, int64_t os) {                                        \
    tiled_or_rows<T, G, gemm_rows_##name>(k, w, wr, nr, a, ar, nc, out, os);                    \
  }
#define MINFER_SIMD_ROWS(name)                                                                  \
  void gemm_##name(int64_t k, const void* w, size_t wr, int64_t nr, const void* a, size_t ar,   \
                   int64_t nc, float* out, int64_t os) {                                        \
    gemm_rows_##name(k, w, wr, nr, a, ar, nc, out, os);                                         \
  }
#if MINFER_SIMD_AVX512
#define MINFER_SIMD_FLOAT(name, T, L)                                                           \
  void gemm_##name(int64_t k, const void* w, size_t wr, int64_t nr, const void* a, size_t ar,   \
                   int64_t nc, float* out, int64_t os) {                                        \
    detail::check_gemm(T, k, wr, nr, ar, nc, os);                                               \
    if (nr > 0 && nc > 0) float_gemm<L>(k, w, wr, nr, a, ar, nc, out, os);                      \
  }
MINFER_SIMD_FLOAT(f32, TensorType::F32, F32Row)
MINFER_SIMD_FLOAT(f16, TensorType::F16, F16Row)
MINFER_SIMD_FLOAT(bf16, TensorType::BF16, BF16Row)
#undef MINFER_SIMD_FLOAT
#else
MINFER_SIMD_ROWS(f32)
MINFER_SIMD_ROWS(f16)
MINFER_SIMD_ROWS(bf16)
#endif
MINFER_SIMD_TILED(q4_0, TensorType::Q4_0, GemmQ4_0)
MINFER_SIMD_TILED(q4_1, TensorType::Q4_1, GemmQ4_1)
MINFER_SIMD_TILED(q5_0, TensorType::Q5_0, GemmQ5_0)
MINFER_SIMD_TILED(q5_1, TensorType::Q5_1, GemmQ5_1)
#if MINFER_SIMD_AVX512
MINFER_SIMD_TILED(q8_0, TensorType::Q8_0, GemmQ8_0)
#else
MINFER_SIMD_ROWS(q8_0)
#endif
MINFER_SIMD_TILED(q4_K, TensorType::Q4_K, GemmQ4_K)
MINFER_SIMD_TILED(q5_K, TensorType::Q5_K, GemmQ5_K)
MINFER_SIMD_TILED(q6_K, TensorType::Q6_K, GemmQ6_K)
#undef MINFER_SIMD_TILED
#undef MINFER_SIMD_ROWS

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
