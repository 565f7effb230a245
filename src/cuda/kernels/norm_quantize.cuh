// RMS norm fused with the activation quantization of the matmuls that read its output: one
// launch writes the quantized planes (quantize_acts.cuh layout) of rms_norm(x) * w directly, for
// the weight types whose kernels read Q8 or Q8K activations. The bytes equal those of
// rms_norm() (norm.cuh) followed by quantize_activations() (matmul.cuh) on the device: the same
// per-row sum order (rms_norm_threads(k) threads per row) and the same block quantizers
// (quantize_blocks.cuh). The f32 normalized row is never written to global memory.
//
// Launch shape: each token row is split across `parts` blocks (grid = n x parts). Every block
// recomputes the whole row's sum of squares with rms_norm_threads(k) threads (so every block gets
// the scale bit for bit), then quantizes only its share of the row's quantization blocks, each
// warp (Q8K: one 256-element super-block) or 8-lane group (Q8: one 32-element block) from its
// own registers: no shared memory beyond the sum's scratch. Splitting a decode row over several
// SMs costs re-reads of the row from L2 (parts x k x 4 bytes per row); the plan keeps
// n x parts near one wave of blocks (kNormQuantizeWaveBlocks), so prefill rows get parts = the
// least that covers the row in one pass.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/types.h"

namespace minfer::cuda {

/// Longest row (elements) the fused kernel takes. The row is not staged in shared memory (it was,
/// up to 11264); the bound keeps the re-reads of the row cheap where many rows leave no room to
/// spread: at this length a row needs at least 8 blocks (Q8) or 4 (Q8K), each reading the whole
/// row for the sum. Every Qwen2/Qwen3 hidden size is at most 8192.
inline constexpr int64_t kNormQuantizeMaxK = 32768;

/// Blocks (n x parts) the plan aims at: about one wave of 896-1024-thread blocks on an H200
/// (132 SMs, 2 such blocks per SM). Only a tuning value: any parts in [min_parts, max_parts]
/// writes the same bytes.
inline constexpr int64_t kNormQuantizeWaveBlocks = 256;

/// True when rms_norm_quantize serves weights of `type` with rows of k elements: the type reads
/// Q8 or Q8K activations (matmul_fused_supported's types), k is a multiple of its block size
/// (32 / 256) and k <= kNormQuantizeMaxK.
bool rms_norm_quantize_supported(TensorType type, int64_t k);

/// How rms_norm_quantize splits rows of k elements (counts, not bytes).
struct NormQuantizePlan {
  int threads = 0;        ///< threads per block: rms_norm_threads(k), fixing the row sum's order
  int64_t units = 0;      ///< quantization blocks per row: Q8K super-blocks (k / 256) or Q8 blocks (k / 32)
  int64_t per_block = 0;  ///< units one block quantizes in one pass: its warps (Q8K) or 8-lane groups (Q8)
  int64_t min_parts = 0;  ///< ceil(units / per_block): fewer blocks per row cannot cover the row
  int64_t max_parts = 0;  ///< ceil(k / 256), at least min_parts: shares of about 256 elements
  int64_t parts = 0;      ///< blocks per row launched: ceil(kNormQuantizeWaveBlocks / n) clamped to
                          ///< [min_parts, max_parts]
};

/// The plan for rows of k elements and n token rows (pure; n >= 1). Requires
/// rms_norm_quantize_supported(type, k); otherwise every field is 0.
NormQuantizePlan norm_quantize_plan(TensorType type, int64_t k, int64_t n);

/// Units [begin, end) of a row handled by one block.
struct NormQuantizeShare {
  int begin;
  int end;
};

/// Block `part` (0 <= part < parts) of a row of `units` units takes units
/// [part * units / parts, (part + 1) * units / parts): the shares tile the row in order, differ
/// in size by at most one, and none is empty when parts <= units. 32-bit arithmetic: units <=
/// kNormQuantizeMaxK / 32 = 1024.
__host__ __device__ inline NormQuantizeShare norm_quantize_share(int units, int parts, int part) {
  return {part * units / parts, (part + 1) * units / parts};
}

/// qx = quantize_activations(type, rms_norm(x, w, eps)) for x [k, n] (f32, token row t at
/// x + t * k), w [k] (f32). qx: quantized_activation_bytes(type, k, n) bytes, 16-byte aligned.
/// Launches norm_quantize_plan(type, k, n): n x parts blocks of rms_norm_threads(k) threads, no
/// dynamic shared memory. Returns false (recorded as launch failure "rms_norm_quantize_bad_args")
/// when !rms_norm_quantize_supported(type, k), n < 1 or n > 2^31 - 1, or a pointer is null or
/// misaligned; false when the launch failed ("rms_norm_quantize_q8" / "_q8k").
bool rms_norm_quantize(TensorType type, const float* x, const float* w, int64_t k, int64_t n, float eps, void* qx,
                       cudaStream_t stream);

/// rms_norm_quantize with `parts` blocks per row instead of the plan's (for tests and tuning:
/// every parts in [plan.min_parts, plan.max_parts] writes the same bytes). A parts outside that
/// range is refused like a bad argument ("rms_norm_quantize_bad_args").
bool rms_norm_quantize_split(TensorType type, const float* x, const float* w, int64_t k, int64_t n, float eps,
                             void* qx, int64_t parts, cudaStream_t stream);

}  // namespace minfer::cuda
