// CPU kernels, one function per op family. Each takes the node, resolved pointers and the
// thread pool; shapes come from the graph nodes (ggml order, contiguous rows).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/thread_pool.h"
#include "graph/backend.h"
#include "graph/graph.h"

namespace minfer::cpu {

/// What every kernel receives.
struct PackedWeight;

/// Returns the packed form of a weight (made once, cached by the backend), or an empty one when
/// the type has none at this SIMD level.
using PackedLookup = std::function<PackedWeight(const graph::Node& weight_node, const void* data)>;

struct OpContext {
  const graph::Graph& g;
  const graph::ExecPlan& plan;
  ThreadPool& pool;
  std::vector<uint8_t>& work;   ///< scratch for quantized activations (grow-only, kept by the backend)
  std::vector<uint8_t>& work2;  ///< a second quantized-activation scratch (fused ops)
  std::vector<float>& fwork;    ///< f32 scratch (fused ops' intermediates)
  PackedLookup packed;          ///< may be empty (no packing)

  const graph::Node& src_node(const graph::Node& n, int i) const { return g.node(n.src[static_cast<size_t>(i)]); }
  template <typename T = float>
  T* src(const graph::Node& n, int i) const { return static_cast<T*>(plan.src_data(g, n, i)); }
};

// elementwise (kernels_elementwise.cpp)
void op_add(const OpContext& c, const graph::Node& n, float* out);
void op_mul(const OpContext& c, const graph::Node& n, float* out);
void op_silu(const OpContext& c, const graph::Node& n, float* out);
void op_swiglu(const OpContext& c, const graph::Node& n, float* out);

// norms and rope (kernels_norm_rope.cpp)
void op_rms_norm(const OpContext& c, const graph::Node& n, float* out);
void op_qk_norm(const OpContext& c, const graph::Node& n, float* out);
void op_rope(const OpContext& c, const graph::Node& n, float* out);

// matmul family (kernels_matmul.cpp)
void op_matmul(const OpContext& c, const graph::Node& n, float* out);
void op_fused_qkv(const OpContext& c, const graph::Node& n, float* out);
void op_fused_ffn(const OpContext& c, const graph::Node& n, float* out);
void op_get_rows(const OpContext& c, const graph::Node& n, float* out);

// attention and KV cache (kernels_attn.cpp)
void op_attn(const OpContext& c, const graph::Node& n, float* out);
void op_kv_store(const OpContext& c, const graph::Node& n);
void op_kv_load(const OpContext& c, const graph::Node& n, float* out);

/// Activations x [k, n] (n token rows of k f32) quantized to a weight type's vec_dot_type,
/// one packed row per token (`row_bytes` apart). For F32 weights `data` is x itself.
struct QuantizedActs {
  TensorType type = TensorType::F32;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  int64_t k = 0;  ///< elements per token row
  int64_t n = 0;  ///< token rows
};

/// Quantizes x [k, n] for weights of type `w_type` into `buf` (resized as needed), with the
/// SIMD quantizer of the process's level (bytes identical to the reference quantizer).
QuantizedActs quantize_activations(ThreadPool& pool, std::vector<uint8_t>& buf, TensorType w_type,
                                   const float* x, int64_t k, int64_t n);

/// A weight in the packed (row-interleaved) form of the SIMD level, or empty (src/cpu/simd).
struct PackedWeight {
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int pack_rows = 0;
};

/// y[j + t*y_stride] = dot(W row j, x row t) for j < m, t < xq.n: W is [k, m] of type `w_type`
/// (m rows of k elements), or its packed form when `packed.data` is set. Parallel over rows of
/// W; bit-identical to the reference dot product whichever path runs.
void matmul_quantized(ThreadPool& pool, TensorType w_type, const void* w, int64_t m,
                      const QuantizedActs& xq, float* y, int64_t y_stride,
                      const PackedWeight& packed = {});

/// Row `row` of a KV region (f32 / f16 / q8_0, `row_len` elements) dequantized into `dst`.
void kv_row_to_f32(TensorType type, const void* region, int64_t row_len, int64_t row, float* dst);

}  // namespace minfer::cpu
