// Matrix-vector / small-batch kernels (n = 1..8 token columns) behind matmul() (matmul.cuh).
//
// Every kernel reproduces the CPU reference dot product bit for bit: integer block sums with
// dp4a, one f32 term per block (per element for F32/F16/BF16) with the CPU's operation order,
// term t added to virtual lane t % 32, lanes folded by halving (quant_ref.h). A warp owns the 32
// virtual lanes of each row it computes.
//   mmvq_legacy.cu  Q4_0 Q4_1 Q5_0 Q5_1 Q8_0: one row per warp, lane l handles blocks l mod 32.
//   mmvq_kquants.cu Q4_K Q5_K Q6_K: one row per warp, 8 lanes per super-block, 4 super-blocks
//                   at a time; the term of super-block t is shuffled to lane t % 32.
//   mmvq_kquants_direct.cu Q4_K Q5_K with 16-byte aligned weights: two rows per warp, 4 lanes
//                   per super-block, loads straight into registers (no stage).
//   mmvq_q6k_direct.cu Q6_K rows of up to 4096 elements: the same split as the direct Q4_K/Q5_K
//                   kernel; its 210-byte blocks are 2-byte aligned, so each lane loads the
//                   aligned words around its bytes and shifts them into place.
//   mmvq_lane.cu    Q4_K Q5_K Q6_K, one token column: one super-block per lane (lane t % 32 computes
//                   all of super-block t), weights streamed through a per-warp cp.async ring.
//   mmvq_float.cu   F32 F16 BF16: 4 (2-byte types) or 8 (F32) lanes per row, each owning 8 or 4
//                   virtual lanes, so 16-byte loads need no data exchange.
// Quantized weights are streamed with 16-byte loads of aligned words into a per-warp shared
// memory stage (their blocks of 18..210 bytes are only 2-byte aligned), then unpacked there.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/types.h"
#include "cuda/kernels/quantize_acts.cuh"
#include "cuda/kernels/smem_optin.cuh"

