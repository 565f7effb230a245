// Device side of a batched MMVQ launch (mmvq.cuh MmvqBatch): the segment a warp's row falls in
// and the epilogue (bias, SwiGLU, residual) applied to the folded dot products.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/mmvq.cuh"
#include "cuda/kernels/mmvq_common.cuh"

/// The launch-site names of one MMVQ kernel family for n = 1..8 token columns, indexed by n - 1
/// ("mmvq_q4_K_n1" ...): what a failed launch reports and MINFER_CUDA_FAIL_LAUNCH matches.
#define MINFER_MMVQ_SITES(name)                                                        \
  {                                                                                    \
    "mmvq_" name "_n1", "mmvq_" name "_n2", "mmvq_" name "_n3", "mmvq_" name "_n4",    \
        "mmvq_" name "_n5", "mmvq_" name "_n6", "mmvq_" name "_n7", "mmvq_" name "_n8" \
  }

namespace minfer::cuda::mm {

/// The segment of one warp's row, its fields read with constant indices (a kernel parameter
/// indexed with a run-time value would be copied to local memory first).
struct SegRow {
  const uint8_t* w;
  int64_t m;
  float* y;
  int64_t ldy;
  const float* bias;
  const float* res;
  int64_t ldr;
  int64_t row;  ///< the row inside the segment
};

/// Rows of the launch grid: all segments' rows, or (glu) the gate segment's.
inline int64_t batch_rows(const MmvqBatch& b) {
  if (b.glu) return b.seg[0].m;
  int64_t rows = 0;
  for (int s = 0; s < b.n_seg; ++s) rows += b.seg[s].m;
  return rows;
}

/// Segment `s` of the batch with the row inside it.
__device__ __forceinline__ SegRow seg_row(const MmvqBatch& b, int s, int64_t row) {
#define MINFER_PICK(f) (s == 0 ? b.seg[0].f : s == 1 ? b.seg[1].f : b.seg[2].f)
  SegRow r;
  r.w = static_cast<const uint8_t*>(MINFER_PICK(w));
  r.m = MINFER_PICK(m);
  r.y = MINFER_PICK(y);
  r.ldy = MINFER_PICK(ldy);
  r.bias = MINFER_PICK(bias);
  r.res = MINFER_PICK(res);
  r.ldr = MINFER_PICK(ldr);
  r.row = row;
#undef MINFER_PICK
  return r;
}

/// Finds the segment of grid row `row` (false past the last row). With glu, segment 0 (gate).
__device__ __forceinline__ bool find_segment(const MmvqBatch& b, int64_t row, SegRow* out) {
  const int64_t m0 = b.seg[0].m, m1 = b.seg[1].m, m2 = b.seg[2].m;
  if (row < m0) {
    *out = seg_row(b, 0, row);
    return true;
  }
  if (b.glu) return false;
  if (b.n_seg > 1 && row - m0 < m1) {
    *out = seg_row(b, 1, row - m0);
    return true;
  }
  if (b.n_seg > 2 && row - m0 - m1 < m2) {
    *out = seg_row(b, 2, row - m0 - m1);
    return true;
  }
  return false;
}

/// Writes the folded dot products v[c] (token column c) of row s.row: + bias, then res + value.
template <int N>
__device__ __forceinline__ void store_row(const SegRow& s, const float (&v)[N]) {
  const float b = s.bias != nullptr ? __ldg(s.bias + s.row) : 0.0f;
#pragma unroll
  for (int c = 0; c < N; ++c) {
    float o = v[c];
    if (s.bias != nullptr) o = __fadd_rn(o, b);
    if (s.res != nullptr) o = __fadd_rn(s.res[s.row + c * s.ldr], o);
    s.y[s.row + c * s.ldy] = o;
  }
}

/// The two rows of work item (row pair) p of the direct-load MMVQ kernel: with glu, row p of the
/// gate (s0) and of the up segment (s1); otherwise grid rows 2p and 2p + 1, each in its own
/// segment (a missing second row gives s1 = s0, computed but not stored). False past the last
/// pair.
template <bool kGlu>
__device__ __forceinline__ bool pair_rows(const MmvqBatch& b, int64_t p, SegRow* s0, SegRow* s1) {
  if (!find_segment(b, kGlu ? p : 2 * p, s0)) return false;
  if constexpr (kGlu) {
    *s1 = *s0;
    s1->w = static_cast<const uint8_t*>(b.seg[1].w);
  } else if (!find_segment(b, 2 * p + 1, s1)) {
    *s1 = *s0;
  }
  return true;
}

/// SwiGLU of gate and up values: silu(g) * u with the CPU's silu (silu_cpu, common.cuh).
template <int N>
__device__ __forceinline__ void swiglu_in_place(float (&g)[N], const float (&u)[N]) {
#pragma unroll
  for (int c = 0; c < N; ++c) g[c] = __fmul_rn(silu_cpu(g[c]), u[c]);
}

/// Folds the two rows' sums of work item p (pair_rows) and stores them from lane 0: with glu
/// silu(gate) * up into the gate segment, otherwise each row into its segment. Called by the
/// whole warp.
template <bool kGlu, int N>
__device__ __forceinline__ void store_pair(const MmvqBatch& b, int64_t p, float (&acc)[2][N], int lane) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int c = 0; c < N; ++c) acc[r][c] = fold_lanes(acc[r][c]);
  if (lane != 0) return;
  SegRow s0, s1;
  find_segment(b, kGlu ? p : 2 * p, &s0);
  if constexpr (kGlu) {
    swiglu_in_place(acc[0], acc[1]);
    store_row(s0, acc[0]);
  } else {
    store_row(s0, acc[0]);
    if (find_segment(b, 2 * p + 1, &s1)) store_row(s1, acc[1]);
  }
}

}  // namespace minfer::cuda::mm
