// The device matrix-product API the CUDA backend calls for MatMul and the fused QKV/FFN ops.
// Weights stay in their file format on the device (GGUF/ggml block layouts, src/quant/blocks.h);
// activations are f32. For quantized weights the activations are first quantized once per op
// input (quantize_activations), exactly as the CPU backend quantizes them (Q8_0 blocks for
// Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants; f16/bf16 for f16/bf16 weights), in
// whatever device layout the kernels prefer, and reused by every matmul sharing that input.
//
// Shapes (ggml order): W [k, m] = m rows of k elements; x [k, n] f32 = n token rows; y [m, n]
// f32 with y[j + t * ldy]. All pointers are device pointers; everything is issued on `stream`.
// Each launch is checked with MINFER_LAUNCH_CHECK (launch.cuh); the functions return false when
// a launch failed (the failure is recorded with its site). A call the kernels cannot serve
// (a type/k that matmul_supported rejects, a misaligned pointer, ldy < m) launches nothing,
// records the site "matmul_bad_args" / "quantize_activations_bad_args" with
// cudaErrorInvalidValue and returns false; an error latched before the call is recorded as
// "latched_before_matmul" / "latched_before_quantize_activations".
//
// Alignment: W 2-byte aligned (4 for F32; 16 lets the F32/F16/BF16 kernels use 16-byte loads),
// x and y 4-byte aligned, qx 16-byte aligned (cudaMalloc gives 256).
//
// Numbers (docs/cuda-matmul.md): for n <= 8 the result is bit-identical to the CPU reference
// (cpu::quantize_activations + cpu::matmul_quantized: quant_ref.h's dot products) for every
// type. For n > 8, matmul() sends quantized weights to the int8 tensor-core MMQ (mmq.cuh: the
// contract's exact block sums and terms, added in another order: within the f32 accumulation
// error), F16/BF16 weights to the f16/bf16 tensor-core GEMM (hgemm.cuh), and F32 weights (and,
// under MINFER_NO_MMQ=1 or for W not 16-byte aligned, the quantized ones) to the prefill GEMM,
// which multiplies the same dequantized weights and activations in another order (agrees within
// (32 + k / 32) * 2^-24 * sum |w a| plus the CPU's own rounding). The backend's ops take the f16
// tensor-core path for quantized weights (matmul_f16, ffn_f16) where f16_gemm_serves says so.
// Input the CPU rejects with an error cannot raise one on the device: a non-finite element of
// x makes its Q8/Q8K block's scale NaN, so the outputs that read it are NaN.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace minfer::cuda {

/// True when a kernel exists for weights of `type` with rows of `k` elements: F32, F16, BF16
/// (any k), Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (k a multiple of 32), Q4_K, Q5_K, Q6_K (a multiple of
/// 256), with 1 <= k <= 2^30. When false, `why` (if not null) receives a one-line reason (a
/// string literal).
bool matmul_supported(TensorType type, int64_t k, const char** why);

/// Device bytes of the quantized-activation buffer for x [k, n] paired with weights of `type`
/// (0 when the kernels read f32 activations directly, and for a type/k matmul_supported
/// rejects).
size_t quantized_activation_bytes(TensorType type, int64_t k, int64_t n);

/// Quantizes x [k, n] into `qx` (quantized_activation_bytes(type, k, n) bytes) for weights of
/// `type`. No-op (returns true) when the type reads f32 activations.
bool quantize_activations(TensorType type, const float* x, int64_t k, int64_t n, void* qx,
                          cudaStream_t stream);

/// True when quantize_activations fills the same buffer for weights of types a and b (same row
/// length and token count), so one quantization serves both: the same type, or two types of one
/// activation family (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0; Q4_K/Q5_K/Q6_K).
bool same_activations(TensorType a, TensorType b);

