// The fused decode step between the q/k/v projections and attention (graph.h
// Op::QkvBiasRopeStore): from the planar FusedQKV output, optionally the per-head RMS norm of q
// and k (Qwen3), the rotary embedding of q and k (NEOX or normal layout, frequency factors and
// scaling: graph/rope_math.h), the q output, and the K and V rows stored
// into their KV regions at each token's cell. One launch replaces up to two QkNorm, two Rope and
// two KV-store launches.
//
// Numerics: every step is the unfused kernel's formula, operation for operation: the rope
// angles and cos/sin table of rope.cu, the rotation's rounded multiplies and adds, the KV
// store's bytes (kv_formulas.cuh), the norm's float squares summed in double (a warp sums a
// head here, a block in norm.cu: only the order of the double sum differs). Without q/k norms
// the results are bitwise those of the unfused device kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/types.h"
#include "graph/rope_math.h"

namespace minfer::cuda {

inline constexpr int64_t kRopeStoreMaxHeadDim = 256;
inline constexpr int64_t kRopeStoreMaxTokens = 65535;  ///< grid dimension y

struct RopeStoreArgs {
  const float* qkv = nullptr;      ///< planar [q_dim * n | kv_dim * n | kv_dim * n], row t of a plane at t * dim
  int64_t n_tok = 0;
  int64_t head_dim = 0;
  int64_t n_head = 0;               ///< q heads (q_dim = n_head * head_dim)
  int64_t n_head_kv = 0;            ///< k and v heads (kv_dim = n_head_kv * head_dim)
  int64_t n_rot = 0;                ///< rotated dims per head (even, <= head_dim)
  float theta_scale = 1.0f;         ///< pow(rope_theta, -2 / n_rot), computed by the caller in float
  graph::RopeConfig rope;           ///< layout and scaling (rope_math.h)
  const float* freq_factors = nullptr;  ///< [n_rot / 2] frequency divisors, or null (all 1)
  const int32_t* pos = nullptr;     ///< [n_tok]
  const int32_t* cells = nullptr;   ///< [n_tok] KV cell of each token
  const float* q_norm = nullptr;    ///< [head_dim] or null (then no norms)
  const float* k_norm = nullptr;    ///< [head_dim], set iff q_norm is
  float eps = 0.0f;
  float* q_out = nullptr;           ///< [q_dim, n_tok]
  void* k_region = nullptr;         ///< rows of row_bytes, n_cells of them
  void* v_region = nullptr;
  size_t row_bytes = 0;             ///< bytes of a kv_dim row in kv_type
  int64_t n_cells = 0;
  TensorType kv_type = TensorType::F32;  ///< F32, F16 or Q8_0 (head_dim % 32 == 0)
  uint32_t* fault = nullptr;        ///< a cell outside [0, n_cells) is reported (kFaultKvCell) and skipped
};

/// Empty when rope_store takes this shape; otherwise why not.
const char* rope_store_unsupported(int64_t head_dim, int64_t n_rot, TensorType kv_type);

/// One launch; false when it failed (site "rope_store").
bool rope_store(const RopeStoreArgs& a, cudaStream_t stream);

}  // namespace minfer::cuda
