// Decode attention (graph.h Op::Attn with at most kAttnDecodeMaxTokens tokens): the same
// semantics as attention.cuh (causal GQA over the KV window, the mask rule of graph.h, zeros for
// a token that sees no cell), with kernels shaped for one token against a long window.
//
// Split-K ("flash decoding"): a window of at most 256 cells is one range (one launch, no
// combine); a longer one is cut into `n_splits` ranges of `chunk` <= 256 cells (about two blocks
// per SM) whose partials a combine kernel merges in range order. A block of 256 threads handles
// one (range, KV head, head slice, token) for up to 8 query heads of the GQA group (4 for
// head_dim > 128; a wider group is cut into slices), and it works in phases, not in a serial loop
// per thread: (0) thread i tests cell i of the range and the visible cells are compacted, in cell
// order, into a list in shared memory (masked cells are never loaded at all); (A) the scores of
// every visible cell for every head of the slice: L lanes share a cell (L = 4, 8, 16 or 32, the
// smallest with 8 L >= head_dim), lane j holding dimensions 8j .. 8j+7 (one 16-byte load of f16,
// two of f32, a 2-byte scale and four 2-byte loads of q8_0), so the block scores 8 * 32 / L cells
// at once with up to 8 (f32: 4) such loads per lane in flight, the lanes' partial dots of the
// heads summed by a reduce-scatter (8 shuffles for 16 lanes and 8 heads, not 32); (B) one warp
// per head takes the maximum over the range and turns the scores into p = exp(score - max) and
// their sum; (C) the same lanes accumulate p * V, then the streams of a warp are summed by
// shuffles and the warps in warp order through shared memory.
//
// Determinism: the plan (attn_decode_plan) depends on the window, the head counts, head_dim and
// the SM count, never on the token count, and each token's blocks compute alone, so a token's
// result is the same bits for nt = 1 .. kAttnDecodeMaxTokens (an nt = 3 step equals three nt = 1
// steps). Masked cells contribute nothing: neither their K nor their V rows are read (a
// never-written cell may hold NaN bytes).
//
// Numerics: expf (f32, <= 2 ulp), dot products in f32 with another order than the CPU's, the
// softmax normalised by the range's maximum (two passes, no running rescale): tolerance class
// "attention" (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/types.h"
#include "cuda/kernels/attention.cuh"

namespace minfer::cuda {

inline constexpr int kAttnDecodeThreads = 256;
inline constexpr int kAttnDecodeMaxHeads = 8;        ///< query heads per block (4 for head_dim > 128)
inline constexpr int64_t kAttnDecodeMaxSplits = 1024;  ///< ranges per window (combine's limit)

struct AttnDecodePlan {
  int64_t n_splits = 1;
  int64_t chunk = 0;          ///< cells per range, <= 256 (the last range may be shorter, never empty)
  int lanes = 0;              ///< L: lanes per cell (4, 8, 16, 32)
  int64_t head_slices = 1;    ///< blocks per KV head per range (see attn_decode_plan)
  int64_t heads_per_slice = 1;
  size_t scratch_bytes = 0;   ///< partials for the combine (0 when n_splits == 1)
};

/// Empty when the decode kernels take this shape and KV format; otherwise why not (the caller
/// then uses attention.cuh): nt in 1..kAttnDecodeMaxTokens, head_dim a multiple of 8 up to 256
/// (a multiple of 32 for q8_0), f32 / f16 / q8_0 KV, a window of at most 256 * 1024 cells, and
/// everything attn_unsupported checks.
const char* attn_decode_unsupported(const AttnShape& s, TensorType kv_type);

/// The plan for `s` on a device with `sm_count` SMs (pure; independent of s.n_tok).
/// `chunk_override` > 0 forces the cells per range (MINFER_CUDA_ATTN_CHUNK, for tuning; clamped
/// to [ceil(n_kv / kAttnDecodeMaxSplits), 256]). A window of at most 256 cells (one range unless
/// chunk_override cuts it) takes one block per query head; longer ones take ceil(group / max heads)
/// blocks per KV head (max heads: 8, or 4 for head_dim > 128). At most 65535 blocks per range.
/// `head_slices_override` > 0 asks for that many blocks per KV head (MINFER_CUDA_ATTN_HEAD_SLICES;
/// at least the default, at most the GQA group; rounded so that no block is empty).
AttnDecodePlan attn_decode_plan(const AttnShape& s, int sm_count, int64_t chunk_override = 0,
                                int64_t head_slices_override = 0);

/// Runs the decode kernels (split, then combine when plan.n_splits > 1). The K and V regions
/// must be 16-byte aligned (pool buffers are 256-byte aligned); `a.scratch` holds
/// plan.scratch_bytes. Returns false when a launch failed (recorded with its site:
/// attn_decode_{f32,f16,q8_0}, attn_decode_combine) or the arguments do not fit the plan
/// (site attn_decode_bad_args).
bool attn_decode(TensorType kv_type, const AttnShape& s, const AttnDecodePlan& plan, const AttnArgs& a,
                 cudaStream_t stream);

}  // namespace minfer::cuda