/// One output of a fused matrix-vector product: y[j + t * ldy] = residual[j + t * ldr] +
/// ((W_j . x_t) + bias[j]) for j < m, t < n; the bias add only when `bias` is set, the residual
/// add only when `residual` is set. Each add is one rounded f32 operation, so the result is
/// bitwise matmul() followed by the graph's Add ops (Add(y, b), then Add(residual, y)).
struct MatmulOut {
  const void* w = nullptr;          ///< weights [k, m], 2-byte aligned
  int64_t m = 0;
  float* y = nullptr;
  int64_t ldy = 0;                  ///< >= m
  const float* bias = nullptr;      ///< [m] or null
  const float* residual = nullptr;  ///< [ldr, n] or null; must not overlap y
  int64_t ldr = 0;                  ///< >= m when residual is set
};

/// The weights the decode product after the next matmul launches of this host thread reads
/// first, in the order it reads them: up to 3 device ranges (pointer, bytes), either read one
/// after another (the q, k, v segments of one grid) or side by side (`side_by_side`: gate and up
/// rows of the SwiGLU kernel). With MINFER_CUDA_L2_AHEAD_MB = N > 0 the one-super-block-per-lane
/// decode kernel asks the L2 cache for the first N MiB of them (side by side: N / count of each)
/// when its warps finish (mmvq.cuh L2Ahead). A hint only: no result depends on it.
struct L2AheadHint {
  const void* w[3] = {nullptr, nullptr, nullptr};
  size_t bytes[3] = {0, 0, 0};
  int n = 0;
  bool side_by_side = false;
};

/// Sets the hint the matmul launches of this host thread pass on (until the next call; an empty
/// hint, n = 0, turns it off).
void set_l2_ahead_hint(const L2AheadHint& hint);

/// Longest range (bytes) one L2 prefetch request names (its length is a 32-bit count).
inline constexpr size_t kL2AheadMaxRange = 0xFFFFFFF0u;

/// What the lane kernel is asked to prefetch of `hint` under a budget of `cap` bytes: side by
/// side, the first cap / n bytes of each range; otherwise the ranges in order until cap bytes are
/// taken. Each range's start is rounded up and its length down to 16 bytes (so nothing outside
/// the tensor is named), lengths are capped at kL2AheadMaxRange, and empty ranges are dropped.
L2AheadHint l2_ahead_prefix(const L2AheadHint& hint, size_t cap);

/// matmul_fused for ONE token column over outputs of two weight types in one launch: outs[0,
/// n_a) hold type_a weights, outs[n_a, n_outs) type_b weights, all rows of k elements reading
/// the same Q8K activations qx (quantize_activations of either type: one family). Where the
/// one-super-block-per-lane kernel serves the pair (mm::lane_mixed_pair: Q4_K + Q5_K, Q4_K +
/// Q6_K, Q5_K + Q6_K, the q/k/v mixes of Q4_K_S / Q4_K_M / Q5_K_M files) and
/// MINFER_CUDA_MMVQ_LANE_MIXED is not 0 (the default: 1), it launches one grid: every output gets the bits that
/// matmul_fused gives it with the other outputs of its type. Sets *launched to false (and returns
/// true) where that does not apply, so the caller launches one grid per type; otherwise returns
/// the launch's result.
bool matmul_fused_mixed(TensorType type_a, TensorType type_b, int64_t k, const MatmulOut* outs, int n_a, int n_outs,
                        const void* qx, cudaStream_t stream, bool* launched);

/// True when matmul_fused_mixed can take weights of type_a (first) and type_b in one grid
/// (mm::lane_mixed_pair): Q4_K + Q5_K, Q4_K + Q6_K, Q5_K + Q6_K.
bool matmul_mixed_pair(TensorType type_a, TensorType type_b);

/// True when matmul_fused / matmul_swiglu serve weights of `type` with rows of k for n token
/// columns: a quantized type matmul_supported accepts (Q4_0 .. Q8_0, Q4_K .. Q6_K) and
/// 1 <= n <= 8 (the MMVQ kernels). Otherwise the caller runs matmul() and the adds itself.
bool matmul_fused_supported(TensorType type, int64_t k, int64_t n);