namespace minfer::cuda::mm {

/// y[j + t * ldy] = dot(W row j, activation column t), j < m, t < n, n in 1..8.
/// W: m rows of `row_bytes` bytes (2-byte aligned; 4-byte for F32).
struct MmvqArgs {
  const void* w;
  int64_t k;
  int64_t m;
  int64_t row_bytes;
  int n;
  float* y;
  int64_t ldy;
};

/// One segment of output rows of a batched quantized MMVQ launch: for j < m (rows of the
/// weights at `w`, MmvqBatch::row_bytes apart) and t < n,
///   y[j + t * ldy] = res[j + t * ldr] + ((W_j . x_t) + bias[j])
/// where the bias add happens only when `bias` is set and the residual add only when `res` is
/// set; each add is one rounded f32 operation, so the result is bitwise the dot product followed
/// by the graph's separate Add ops.
struct MmvqSegment {
  const void* w = nullptr;
  int64_t m = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  const float* bias = nullptr;
  const float* res = nullptr;
  int64_t ldr = 0;
};
inline constexpr int kMmvqMaxSegments = 3;

/// Segments of one weight type and row length k computed by ONE launch: the rows of the
/// segments are concatenated into one grid (a warp finds its segment by its row index). With
/// `glu`, exactly 2 segments of equal m (gate, up) and each warp computes row j of both:
///   y0[j + t * ldy0] = res0[j + t * ldr0] + silu(gate_j . x_t) * (up_j . x_t)
/// (silu as the CPU's: x / (1 + exp(-x)), exp correctly rounded; segment 1's y, bias and res
/// are unused). The dot products are the bit-identical ones of the unbatched kernels.
struct MmvqBatch {
  MmvqSegment seg[kMmvqMaxSegments];
  int n_seg = 1;
  int64_t k = 0;
  int64_t row_bytes = 0;
  int n = 1;  ///< token columns, 1..8
  bool glu = false;
};

/// A batch of one segment: the plain y = W^T x of `a`.
inline MmvqBatch single_batch(const MmvqArgs& a) {
  MmvqBatch b;
  b.seg[0].w = a.w;
  b.seg[0].m = a.m;
  b.seg[0].y = a.y;
  b.seg[0].ldy = a.ldy;
  b.k = a.k;
  b.row_bytes = a.row_bytes;
  b.n = a.n;
  return b;
}

/// The staged quantized MMVQ kernels: one warp per row (per gate/up row with glu).
bool launch_mmvq_legacy(TensorType type, const MmvqBatch& b, const Q8View& acts, cudaStream_t stream);
bool launch_mmvq_kquant(TensorType type, const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream);
/// The tensor-core K-quant MMVQ (mmvq_mma.cu): Q4_K, Q5_K (weights 16-byte aligned) and Q6_K
/// (2-byte aligned), 3..8 token columns (at 2 the dp4a kernels are faster), acts.qs 16-byte and
/// acts.bsums 8-byte aligned; one int8 mma.sync per 32-element sub-block (Q6_K: per 16-element
/// group) for 16 rows x 8 columns, the contract's lane order kept (bit-identical to
/// launch_mmvq_kquant). Sets *launched to false (and returns true) when it does not apply.
/// variant (a tuning knob, same bits): 2 = 8 warps a tile, else 4 warps; two blocks per SM.
bool launch_mmvq_kquant_mma(TensorType type, const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream,
                            int variant, bool* launched);
/// The direct-load K-quant MMVQ (mmvq_kquants_direct.cu): Q4_K and Q5_K with every segment's
/// weights 16-byte aligned (acts.qs 16-byte, acts.bsums 8-byte aligned). Sets *launched to false
/// (and returns true) when it does not apply, so the caller falls back to launch_mmvq_kquant;
/// otherwise returns the launch's result. Same results, bit for bit, as launch_mmvq_kquant.
/// kb: 2 = 16 super-blocks per warp and step, else 8 (a tuning knob).
bool launch_mmvq_kquant_direct(TensorType type, const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream,
                               int kb, bool* launched);
/// The direct-load Q6_K MMVQ (mmvq_q6k_direct.cu): any 2-byte aligned weights (acts.qs 16-byte,
/// acts.bsums 4-byte aligned), rows of up to kQ6DirectMaxK elements unless any_length. Sets
/// *launched to false (and returns true) when it does not apply, so the caller falls back to
/// launch_mmvq_kquant; otherwise returns the launch's result. Same results, bit for bit, as
/// launch_mmvq_kquant.
bool launch_mmvq_q6k_direct(const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream, bool any_length,
                            bool* launched);
/// Weight bytes the lane kernel asks the L2 cache to fetch once its warps are done (the first
/// bytes the next decode product reads, so they stream from memory while this kernel ends and
/// the small kernels between the two run): up to 3 ranges, each 16-byte aligned with a length
/// that is a multiple of 16 and lying inside its tensor. Warp w of the grid prefetches 16-byte
/// words [w q, (w + 1) q) of their concatenation (q = words_per_warp, set by the launcher:
/// mmvq_lane.cuh l2_share_bounds) with cp.async.bulk.prefetch.L2 (sm_90+; nothing below). A
/// hint: no result depends on it.
struct L2Ahead {
  const void* p[3] = {nullptr, nullptr, nullptr};
  uint32_t bytes[3] = {0, 0, 0};
  int n = 0;
  uint32_t words_per_warp = 0;
};

/// Tuning of launch_mmvq_lane; every setting gives the same bits.
struct LaneTuning {
  int stages = 0;         ///< shared-memory ring depth per warp: 2..4 (else 2); the deepest that fits is taken
  int block_warps = 0;    ///< warps per block, 1..16; 0 = 16 for rows of more than 16 super-blocks, else 8
                          ///< (narrowed until the block's shared memory fits)
  int64_t max_warps = 0;  ///< > 0: at most this many warps in the grid (tests: each warp walks many row groups)
  int split = 0;          ///< row groups per warp: 0 = a contiguous run, 1 = round robin (w, w + W, ...)
  L2Ahead ahead;          ///< the next product's first weight bytes, prefetched into L2 at the end;
                          ///< ranges that are null, empty, misaligned or not a multiple of 16 bytes
                          ///< are dropped, and any that remain imply split = 1
};

/// The decode MMVQ with one super-block per lane (mmvq_lane.cu): Q4_K, Q5_K, Q6_K, n = 1, every
/// segment's weights 16-byte aligned (acts.qs and acts.bsums 16-byte, acts.d 4-byte aligned); with
/// glu, rows of at most 16 super-blocks. `tuning` (LaneTuning above): ring depth, block width,
/// grid cap, how row groups are dealt to warps, and the L2 prefetch of the next product's
/// weights. Sets *launched to false (and returns true) when it does not apply or its shared
/// memory does not fit, so the caller falls back; otherwise returns the launch's result. Same
/// results, bit for bit, as launch_mmvq_kquant.
/// Two requirements beyond the other MMVQ kernels: the weights must not be written by the
/// previous kernel in the stream (they are read before griddepcontrol.wait, see launch.cuh), and,
/// as for the direct Q6_K kernel, acts.bsums must be the sums of acts.qs that quantize_activations
/// writes (the Q6_K -32 offset is taken through them).
/// With `xf` set (f32 activations [k], 16-byte aligned, written by an earlier kernel, not
/// overlapping any segment's y or res) `acts` is not
/// read: each block quantizes xf itself, with the arithmetic of quantize_activations (Q8K), so the
/// results are the same bits and the quantize launch is saved.
bool launch_mmvq_lane(TensorType type, const MmvqBatch& b, const Q8KView& acts, const float* xf, cudaStream_t stream,
                      const LaneTuning& tuning, bool* launched);
/// True for the pairs of weight types launch_mmvq_lane_mixed serves (first, second): (Q4_K, Q5_K),
/// (Q4_K, Q6_K), (Q5_K, Q6_K): the q/k/v mixes of llama.cpp's Q4_K_S, Q4_K_M and Q5_K_M files.
bool lane_mixed_pair(TensorType type_a, TensorType type_b);

/// launch_mmvq_lane for a batch of two weight types in ONE grid: segments [0, seg_b) hold type_a
/// weights (rows of b.row_bytes), segments [seg_b, n_seg) type_b weights (rows of row_bytes_b,
/// which must be type_b's row bytes for b.k); all read the same Q8K activations. Each type's rows
/// start their own row groups, so a chunk has one type; every output has the bits launch_mmvq_lane
/// gives it in a grid of its own type. No glu. Sets *launched to false (and returns true) when
/// the pair is not lane_mixed_pair or anything launch_mmvq_lane needs does not hold; otherwise
/// returns the launch's result (sites "mmvq_lane_q4_K_q6_K", ...).
bool launch_mmvq_lane_mixed(TensorType type_a, TensorType type_b, const MmvqBatch& b, int seg_b, int64_t row_bytes_b,
                            const Q8KView& acts, const float* xf, cudaStream_t stream, const LaneTuning& tuning,
                            bool* launched);
/// The lane kernel's instantiations, each opted in to the device's largest per-block shared memory
/// (bytes = 0 in the list): their use depends on the row length and the ring depth.
std::span<const SmemOptin> mmvq_lane_smem_optins();
/// The longest Q6_K row (elements) the direct kernel takes by default: 16 super-blocks, two steps
/// of one warp (measured: docs/perf/2026-11-30-mmvq-q6k-direct.md).
inline constexpr int64_t kQ6DirectMaxK = 16 * 256;
/// F32: `acts` is x (f32, token column t at x + t * k); F16/BF16: the converted plane
/// (uint16, column t at acts + t * act_stride).
bool launch_mmvq_float(TensorType type, const MmvqArgs& a, const void* acts, int64_t act_stride,
                       cudaStream_t stream);

/// Thread blocks per SM that the n = 1 direct-load K-quant kernels and the SwiGLU legacy kernel
/// are compiled for when they run short rows (__launch_bounds__ minimum: ~95 registers instead of
/// 104-120, 20 warps per SM instead of 16). Measured on the H200 (docs/perf/2026-11-30-mmvq-occupancy.md):
/// rows of <= kMmvqHighOccMaxK elements gain (q4_K 7B output 106.8 -> 95.7 us, 7B Q4_0 tg128 +3%),
/// longer rows lose (q4_K 7B ffn_down 16.5 -> 22.1 us: the next step's loads no longer fit).
inline constexpr int kMmvqHighOccBlocks = 5;
inline constexpr int64_t kMmvqHighOccMaxK = 4096;

/// Whether a launch of n = 1 token column and rows of k elements takes the kMmvqHighOccBlocks
/// variant: k <= kMmvqHighOccMaxK, unless MINFER_CUDA_MMVQ_OCC says 1 (never) or 2 (always).
/// Host side; defined in matmul.cu.
bool mmvq_high_occupancy(int64_t k);

/// Warps (rows) per thread block of the quantized MMVQ kernels.
inline constexpr int kMmvqWarps = 4;

}  // namespace minfer::cuda::mm
