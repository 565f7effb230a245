// The op set of the compute graph (docs/architecture.md). Shapes use ggml order: ne[0] is the
// contiguous dimension. Activations are f32 [n_embd, n_tokens] unless noted.
#pragma once

#include <cstdint>
#include <string_view>

namespace minfer::graph {

enum class Op : uint8_t {
  Input,         ///< leaf filled by the engine before execution (token ids, positions, ...)
  Weight,        ///< leaf referencing a model tensor (file type, used in place)
  KvRegion,      ///< leaf: a persistent per-layer K or V region [kv_dim, n_ctx] (f32/f16/q8_0)
  Add,           ///< a + b; b broadcasts over higher dims when b.ne[i] == 1 (e.g. bias [m])
  Mul,           ///< a * b, same broadcast rule
  Silu,          ///< a * sigmoid(a)
  SwiGLU,        ///< silu(a) * b (gate, up)
  RmsNorm,       ///< a / sqrt(mean(a^2 over ne0) + eps) * w       src: a [d, n], w [d] (f32)
  QkNorm,        ///< RmsNorm over each head: a [hd, n_head, n], w [hd]
  MatMul,        ///< y[m, n] = W[k, m]^T x[k, n]  (W a Weight of any supported type)
  Rope,          ///< rotary embedding, neox layout: a [hd, n_head, n], pos [n] (i32)
  Attn,          ///< causal GQA attention over the KV window (see AttnParams)
  KvcacheStore,  ///< writes rows of src0 [kv_dim, n] into region src1 at cells src2 [n] (i32)
  KvcacheLoad,   ///< dequantized copy of cells [0, p.n_kv) of region src0 -> f32 [kv_dim, n_kv]
  View,          ///< contiguous alias of src0: p.offset (bytes) + this node's shape
  Reshape,       ///< alias of src0 with this node's shape (same element count)
  GetRows,       ///< rows of src0 [d, rows] (any type) selected by ids src1 [n] -> f32 [d, n]
  // Fused ops (created by the FusionPass, only where a backend says it supports them; their
  // sources and results are documented in graph.h, "Fused ops").
  FusedQKV,      ///< q/k/v projections (+biases) of one input; output planar: q plane, k, v
  QkvBiasRopeStore,  ///< decode: bias + rope of q and k, store k and v into the KV regions
  FusedFFN,      ///< down(silu(gate x) * up x) [+ residual]
  MatMulAdd,     ///< r + W^T x: a MatMul with the residual Add that consumes it
  Count_,
};

std::string_view op_name(Op op);

/// True for ops whose output aliases src0's buffer (no allocation).
inline bool op_is_alias(Op op) { return op == Op::View || op == Op::Reshape; }

/// True for leaves (no sources, no computation).
inline bool op_is_leaf(Op op) { return op == Op::Input || op == Op::Weight || op == Op::KvRegion; }

}  // namespace minfer::graph
