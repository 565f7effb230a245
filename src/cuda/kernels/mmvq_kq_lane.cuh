// The one-lane-per-super-block MMVQ for the K-quants (mmvq_kq_lane.cu): the pieces that the
// kernel and its host emulation (mmvq_emulate.cu) share, all __host__ __device__ (MM_HD).
//
// Arrangement (design: docs/cuda-matmul.md "K-quant MMVQ, one lane per super-block"):
//   * a row of nb super-blocks is handled by a segment of S = next_pow2(min(nb, 32)) lanes, so
//     a warp holds 32 / S rows; lane i of a segment computes the whole term of super-blocks
//     i, i + S, i + 2S, ... (S = 32 when nb > 16; when S < 32 every super-block has its own lane)
//     and adds it to its running sum: lane i is the contract's virtual lane t % 32 = i.
//   * the fold: virtual lanes >= S hold +0, so the contract's steps w = 16 .. S add +0.0f to
//     lanes < S; x + 0 + 0 = x + 0 for every float (it only turns -0 into +0), so ONE add of
//     +0.0f emulates them exactly; then the halving fold w = S/2 .. 1 inside the segment.
//   * weights are staged per segment through shared memory in chunks of S super-blocks (loads
//     of whole 16-byte words, coalesced within the segment; any 2-byte alignment);
//   * the activations of the chunk's super-blocks (all N token columns) are staged once per
//     thread block in shared memory, in a swizzled layout (below) so the segment's lanes, which
//     read 16-byte chunks of different super-blocks, hit different banks.
#pragma once

#include <cstdint>

#include "core/types.h"
#include "cuda/kernels/mmvq_blocks.cuh"
#include "cuda/kernels/mmvq_common.cuh"
#include "cuda/kernels/quantize_acts.cuh"

