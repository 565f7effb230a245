// Entry points of one SIMD level (namespace avx2 or avx512, chosen by the compile flags of the
// including file, see isa.h), shared by that level's translation units: vecdot_<level>.cpp
// defines the vec_dot_* and row-at-a-time gemm_*, gemm_<level>.cpp the tiled gemm_*,
// packed_<level>.cpp the packed-weight kernels, table_<level>.cpp fills the CpuKernels table. Signatures are those of kernels.h.
#pragma once

#include "cpu/simd/isa.h"
#include "cpu/simd/kernels.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {

#define MINFER_SIMD_DECLARE(name)                                                               \
  float vec_dot_##name(int64_t k, const void* w, const void* a);                                \
  void gemm_##name(int64_t k, const void* w, size_t w_row_bytes, int64_t nr, const void* a,      \
                   size_t a_row_bytes, int64_t nc, float* out, int64_t out_stride);              \
  void gemm_rows_##name(int64_t k, const void* w, size_t w_row_bytes, int64_t nr, const void* a, \
                        size_t a_row_bytes, int64_t nc, float* out, int64_t out_stride);
MINFER_SIMD_DECLARE(f32)
MINFER_SIMD_DECLARE(f16)
MINFER_SIMD_DECLARE(bf16)
MINFER_SIMD_DECLARE(q4_0)
MINFER_SIMD_DECLARE(q4_1)
MINFER_SIMD_DECLARE(q5_0)
MINFER_SIMD_DECLARE(q5_1)
MINFER_SIMD_DECLARE(q8_0)
MINFER_SIMD_DECLARE(q4_K)
MINFER_SIMD_DECLARE(q5_K)
MINFER_SIMD_DECLARE(q6_K)
#undef MINFER_SIMD_DECLARE

/// Packed-weight kernels of the types that have them at this level (packed_<level>.cpp): sets
/// packed_bytes, pack, gemm_packed and pack_rows of the entries in k.types.
void fill_packed(CpuKernels& k);

/// Fills the table with this level's kernels (table_<level>.cpp).
void fill(CpuKernels& k);

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
