// Causal GQA attention over the KV window (graph.h Op::Attn): for token t and query head h
// (KV head h / (n_head / n_head_kv)), the softmax over the visible cells c of
// scale * dot(q[t, h], K[c]) weights the rows V[c]. Cell c is visible to token t when
// kv_pos[c] >= 0, kv_seq[c] == seq[t] and kv_pos[c] <= pos[t]; a token that sees no cell gets
// zeros (the CPU's rule).
//
// One split-K kernel serves every token count: the window is cut into `n_splits` ranges of
// `chunk` cells; a block handles one (range, KV head, token) for all the query heads of that KV
// head, with an online softmax over sub-chunks of kAttnSubChunk cells, and writes a partial
// (max, sum, unnormalised output); a combine kernel merges the ranges (with a single range the
// split kernel writes the normalised output itself and needs no scratch). The plan (attn_plan)
// depends on the window, the head counts and the device, and on the token count only through
// "decode" (nt <= kAttnDecodeMaxTokens) versus "prefill", so every token's result is the same
// for nt = 1 and any nt <= kAttnDecodeMaxTokens: an nt = 3 step equals three nt = 1 steps bit
// for bit (given the same KV contents). Prefill plans use fewer ranges to bound the scratch.
//
// Numerics: exp is evaluated in double and rounded to float; sums are f32 in a different order
// than the CPU's (which normalises by the global maximum and sums in double): tolerance class
// "attention" (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace minfer::cuda {

inline constexpr int64_t kAttnDecodeMaxTokens = 8;
/// Most tokens of a decode step of several sequences (at most kAttnDecodeMaxTokens of each) that
/// the decode kernels take (attn_decode.cuh): the slots of a serving batch.
inline constexpr int64_t kAttnDecodeMaxBatch = 64;
inline constexpr int64_t kAttnSubChunk = 128;   ///< cells scored per step of a block
inline constexpr int64_t kAttnMaxHeadDim = 256;
inline constexpr int64_t kAttnMaxGroupDim = 4096;  ///< (n_head / n_head_kv) * head_dim

struct AttnShape {
  int64_t n_tok = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_kv = 0;
  int64_t seq_tok = 0;  ///< most tokens of one sequence (graph.h NodeParams::seq_tokens; 0: n_tok)
  int64_t window = 0;   ///< with per-token bounds: the widest bounds (NodeParams::seq_window; 0: n_kv)
};

struct AttnPlan {
  int64_t n_splits = 1;
  int64_t chunk = 0;           ///< cells per range (the last range may be shorter)
  size_t scratch_bytes = 0;    ///< device scratch the launch needs (partials; 0 for one range)
};

/// Empty when the kernels handle this shape and KV type; otherwise the reason (one line).
const char* attn_unsupported(const AttnShape& s, TensorType kv_type);

/// The split plan for `s` on a device with `sm_count` multiprocessors (a pure function).
AttnPlan attn_plan(const AttnShape& s, int sm_count);

struct AttnArgs {
  const float* q = nullptr;          ///< [head_dim * n_head, n_tok]
  const void* k = nullptr;           ///< K region (cells rows of kv_dim elements)
  const void* v = nullptr;           ///< V region
  size_t row_bytes = 0;              ///< bytes per cell row of K and V
  const int32_t* pos = nullptr;      ///< [n_tok]
  const int32_t* seq = nullptr;      ///< [n_tok]
  const int32_t* kv_pos = nullptr;   ///< [n_kv]
  const int32_t* kv_seq = nullptr;   ///< [n_kv]
  /// [2, n_tok] or null: per token the cells [lo, hi) holding every cell it sees, hi - lo <=
  /// AttnShape::window (graph.h KvBounds). Only the decode kernels read it.
  const int32_t* kv_bounds = nullptr;
  float scale = 1.0f;
  float* out = nullptr;              ///< [head_dim * n_head, n_tok]
  void* scratch = nullptr;           ///< plan.scratch_bytes, 256-byte aligned (unused for one range)
};

/// Runs the split and combine kernels for `plan` (from attn_plan with the same shape).
bool attention(TensorType kv_type, const AttnShape& s, const AttnPlan& plan, const AttnArgs& a,
               cudaStream_t stream);

}  // namespace minfer::cuda