namespace minfer::cuda::mm {

// ---- activation chunk in shared memory ------------------------------------------------------
// For n token columns and a stride of cbk super-blocks (cbk = min(nb, 32)), bytes from the start:
//   qs    [n][cbk][16 chunks of 16 bytes]: chunk q (qs bytes 16q .. 16q+15 of super-block j)
//         at position q ^ (j & 7), so 8 consecutive j reading the same q use 8 bank groups;
//   bsums [n][cbk][2 halves of 16 bytes] (8 int16 each) at n*cbk*256: half h at h ^ ((j>>2)&1);
//   d     [n][cbk] float at n*cbk*288.

/// Bytes of an activation chunk (a multiple of 16).
MM_HD int kq_act_bytes(int n, int cbk) { return (n * cbk * 292 + 15) & ~15; }

MM_HD int kq_act_qs_off(int cbk, int col, int j, int q) {
  return (((col * cbk + j) << 4) + (q ^ (j & 7))) << 4;
}
MM_HD int kq_act_bs_off(int n, int cbk, int col, int j, int h) {
  return n * cbk * 256 + ((((col * cbk + j) << 1) + (h ^ ((j >> 2) & 1))) << 4);
}
MM_HD int kq_act_d_off(int n, int cbk, int col, int j) { return n * cbk * 288 + 4 * (col * cbk + j); }

/// Staging units of one activation chunk: 16 qs chunks, 2 bsums halves and 1 d per super-block
/// and column.
MM_HD int kq_act_units(int n, int cbk) { return n * cbk * 19; }

/// Copies staging unit u (0 <= u < kq_act_units) of the chunk whose super-block j is t0 + j of
/// the activations `a` into `sm`; units of super-blocks j >= cnt (past the row's end) are skipped.
/// The planes are 256-byte aligned and k a multiple of 256 (quantize_acts.cuh), so every qs and
/// bsums source is a 16-byte aligned address.
MM_HD void kq_stage_act_unit(const Q8KView& a, int64_t t0, int n, int cbk, int cnt, int u, uint8_t* sm) {
  const int nq = n * cbk * 16, nbs = n * cbk * 2;
  if (u < nq) {
    const int col = u / (cbk * 16), r = u - col * cbk * 16, j = r >> 4, q = r & 15;
    if (j >= cnt) return;
    const int4 v = ldg(reinterpret_cast<const int4*>(a.qs + col * a.k + (t0 + j) * 256 + 16 * q));
    *reinterpret_cast<int4*>(sm + kq_act_qs_off(cbk, col, j, q)) = v;
    return;
  }
  u -= nq;
  if (u < nbs) {
    const int col = u / (cbk * 2), r = u - col * cbk * 2, j = r >> 1, h = r & 1;
    if (j >= cnt) return;
    const int4 v = ldg(reinterpret_cast<const int4*>(a.bsums + (col * a.nb + t0 + j) * 16 + 8 * h));
    *reinterpret_cast<int4*>(sm + kq_act_bs_off(n, cbk, col, j, h)) = v;
    return;
  }
  u -= nbs;
  const int col = u / cbk, j = u - col * cbk;
  if (j >= cnt) return;
  *reinterpret_cast<float*>(sm + kq_act_d_off(n, cbk, col, j)) = ldg(a.d + col * a.nb + t0 + j);
}

// ---- weight stage of one segment ------------------------------------------------------------

/// 16-byte words of a segment's weight stage for chunks of S super-blocks of `bytes` bytes:
/// the chunk at any even offset inside its first word, plus one word that sm_u32 / sm_u32x4 may
/// read past the end.
MM_HD constexpr int kq_group_words(int bytes, int s) { return ((29 + s * bytes) >> 4) + 1; }

/// Words per lane of a segment's stage loads (the largest over S = 1 .. 32).
constexpr int kq_lane_regs(int bytes) {
  int u = 0;
  for (int s = 1; s <= 32; s <<= 1) {
    const int w = kq_group_words(bytes, s) - 1;
    const int per = (w + s - 1) / s;
    if (per > u) u = per;
  }
  return u;
}

/// log2 of the segment width S = next_pow2(min(nb, 32)).
MM_HD int kq_segment_log2(int64_t nb) {
  int l = 0;
  while (l < 5 && (int64_t{1} << l) < nb) ++l;
  return l;
}

// ---- the whole term of one super-block in one lane --------------------------------------------

/// The terms of super-block j of the staged chunk for the P weight rows (stage bytes sb[p] at
/// offset off[p]) and the N token columns of the staged activations `act` (n == N columns,
/// stride cbk): term[p][c] = kquant_term of the exact totals isum / msum, which are the sums of
/// the 8 parts' shares (mmvq_blocks.cuh decode / kquant_partial, the same integer products,
/// exact in int32, so the order of the additions does not matter).
template <TensorType kType, int N, int P>
MM_HD void kq_lane_terms(const uint8_t* const (&sb)[P], const int (&off)[P], const uint8_t* act, int cbk,
                         int j, float (&term)[P][N]) {
  using T = KQuant<kType>;
  int isum[P][N], msum[P][N];
MM_UNROLL
  for (int p = 0; p < P; ++p)
MM_UNROLL
    for (int c = 0; c < N; ++c) isum[p][c] = msum[p][c] = 0;
  KPartW w[P];
MM_UNROLL
  for (int part = 0; part < 8; ++part) {
MM_UNROLL
    for (int p = 0; p < P; ++p) w[p] = T::decode(sb[p], off[p], part);
MM_UNROLL
    for (int c = 0; c < N; ++c) {
      if constexpr (kType == TensorType::Q6_K) {
        const int hh = part >> 2, q4 = part & 3;
MM_UNROLL
        for (int r = 0; r < 4; ++r) {
          // elements 128 hh + 32 r + 8 q4 .. + 7: qs chunk 8 hh + 2 r + q4 / 2, half q4 % 2
          const int2 av = *reinterpret_cast<const int2*>(
              act + kq_act_qs_off(cbk, c, j, 8 * hh + 2 * r + (q4 >> 1)) + 8 * (q4 & 1));
MM_UNROLL
          for (int p = 0; p < P; ++p) {
            int s = dp4a(w[p].v[2 * r], av.x, 0);
            s = dp4a(w[p].v[2 * r + 1], av.y, s);
            s = dp4a(0xE0E0E0E0u, av.x, s);  // + sum(-32 * a)
            s = dp4a(0xE0E0E0E0u, av.y, s);
            isum[p][c] += w[p].sc[r] * s;
          }
        }
      } else {
        const int pp = part >> 1, h = part & 1;
        // elements 64 pp + 16 h .. + 15 (sub-block 2 pp) and 64 pp + 32 + 16 h .. (2 pp + 1)
        const int4 a0 = *reinterpret_cast<const int4*>(act + kq_act_qs_off(cbk, c, j, 4 * pp + h));
        const int4 a1 = *reinterpret_cast<const int4*>(act + kq_act_qs_off(cbk, c, j, 4 * pp + 2 + h));
        const int e0 = 4 * pp + h, e1 = 4 * pp + 2 + h;  // bsums[2 j0 + h], bsums[2 (j0 + 1) + h]
        const int b0 = *reinterpret_cast<const int16_t*>(act + kq_act_bs_off(N, cbk, c, j, e0 >> 3) + 2 * (e0 & 7));
        const int b1 = *reinterpret_cast<const int16_t*>(act + kq_act_bs_off(N, cbk, c, j, e1 >> 3) + 2 * (e1 & 7));
MM_UNROLL
        for (int p = 0; p < P; ++p) {
          int s0 = dp4a(w[p].v[0], a0.x, 0);
          s0 = dp4a(w[p].v[1], a0.y, s0);
          s0 = dp4a(w[p].v[2], a0.z, s0);
          s0 = dp4a(w[p].v[3], a0.w, s0);
          int s1 = dp4a(w[p].v[4], a1.x, 0);
          s1 = dp4a(w[p].v[5], a1.y, s1);
          s1 = dp4a(w[p].v[6], a1.z, s1);
          s1 = dp4a(w[p].v[7], a1.w, s1);
          isum[p][c] += w[p].sc[0] * s0 + w[p].sc[1] * s1;
          msum[p][c] += w[p].mn[0] * b0 + w[p].mn[1] * b1;
        }
      }
    }
  }
MM_UNROLL
  for (int c = 0; c < N; ++c) {
    const float da = *reinterpret_cast<const float*>(act + kq_act_d_off(N, cbk, c, j));
MM_UNROLL
    for (int p = 0; p < P; ++p) term[p][c] = kquant_term<kType>(w[p], da, isum[p][c], msum[p][c]);
  }
}

}  // namespace minfer::cuda::mm
