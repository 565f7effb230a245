// Prefill matrix product on the f16 / bf16 tensor cores (hgemm.cu), for n > 8 token columns.
//
// y[j + t * ldy] = residual[j + t * ldr] + ((sum_e W[j][e] a[t][e]) + bias[j])
//   W  [m][ldw] 16-bit rows (f16 or bf16, the weights' k elements; ldw >= k),
//   a  [n][lda] 16-bit token rows of the same kind (lda >= k),
// the bias and residual adds only when their pointers are set, each one rounded f32 operation
// (the graph's Add(y, b) then Add(r, y)). Products are exact in f32 (11- or 8-bit significands);
// the sums are the tensor cores' f32 accumulation in mma k order, so the result differs from the
// CPU's f32 dot products only by the accumulation error (docs/cuda-matmul.md gives the bound).
//
// One 256-thread block computes 128 tokens x BW weight rows (BW = 64 or 128, chosen per launch
// by hgemm_plan), walking k in stages of 64 elements (3-stage cp.async pipeline; 32 x 4
// stages as the alternative) through padded shared-memory rows (ldmatrix is conflict-free),
// `mma.sync.m16n8k16` with f32 accumulators, optionally split over k; on sm_90a (H100/H200, a
// build with 90a) the same tiles run as two warpgroups of `wgmma.mma_async` reading both
// operands from 128-byte-swizzled shared memory (HgemmPlan::wgmma). Needs sm_80+, the
// instantiation's shared memory opted in (hgemm_fit), and k, lda, ldw multiples of 8 with
// 16-byte aligned a and W (every 16-byte chunk either inside a row's k elements or wholly past
// them, which read as zeros).
//
// Quantized weights reach this product through two helpers: launch_dequant_f16 writes a range of
// rows as f16 (the CPU's dequantize_row_* values, gemm_dequant.cuh, rounded to nearest f16), and
// launch_acts_to_f16 turns the quantized activations (Q8 / Q8K planes) into f16 token rows (the
// CPU's dequantized activations, rounded to nearest f16). matmul.cu walks a weight matrix through
// a scratch buffer in chunks of rows, so the chunk just written is read back from L2.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "core/types.h"
#include "cuda/kernels/quantize_acts.cuh"
#include "cuda/kernels/smem_optin.cuh"

