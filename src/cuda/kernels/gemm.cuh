// Prefill matrix product for n > 8 token columns (behind matmul(), matmul.cuh): a simple tiled
// f32 kernel for every weight type. Each 64 x 64 output tile walks k in steps of 32: the thread
// block dequantizes a 64-row x 32 weight tile and a 64-token x 32 activation tile into shared
// memory as f32 (gemm_dequant.cuh: the CPU's dequantized values of the weights and of the
// quantized activations), and each thread accumulates a 4 x 4 patch with FMAs, summing each
// 32-element step separately before adding it to the running total (error bound
// (32 + k / 32) * 2^-24 * sum |w a|). Not bit-identical to the CPU: tested against a tolerance.
// Correct for any m, n, k the type allows. (A later issue replaces it with int8 tensor-core MMQ.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/types.h"
#include "cuda/kernels/quantize_acts.cuh"

namespace minfer::cuda::mm {

/// Tile sizes: output rows (weight rows), output columns (tokens), k step.
inline constexpr int kGemmBM = 64, kGemmBN = 64, kGemmBK = 32;

/// y[j + t * ldy] = sum_e W[j][e] * act[t][e] for j < m, t < n. `acts` is the buffer that
/// quantize_acts filled for `L` (x itself for F32 weights). n <= 65535 * 64.
bool launch_gemm(TensorType type, const void* w, int64_t m, int64_t row_bytes, const ActLayout& L,
                 const void* acts, float* y, int64_t ldy, cudaStream_t stream);

}  // namespace minfer::cuda::mm
