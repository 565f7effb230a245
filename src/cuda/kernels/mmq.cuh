// Prefill matrix product on quantized weights with int8 tensor cores (MMQ), behind matmul()
// (matmul.cuh) for n >= kMmqMinTokens token columns.
//
// y[j + t * ldy] = sum_e W[j][e] * x[t][e] for the quantized weight types Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, reading the activations quantize_acts.cu made (Q8 planes for the
// legacy types, Q8K planes for the K-quants: the CPU's Q8_0/Q8_1/Q8_K values).
//
// Design (docs/cuda-matmul.md, "MMQ"): a thread block computes 128 weight rows x 64 tokens.
// k is walked in stages of 128 elements (4 legacy blocks) or 256 (one K-quant super-block):
// the stage's weight bytes (aligned 16-byte words around the 2-byte aligned blocks) and the
// activation int8 values and scales are copied to shared memory with cp.async while the
// previous stage is multiplied; then the weights are decoded to int8 tiles (zero points
// subtracted) plus per-block scales, and 8 warps multiply 32 x 32 sub-tiles with
// mma.sync m16n8k32 (m16n8k16 for Q6_K's 16-element scales) into exact int32 sums per
// 32-element block, which the float epilogue turns into the contract's terms (mmq_tile.cuh).
// Requires sm_80 or newer (cp.async, ldmatrix, int8 mma.sync).
//
// Numbers: each block's integer sum is exact and each term is the CPU contract's; only the
// order in which terms are added differs (in k order here, over 32 lanes on the CPU), so the
// difference from the CPU reference is bounded by the f32 accumulation error (the test's
// mmq_tolerance). The host emulation (mmq_emulate.cuh) computes bit-identical results.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "core/types.h"
#include "cuda/kernels/matmul.cuh"
#include "cuda/kernels/quantize_acts.cuh"
#include "cuda/kernels/smem_optin.cuh"