namespace minfer::cuda::mm {

inline constexpr int kHgemmBT = 128;     ///< tokens per block
inline constexpr int kHgemmBK = 32;      ///< k granularity of splits (the smaller stage)
/// MINFER_CUDA_PREFILL_MATMUL=auto: quantized products of at least this many tokens take the f16
/// GEMM (matmul_f16), fewer the int8 MMQ.
inline constexpr int64_t kF16GemmMinTokens = 16;

/// One product's output side (pointers are device pointers).
struct HgemmOut {
  const uint16_t* w = nullptr;  ///< [m][ldw] f16 or bf16 weights, 16-byte aligned
  int64_t ldw = 0;              ///< elements between weight rows, multiple of 8, >= k
  int64_t m = 0;                ///< weight rows = output rows
  float* y = nullptr;           ///< y[j + t * ldy]
  int64_t ldy = 0;
  const float* bias = nullptr;  ///< [m] or null
  const float* res = nullptr;   ///< res[j + t * ldr] or null (must not overlap y)
  int64_t ldr = 0;
  /// SwiGLU pairs: weight rows 2i and 2i + 1 are the gate and up rows of output i, which is
  /// silu(gate sum) * (up sum) (the CPU's formulas); m even, no bias or residual; y has m / 2
  /// columns.
  bool glu = false;
  /// When set (instead of y), outputs are written rounded to nearest f16: y16[j + t * ldy].
  uint16_t* y16 = nullptr;
  /// When set, a y16 output that is finite in f32 but beyond the f16 range is reported as
  /// kFaultF16Range (fault.h; the backend's fault words) instead of passing on as infinity unseen.
  uint32_t* fault = nullptr;
};

inline constexpr int kHgemmMaxSplits = 8;        ///< k splits of one product at most
inline constexpr int64_t kHgemmMinSplitK = 1024;  ///< elements of k per split at least (when split)
/// Cost model of hgemm_plan (relative, tuned on the H200, docs/cuda-matmul.md): an SM with one
/// block runs at this share of its two-block rate; a 64-row tile costs this much more per output
/// than the 128-row one; each split beyond the first adds this share (partial sums and reduce).
inline constexpr double kHgemmLoneBlockRate = 0.7;
inline constexpr double kHgemmNarrowTileCost = 1.2;
inline constexpr double kHgemmSplitCost = 0.15;

/// How one product is tiled: weight rows per block (128 or 64) and k splits (1 = none). With
/// splits > 1 each split writes raw f32 sums to a partial buffer and a second kernel adds them in
/// split order (deterministic), then the bias and residual.
struct HgemmPlan {
  int bw = 128;
  int splits = 1;
  int bk = 64;  ///< k elements per pipeline stage: 64 (3 stages, the default) or 32 (4 stages)
  /// The sm_90a build (hgemm_wgmma_supported): warpgroup MMA (wgmma.m64nBWk16) reading both
  /// operands from 128-byte-swizzled shared memory; bk 64 only. Same outputs and epilogues; its
  /// sums are within the same bound but not bitwise those of the mma.sync build.
  bool wgmma = false;
};

/// True when this build has the sm_90a code (MINFER_CUDA_ARCHS lists 90a) and the context's GPU
/// is compute capability 9.0 (H100 / H200): HgemmPlan::wgmma can run.
bool hgemm_wgmma_supported();

/// The plan with the least modeled time for n tokens x m rows x k on `sm_count` SMs with up to
/// `max_splits` splits (1: no split): the busiest SM's blocks times each block's work (rows x
/// k per split), scaled by the constants above. Pure host function (unit-tested without a GPU).
HgemmPlan hgemm_plan(int64_t n, int64_t m, int64_t k, int sm_count, int max_splits);

/// `p` if its kernel instantiation got its shared memory at context creation (smem_optin.cuh)
/// (a wgmma plan: with bk 64, when hgemm_wgmma_supported(), else it falls back to mma.sync),
/// else the first of (bw, bk 32), (64, 64), (64, 32) that did, with the same splits; bw = 0 when
/// none did (a GPU with less than ~80 KiB of opt-in shared memory per block: the caller takes
/// another kernel).
HgemmPlan hgemm_fit(HgemmPlan p, bool bf16);

/// Elements of k per split (a multiple of kHgemmBK) when k is cut into `splits`.
int64_t hgemm_split_length(int64_t k, int splits);

/// Bytes of the partial-sum buffer a split plan needs (0 for one split): splits x n x m f32.
size_t hgemm_partial_bytes(int64_t n, int64_t m, int splits);

/// The product above for n tokens of k elements with `plan` (`partial`: hgemm_partial_bytes of
/// device memory when plan.splits > 1, else unused). `bf16` picks the bf16 tensor-core format
/// (both operands bf16), else f16. Records "hgemm_bad_args" and launches nothing when a size,
/// alignment or plan rule is broken; "hgemm_f16" / "hgemm_bf16" (and the _w64 tile) or
/// "hgemm_reduce" on a launch failure.
bool launch_hgemm(bool bf16, const uint16_t* a, int64_t lda, int64_t n, int64_t k, const HgemmOut& o,
                  const HgemmPlan& plan, float* partial, size_t partial_bytes, cudaStream_t stream);

/// Rows [r0, r0 + rows) of the quantized weights `w` (row_bytes bytes per row,
/// k elements) as f16 into out[(r - r0) * ldw + e]; ldw a multiple of 8 >= k, out 16-byte aligned,
/// k a multiple of 8. Site "dequant_f16_<type>".
bool launch_dequant_f16(TensorType type, const void* w, int64_t row_bytes, int64_t k, int64_t r0, int64_t rows,
                        uint16_t* out, int64_t ldw, cudaStream_t stream);

/// The activations of `L` (a Q8 or Q8K layout filled by launch_quantize_acts) as f16 token rows
/// out[t * lda + e] (L.k a multiple of 8, lda >= L.k a multiple of 8, out 16-byte aligned).
/// A value beyond the f16 range is reported as kFaultF16Range in `fault` when it is set.
/// Site "acts_to_f16".
bool launch_acts_to_f16(const ActLayout& L, const void* acts, uint16_t* out, int64_t lda, cudaStream_t stream,
                        uint32_t* fault = nullptr);

/// The hgemm instantiations that need more than 48 KiB of dynamic shared memory (smem_optin.cuh).
std::span<const SmemOptin> hgemm_smem_optins();

}  // namespace minfer::cuda::mm
