// FusionPass: rewrites patterns into fused ops where the node's backend supports them.
//  - Mul(Silu(g), u) -> SwiGLU(g, u)                           (when the Silu has one consumer)
//  - MatMul(Wd, SwiGLU(MatMul(Wg, x), MatMul(Wu, x))) -> FusedFFN(x, Wg, Wu, Wd)
//  - MatMul(Wq, x), MatMul(Wk, x), MatMul(Wv, x) [+ bias Adds] -> FusedQKV(x, Wq, Wk, Wv[, bq,
//    bk, bv]) with a planar output (q rows, then k rows, then v rows, each [dim, n_tokens]);
//    the former outputs become Views of it.
//  - Add(r, MatMul(W, x)) -> MatMulAdd(W, x, r); Add(r, FusedFFN(...)) -> FusedFFN(..., r)
//    (either operand order; the product's only consumer is the Add, same shape): the residual
//    add moves into the product's epilogue. Gated by supports_fused(Op::MatMulAdd) for both.
//  - Attn(Rope(q), KvcacheStore(Rope(k), K, cells), KvcacheStore(v, V, cells), ...) with q, k, v
//    the planes of one FusedQKV (q and k optionally through QkNorm) -> QkvBiasRopeStore (in the q
//    Rope's slot) + the Attn reading K and V directly (graph.h "Fused ops").
//  - FusedQKV(RmsNorm(x, w), ...) / FusedFFN(RmsNorm(x, w), ...) -> the same op with has_norm,
//    reading x and (last source) w (the norm's only consumer; gated by supports_fused(RmsNorm)).
// Rewrites happen in place (the earliest node of a pattern becomes the fused op), so the node
// order stays topological without moving nodes. Replaced nodes are marked dead.
#pragma once

#include "graph/backend.h"
#include "graph/graph.h"

namespace minfer::graph {

struct FusionStats {
  int swiglu = 0;
  int ffn = 0;
  int qkv = 0;
  int residual = 0;    ///< Adds folded into MatMulAdd or FusedFFN
  int rope_store = 0;  ///< QkvBiasRopeStore ops created
  int norm = 0;        ///< RmsNorms folded into FusedQKV / FusedFFN (has_norm)
};

/// `backend_for(kind)` answers supports_fused for the node's backend (nullptr = no fusion).
FusionStats run_fusion_pass(Graph& g, Backend* const backends[2]);

}  // namespace minfer::graph