/// True when matmul_fused serves these outputs for n token columns: matmul_fused_supported
/// (n <= 8, the MMVQ kernels), or n >= kMmqMinTokens with every weight accepted by MMQ
/// (mmq_accepts: a quantized type, 16-byte aligned), at most 3 outputs, and MINFER_NO_MMQ unset.
/// Otherwise the caller runs matmul() and the adds itself.
bool matmul_fused_serves(TensorType type, int64_t k, const MatmulOut* outs, int n_outs, int64_t n);

/// Up to 3 outputs (weights of one type and row length k, all reading x [k, n]) in ONE launch:
/// the rows of the outputs form one grid, the bias and residual adds are its epilogue.
/// `qx` is quantize_activations(type, x, k, n). n <= 8: every dot product is the bit-identical
/// one of matmul() (MMVQ); n > 8: the MMQ products matmul() computes, with the same bytes as
/// matmul() followed by the separate adds. Records "matmul_fused_bad_args" and launches nothing
/// when matmul_fused_serves is false or an output is malformed.
bool matmul_fused(TensorType type, int64_t k, const MatmulOut* outs, int n_outs, const void* qx, int64_t n,
                  cudaStream_t stream);

/// matmul_fused for one token column straight from the f32 activations x [k] (16-byte aligned),
/// where the one-super-block-per-lane kernel serves the outputs (Q4_K/Q5_K/Q6_K, mmvq_lane.cu):
/// each of its blocks quantizes x itself with quantize_activations' arithmetic, so the outputs are
/// the bits matmul_fused gives and the quantize launch is saved. Sets *launched and returns the
/// launch's result when it ran; otherwise *launched is false, nothing ran and the result is true
/// (the caller quantizes and calls matmul_fused). x must not overlap any output's y or residual:
/// blocks still read x while others write y (the quantize-first path did not need that).
/// MINFER_CUDA_MMVQ_LANE_QUANTIZE=0 turns it off (A/B).
bool matmul_fused_from_f32(TensorType type, int64_t k, const MatmulOut* outs, int n_outs, const float* x,
                           cudaStream_t stream, bool* launched);

/// y[j + t * ldy] = residual[j + t * ldr] + silu(Wg_j . x_t) * (Wu_j . x_t), j < m, in ONE launch
/// (a warp computes gate row j and up row j); the residual add only when `residual` is set.
/// silu is the CPU's (x / (1 + exp(-x)), exp correctly rounded), so the result is bitwise the
/// two matmul() calls followed by the swiglu kernel (elementwise.cuh) and the Add.
bool matmul_swiglu(TensorType type, int64_t k, int64_t m, const void* w_gate, const void* w_up, const void* qx,
                   int64_t n, float* y, int64_t ldy, const float* residual, int64_t ldr, cudaStream_t stream);

/// True when the products of n > 8 tokens with quantized weights of `type` (rows of k) run on
/// the f16 tensor cores (matmul_f16: weights dequantized to f16 a chunk of rows at a time,
/// activations the quantized ones dequantized to f16) instead of the int8 MMQ. Chosen by
/// MINFER_CUDA_PREFILL_MATMUL: f16 = always, mmq = never, auto (default) = by the measured rule
/// in matmul.cu. Never under MINFER_NO_MMQ=1 (the f32 GEMM then serves them).
bool f16_gemm_serves(TensorType type, int64_t k, int64_t n);
/// Device scratch bytes matmul_f16 uses for one output of m_max rows: the f16 activations [n][k],
/// the partial sums of its k-split plan, and one chunk of dequantized rows (at most
/// MINFER_CUDA_F16_CHUNK_MB MiB, balanced over the chunks of an m_max-row matrix). 0 for a type/k
/// that matmul_supported rejects or n < 1.
size_t f16_gemm_scratch_bytes(TensorType type, int64_t k, int64_t m_max, int64_t n);
/// The same for outputs of ms[0 .. n_ms) rows read together by one matmul_f16 call: the chunk
/// for the largest, and partial sums for the largest split plan any of them gets, so each output
/// is computed as it would be alone.
size_t f16_gemm_scratch_bytes(TensorType type, int64_t k, const int64_t* ms, int n_ms, int64_t n);
/// The outputs of matmul_fused (up to 3, same type and k, the bias and residual adds as the
/// epilogue) for n token columns on the f16 tensor cores: `qx` = quantize_activations(type, x,
/// k, n) is turned into f16 rows, each weight matrix into f16 rows a chunk at a time, both in
/// `scratch` (16-byte aligned, `scratch_bytes` long: f16_gemm_scratch_bytes or any size that
/// holds the activations and 64 rows). Values: the CPU's dequantized weights and activations,
/// each rounded to nearest f16, their products summed in f32 (docs/cuda-matmul.md gives the
/// tolerance). Activations beyond the f16 range (|x| > 65504) become inf and are reported as
/// kFaultF16Range in `fault` (the backend's fault words) when it is set. Records
/// "matmul_f16_bad_args" and launches nothing for a quantized type matmul_supported rejects,
/// n < 1, a malformed output or too small a scratch.
bool matmul_f16(TensorType type, int64_t k, const MatmulOut* outs, int n_outs, const void* qx, int64_t n,
                void* scratch, size_t scratch_bytes, cudaStream_t stream, uint32_t* fault = nullptr);
