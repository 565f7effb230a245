// Internal to src/cpu/simd: the per-level table builders and the argument checks every level
// shares. Compiled without SIMD flags (kernels.cpp, checks.cpp) or with them (the level files);
// nothing here is inline SIMD code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/types.h"
#include "cpu/simd/kernels.h"

namespace minfer::cpu::simd::detail {

/// Fill `k` with the kernels of one level. fill_avx2 / fill_avx512 must only be called when
/// level_supported() says the CPU can run them.
void fill_scalar(CpuKernels& k);
void fill_avx2(CpuKernels& k);
void fill_avx512(CpuKernels& k);

/// The scalar (reference) attn_scores_f16 / attn_pv_f16 of CpuKernels (kernels.h); the SIMD
/// levels call them for a head size that is not a multiple of 8.
void attn_scores_f16_ref(int64_t hd, const uint16_t* k, int64_t k_stride, int64_t n, const float* q, float* s);
void attn_pv_f16_ref(int64_t hd, const uint16_t* v, int64_t v_stride, int64_t n, const float* p,
                     const uint8_t* use, float* o);

/// Index of `t` in kKernelTypes, or -1.
int kernel_type_index(TensorType t);

/// Validates k for a dot product of weight type `t` (k >= 0, a multiple of the block size);
/// returns the number of blocks (elements for F32/F16/BF16). Throws minfer::Error
/// "vec_dot <type>: row length K ...".
int64_t check_row(const char* op, TensorType t, int64_t k);

/// Validates the arguments of gemm_tile (see GemmTileFn) and returns the number of blocks.
int64_t check_gemm(TensorType t, int64_t k, size_t w_row_bytes, int64_t nr, size_t a_row_bytes,
                   int64_t nc, int64_t out_stride);

/// Validates the arguments of gemm_packed (see GemmPackedFn) and returns the number of blocks.
int64_t check_gemm_packed(TensorType t, int64_t k, int64_t rows, int64_t row0, int64_t nr,
                          size_t a_row_bytes, int64_t nc, int64_t out_stride);

/// Validates the arguments of pack / packed_bytes and returns the number of blocks.
int64_t check_pack(TensorType t, int64_t k, int64_t rows, size_t w_row_bytes);

}  // namespace minfer::cpu::simd::detail
