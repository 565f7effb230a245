// Flash-attention prefill (graph.h Op::Attn with more than kAttnDecodeMaxTokens tokens): the
// semantics of attention.cuh (causal GQA over the KV window; cell c is visible to token t iff
// kv_pos[c] >= 0, kv_seq[c] == seq[t] and kv_pos[c] <= pos[t]; a token that sees no cell gets
// zeros), computed with f16 tensor cores.
//
// Rows: for KV head h the query rows are the (token, query head of h's group) pairs in the order
// r = t * group + g, so one K/V tile in shared memory serves every query head of the group (GQA).
// A block of 4 warps takes 64 consecutive rows (16 per warp) and one KV head, and streams the
// window in tiles of kFlashTileCells(D) cells:
//   - the tile's kv_pos / kv_seq go to shared memory; a cell is "live" for the block when
//     kv_pos >= 0, kv_pos <= the largest position of the block's tokens and kv_seq lies within
//     their sequence range. A tile without a live cell is skipped whole (causal prefill: about
//     half of the tiles). K and V rows of cells that are not live are written as zeros and never
//     read from memory (an unwritten cell may hold NaN bytes);
//   - live K and V rows are converted to f16 on load (f32 rounded to nearest, q8_0 as the f32
//     product q * d, then rounded);
//   - S = Q K^T with mma.sync m16n8k16 (f16 in, f32 accumulate), Q held in registers as f16;
//     masked scores are replaced by -inf with a select (never arithmetic);
//   - online softmax in f32 (exp2 of scores scaled by scale * log2 e), P rounded to f16 and
//     O += P V with mma.sync m16n8k16 (V fragments through ldmatrix.trans); the running sum uses
//     the rounded P so that the normalisation matches the products.
// Blocks are launched heaviest first (the last rows see the most cells).
//
// Numerics: Q, K, V and P are rounded to f16 (relative 2^-11 each); tolerance class
// "flash attention" (tests/cuda/test_cuda_flash_attn.cpp derives it).
// Requires sm_80 or newer (ldmatrix, f16 mma.sync).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/types.h"
#include "cuda/kernels/attention.cuh"

namespace minfer::cuda {

inline constexpr int kFlashThreads = 128;  ///< 4 warps
inline constexpr int kFlashRows = 64;      ///< query rows (token, head) per block

/// KV cells per tile for head dim `d` (shared memory: 2 tiles of cells x (d + 8) halves).
constexpr int kFlashTileCells(int64_t d) { return d > 128 ? 32 : 64; }

/// Empty when the flash kernels take this shape and KV format; otherwise why not (the caller
/// then uses attention.cuh): nt > kAttnDecodeMaxTokens, head_dim 64, 128 or 256, f32 / f16 /
/// q8_0 KV, n_head a multiple of n_head_kv, at most 65535 KV heads.
const char* flash_attn_unsupported(const AttnShape& s, TensorType kv_type);

/// True when the op table should run `s` through the flash kernel on a device with `sm_count`
/// SMs: flash_attn_unsupported is empty, unless the kernel would fill fewer than half of the SMs
/// (row blocks x KV heads) while each block scans more than kFlashLongWindow cells serially
/// (a few tokens continuing a long cache): there the split-K kernel of attention.cuh spreads the
/// window over the SMs. The threshold is a guess, not yet measured.
inline constexpr int64_t kFlashLongWindow = 2048;
bool flash_attn_preferred(const AttnShape& s, TensorType kv_type, int sm_count);

/// Runs the flash kernel (no scratch). q and out must be 8-byte aligned; for f32 and f16 KV the
/// K and V regions and a.row_bytes must be 16-byte aligned (q8_0: 2-byte). Returns false when
/// the launch failed (site flash_attn_{f32,f16,q8_0}_d{64,128,256}) or the arguments do not fit
/// (site flash_attn_bad_args).
bool flash_attn(TensorType kv_type, const AttnShape& s, const AttnArgs& a, cudaStream_t stream);

}  // namespace minfer::cuda