/// Device scratch bytes ffn_f16 uses (0 when a type is not quantized or a row length is not
/// one matmul_supported accepts): f16 x [n][k], f16 h [n][ff], the partial sums of k splits,
/// and one chunk of dequantized rows (interleaved gate/up rows of k, or down rows of ff).
size_t ffn_f16_scratch_bytes(TensorType t_gu, TensorType t_down, int64_t k, int64_t ff, int64_t m, int64_t n);
/// The SwiGLU feed-forward block on the f16 tensor cores for n token columns:
/// y[j + t * m] = residual[j + t * m] + sum_i Wd[j][i] h[t][i] (residual when set), with
/// h[t][i] = silu(Wg_i . x_t) * (Wu_i . x_t) rounded to f16 (the CPU's silu and product), x_t the
/// activations `qx` (quantize_activations(t_gu, x, k, n)) dequantized and rounded to f16, and
/// each weight the CPU's dequantized value rounded to f16. Gate and up rows are dequantized
/// interleaved so one GEMM computes both and applies SwiGLU in its epilogue; h never leaves f16.
/// An x or h value beyond the f16 range is reported as kFaultF16Range in `fault` when it is set.
/// Wg, Wu: [k, ff] of t_gu; Wd: [ff, m] of t_down; ff a multiple of 8. Records "ffn_f16_bad_args"
/// and launches nothing for types or sizes it does not serve or too small a scratch.
bool ffn_f16(TensorType t_gu, TensorType t_down, int64_t k, int64_t ff, int64_t m, const void* w_gate,
             const void* w_up, const void* w_down, const void* qx, int64_t n, float* y, const float* residual,
             void* scratch, size_t scratch_bytes, cudaStream_t stream, uint32_t* fault = nullptr);
/// Copies the quantized activations back to the host in the CPU's block format: n rows of
/// row_bytes(vec_dot_type, k) bytes (block_q8_0 / block_q8_1 / block_q8_K, or f16 / bf16
/// elements), so tests can compare them with cpu::quantize_activations byte for byte. The one
/// field not kept on the device, block_q8_1::s, is written as 0. Synchronizes `stream`. Returns
/// false for F32 weights (no quantized activations) or when a CUDA call failed.
bool quantized_activations_to_host(TensorType type, const void* qx, int64_t k, int64_t n,
                                   void* host, cudaStream_t stream);

/// y = W^T x. `qx` is the buffer quantize_activations filled for this x with the same k and n
/// (its layout depends on both), or x itself when quantized_activation_bytes is 0. One buffer
/// serves every weight type of the same family: Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 (Q8_0 and Q8_1 share
/// d and qs), or Q4_K/Q5_K/Q6_K. Chooses the kernel family by n: matrix-vector kernels
/// (MMVQ) for n <= 8, MMQ (quantized types) or the prefill GEMM above.
bool matmul(TensorType type, const void* W, int64_t k, int64_t m, const float* x, const void* qx,
            int64_t n, float* y, int64_t ldy, cudaStream_t stream);

}  // namespace minfer::cuda
