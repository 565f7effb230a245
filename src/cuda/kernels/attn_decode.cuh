// Decode attention (graph.h Op::Attn with at most kAttnDecodeMaxTokens tokens): the same
// semantics as attention.cuh (causal GQA over the KV window, the mask rule of graph.h, zeros for
// a token that sees no cell), with kernels shaped for one token against a long window.
//
// Split-K ("flash decoding"): the window is cut into `n_splits` ranges of `chunk` cells. A block
// of 128 threads handles one (range, KV head, head slice, token): it reads each K and V row of its
// range once for all the query heads of the slice (GQA: up to 8 heads of one KV head per block;
// a group of 9-16 heads is cut into two slices). Inside the block, L lanes (L = 4, 8, 16 or 32,
// the smallest with 8 L >= head_dim) share one cell: lane j holds dimensions 8j .. 8j+7 of K and
// V (one 16-byte load for f16, two for f32, a 2-byte scale and four 2-byte loads for q8_0), so a
// warp scores 32 / L cells at a time. Each group of L lanes is a "stream" with its own online
// softmax state (max, sum, unnormalised output) over the cells c = first + stream, first +
// stream + streams, ...; the next cell's loads are issued before the current one is computed.
// At the end the block merges its streams in stream order (shared memory) and writes either the
// normalised output (one range) or a partial (max, sum, output) that a combine kernel merges in
// range order.
//
// Determinism: the plan (attn_decode_plan) depends on the window, the head counts, head_dim and
// the SM count, never on the token count, and each token's blocks compute alone, so a token's
// result is the same bits for nt = 1 .. kAttnDecodeMaxTokens (an nt = 3 step equals three nt = 1
// steps). Masked cells contribute nothing and their V rows are never used (a never-written cell
// may hold NaN bytes); their K rows may be loaded, and their scores are replaced by -inf with a
// select, never by arithmetic.
//
// Numerics: expf (f32, <= 2 ulp), dot products in f32 with another order than the CPU's:
// tolerance class "attention" (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/types.h"
#include "cuda/kernels/attention.cuh"

namespace minfer::cuda {

inline constexpr int kAttnDecodeThreads = 128;
inline constexpr int kAttnDecodeMaxHeads = 8;        ///< query heads per block (a head slice)
inline constexpr int64_t kAttnDecodeMaxSplits = 1024;  ///< ranges per window (combine's limit)

struct AttnDecodePlan {
  int64_t n_splits = 1;
  int64_t chunk = 0;          ///< cells per range (the last range may be shorter, never empty)
  int lanes = 0;              ///< L: lanes per cell (4, 8, 16, 32)
  int64_t head_slices = 1;    ///< blocks per KV head per range (ceil(group / 8))
  int64_t heads_per_slice = 1;
  size_t scratch_bytes = 0;   ///< partials for the combine (0 when n_splits == 1)
};

/// Empty when the decode kernels take this shape and KV format; otherwise why not (the caller
/// then uses attention.cuh): nt in 1..kAttnDecodeMaxTokens, head_dim a multiple of 8 up to 256
/// (a multiple of 32 for q8_0), f32 / f16 / q8_0 KV, and everything attn_unsupported checks.
const char* attn_decode_unsupported(const AttnShape& s, TensorType kv_type);

/// The plan for `s` on a device with `sm_count` SMs (pure; independent of s.n_tok).
/// `chunk_override` > 0 forces the cells per range (MINFER_CUDA_ATTN_CHUNK, for tuning).
AttnDecodePlan attn_decode_plan(const AttnShape& s, int sm_count, int64_t chunk_override = 0);

/// Runs the decode kernels (split, then combine when plan.n_splits > 1). The K and V regions,
/// q and out must be 16-byte aligned (pool buffers are 256-byte aligned); `a.scratch` holds
/// plan.scratch_bytes. Returns false when a launch failed (recorded with its site:
/// attn_decode_{f32,f16,q8_0}, attn_decode_combine) or the arguments do not fit the plan
/// (site attn_decode_bad_args).
bool attn_decode(TensorType kv_type, const AttnShape& s, const AttnDecodePlan& plan, const AttnArgs& a,
                 cudaStream_t stream);

}  // namespace minfer::cuda