namespace minfer::cuda::mm {

/// Tile of one thread block: kMmqBM weight rows x kMmqBN tokens, kMmqThreads threads (8 warps
/// of 32 rows x 32 tokens each).
inline constexpr int kMmqBM = 128;
inline constexpr int kMmqBN = 64;
inline constexpr int kMmqThreads = 256;

/// The wide token tile: 128 tokens per block (each of the 8 warps 32 rows x 64 tokens), which
/// decodes each staged weight tile for twice as many tokens.
inline constexpr int kMmqWideBN = 128;

/// The thin token tile: 32 tokens per block (each warp 32 rows x 16 tokens), twice the blocks of
/// kMmqBN for grids too small to fill the GPU (0.5B/1.5B attention projections) and for n <= 32.
inline constexpr int kMmqThinBN = 32;

/// The fewest thread blocks a grid needs before a wider tile is used (132 SMs).
inline constexpr int64_t kMmqTileMinBlocks = 96;

/// The token tile launch_mmq uses for weights of `type` with m rows and n tokens. K-quants: 128
/// when n >= 128 and that grid has >= kMmqTileMinBlocks blocks; else 64 when n > 32 and that
/// grid has as many; else 32. Legacy types: never 128. Measured on the H200 (2026-11-30,
/// `minfer bench -p 512 -r 3`, MINFER_CUDA_MMQ_TILE forcing one tile for the whole model):
/// 7B Q4_K_M 5,825 / 8,281 / 8,834 t/s with 32 / 64 / 128, 7B Q4_0 6,710 / 8,811 / 8,485,
/// 0.5B Q4_K_M (mostly Q5_0 tensors) 55,847 / 50,477 / 43,931. The per-output arithmetic (k
/// order) is the same for every tile, so the results are identical bit for bit.
int mmq_tile_tokens(TensorType type, int64_t m, int64_t n);

/// The smallest token count matmul() sends to MMQ. Token counts 1..8 stay on the MMVQ kernels,
/// whose results are bit-identical to the CPU's (matmul.cuh's contract, which multi-token decode
/// steps rely on), so this cannot go below 9; above 9 the alternative is the much slower f32
/// GEMM. Not yet measured on a device: `bench_cuda_mmq --crossover` times MMVQ (n <= 8) against
/// MMQ (n = 1..16) per call, the numbers for revisiting the MMVQ limit.
inline constexpr int64_t kMmqMinTokens = 9;

/// Most tokens for which matmul's auto mode keeps quantized weights on MMQ on sm_90, where small
/// grids split k (mmq_split_count), instead of the f16 GEMM (kF16GemmMinTokens and up): decode
/// steps of many sequences and speculative verifies. Measured on an H100 (2026-12-07, 7B Q4_K_M,
/// 32 sequences): the f16 path dequantizes every weight every step (docs/perf).
inline constexpr int64_t kMmqDecodeMaxTokens = 64;

/// Most k splits of one MMQ launch (a thread-block cluster's size: 8 is the portable limit).
inline constexpr int kMmqMaxSplits = 8;

/// The k splits launch_mmq / launch_mmq_batch use (with tile_bn 0; a forced tile never splits) for m rows (all outputs together), n tokens and
/// row length k on a device of `sm_count` SMs and compute capability `compute_capability` (90 for
/// sm_90): 1 (no split) unless the device is sm_90 or newer (thread-block clusters), the thin
/// token tile is used and the grid covers fewer than half the SMs; then enough splits for about
/// one block per SM, at most kMmqMaxSplits and at most half the k stages (each split >= 2 stages).
/// A split launch runs blockIdx.z over contiguous k stage ranges of one output tile, the z blocks
/// one cluster: each sums its stages from zero as the unsplit kernel does, and block 0 adds the
/// others' sums in z order, so the result is deterministic (emulate_mmq with the same split count
/// gives it bit for bit) but not the unsplit kernel's bits. MINFER_CUDA_MMQ_SPLIT: 0 (default)
/// this rule, 1 never split, 2..8 that many where the thin tile is used (A/B runs). After a split
/// launch failed (a cluster the device could not place; that launch ran unsplit), always 1.
int mmq_split_count(TensorType type, int64_t m, int64_t n, int64_t k, int sm_count, int compute_capability);

/// True when MMQ has a kernel for weights of `type` (the quantized types above).
bool mmq_supported(TensorType type);

/// True when MMQ can run this call: a supported type, W 16-byte aligned (the stage copies read
/// aligned 16-byte words), m <= 65535 * 128 rows (grid y), n >= 1.
bool mmq_accepts(TensorType type, const void* w, int64_t m, int64_t n);

/// Dynamic shared memory of the largest of the kernels for `type` in bytes (0 for an
/// unsupported type).
size_t mmq_smem_bytes(TensorType type);

/// y[j + t * ldy] for j < m, t < L.n; `acts` is the buffer quantize_acts filled for `L` (Q8 for
/// the legacy types, Q8K for the K-quants); W holds m rows of row_bytes bytes. `tile_bn` picks
/// the token tile: 0 = mmq_tile_tokens(type, m, n) decides, 32, 64 or 128 = that tile (tests, A/B runs);
/// the results are the same bit for bit. Returns false when the launch failed or was refused
/// (recorded with the site "mmq_<type>"; another tile_bn is refused as "matmul_bad_args");
/// refuses when the shared-memory opt-in of the kernel did not happen (smem_optin.cuh).
bool launch_mmq(TensorType type, const void* w, int64_t m, int64_t row_bytes, const ActLayout& L,
                const void* acts, float* y, int64_t ldy, cudaStream_t stream, int tile_bn = 0);

/// Most outputs of one launch_mmq_batch call (a layer's q, k and v projections).
inline constexpr int kMmqMaxOutputs = 3;

/// The outputs of one weight type, row length L.k and activations `acts` (layout L) in ONE grid
/// (matmul.cuh MatmulOut: W m rows of row_bytes, 16-byte aligned (mmq_accepts); y[j + t * ldy];
/// the epilogue writes residual + ((W x) + bias), each add rounded once, the bytes of the product
/// followed by the separate adds; the row tiles of the outputs one after another; the token tile chosen from their total as
/// mmq_tile_tokens does, or forced by tile_bn as in launch_mmq). Each output's numbers are those
/// of launch_mmq plus the adds. Returns false (site "matmul_bad_args") for 0 or more than
/// kMmqMaxOutputs outputs, more than 65535 row tiles or a bad tile_bn; false when the launch
/// failed ("mmq_<type>").
bool launch_mmq_batch(TensorType type, const MatmulOut* outs, int n_outs, int64_t row_bytes, const ActLayout& L,
                      const void* acts, cudaStream_t stream, int tile_bn = 0);

/// The kernel instantiations (the three token tiles of every type) and their dynamic shared memory,
/// for the context's opt-in list.
std::span<const SmemOptin> mmq_smem_optins();

}  // namespace minfer::cuda::mm
