// The per-thread arithmetic of the tensor-core K-quant MMVQ (mmvq_mma.cu), __host__ __device__
// so that mmvq_emulate.cu runs the kernel's own fragment packing, sums, terms and fold order on
// the host (the mma.sync itself is emulated there from the PTX fragment layout).
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k32", .s8): thread (g, tq) = (lane / 4,
// lane % 4) holds A rows g (regs 0, 2) and g + 8 (regs 1, 3), k slots 4 tq .. 4 tq + 3 (regs 0,
// 1) and 16 + 4 tq .. 16 + 4 tq + 3 (regs 2, 3); B column g, the same k slots (regs 0, 1); C
// rows g (c0, c1) and g + 8 (c2, c3), columns 2 tq and 2 tq + 1. Slots 4 tq + i and 16 + 4 tq + i
// carry the sub-block's elements 8 tq + i and 8 tq + 4 + i, in A and B alike.
#pragma once

#include <cstdint>

#include "cuda/kernels/mmvq_blocks.cuh"
#include "cuda/kernels/mmvq_common.cuh"

namespace minfer::cuda::mm {

/// The 5-bit reversal of i: the order in which the halving fold's leaves pair up adjacently.
MM_HD constexpr int bitrev5(int i) {
  return ((i & 1) << 4) | ((i & 2) << 2) | (i & 4) | ((i & 8) >> 2) | ((i & 16) >> 4);
}

/// The pairwise fold of v[Lo, Lo + N) in order (N a power of two): (v0 + v1) + (v2 + v3) ... With
/// the leaves in bit-reversed lane order this is the contract's halving fold (lane[k] + lane[k + w]).
template <int N, int Lo = 0>
MM_HD float tree_fold(const float* v) {
  if constexpr (N == 1) {
    return v[Lo];
  } else {
    return fadd(tree_fold<N / 2, Lo>(v), tree_fold<N / 2, Lo + N / 2>(v));
  }
}

template <TensorType kType>
struct MmaK {
  /// block_q4_K / block_q5_K / block_q6_K (blocks.h)
  static constexpr int kBytes = kType == TensorType::Q4_K ? 144 : kType == TensorType::Q5_K ? 176 : 210;
  static constexpr int kQsOff = kType == TensorType::Q4_K ? 16 : 48;  ///< qs offset (Q4_K, Q5_K)
};

/// What a thread loads of one row's super-block: the 16-byte header (d, dmin, scales), the qs
/// words 32 q + 8 tq .. + 7 for q = 0..3 and (Q5_K) qh bytes 8 tq .. 8 tq + 7.
struct MmaRowRaw {
  uint4 hd;
  uint2 qs[4];
  uint2 qh;
};

/// A-fragment words of one row for sub-block 2q + hi: x = elements 8 tq .. + 3 (k slots 4 tq ..),
/// y = elements 8 tq + 4 .. + 7 (slots 16 + 4 tq ..), as unsigned bytes 0..15 (Q4_K) or 0..31.
template <TensorType kType>
MM_HD uint2 mma_a_words(const MmaRowRaw& r, int q, int hi) {
  uint32_t x = hi ? (r.qs[q].x >> 4) & 0x0F0F0F0Fu : r.qs[q].x & 0x0F0F0F0Fu;
  uint32_t y = hi ? (r.qs[q].y >> 4) & 0x0F0F0F0Fu : r.qs[q].y & 0x0F0F0F0Fu;
  if constexpr (kType == TensorType::Q5_K) {
    // Bit 2q + hi of qh[l] is bit 4 of element l of sub-block 2q + hi (blocks.h block_q5_K).
    x |= ((r.qh.x >> (2 * q + hi)) & 0x01010101u) << 4;
    y |= ((r.qh.y >> (2 * q + hi)) & 0x01010101u) << 4;
  }
  return make_uint2(x, y);
}

/// The 6-bit scales and mins of a row's 8 sub-blocks, decoded once per super-block from its header.
struct MmaScales {
  int sc[8];
  int mn[8];
};

MM_HD MmaScales mma_scales(const uint4& hd) {
  MmaScales s;
MM_UNROLL
  for (int q = 0; q < 4; ++q) {  // k4_quarter_scales: sub-blocks 2q (bits 0..7) and 2q + 1 (8..15)
    uint32_t sc, mn;
    k4_quarter_scales(q, hd.y, hd.z, hd.w, &sc, &mn);
    s.sc[2 * q] = static_cast<int>(sc & 0xFFu);
    s.sc[2 * q + 1] = static_cast<int>(sc >> 8);
    s.mn[2 * q] = static_cast<int>(mn & 0xFFu);
    s.mn[2 * q + 1] = static_cast<int>(mn >> 8);
  }
  return s;
}

/// The term of one output from its row's header and scales, the exact isum = sum_j sc_j s_j, the
/// column's sub-block sums bsum[j] (= bsums[2j] + bsums[2j + 1] of the super-block; msum =
/// sum_j m_j bsum[j]) and its scale da: kquarter_term's formula.
MM_HD float mma_term(const uint4& hd, const MmaScales& s, int isum, const int (&bsum)[8], float da) {
  int msum = 0;
MM_UNROLL
  for (int j = 0; j < 8; ++j) msum += s.mn[j] * bsum[j];
  return kquarter_term(hd.x, da, isum, msum);
}

// ---- Q6_K: one m16n8k16 per 16-element group ----------------------------------------------------
//
// Group G = 8 hh + 2 quad + lh (hh, lh in 0..1, quad in 0..3) is elements 128 hh + 32 quad +
// 16 lh .. + 15 of the super-block, with scale scales[G] and activation sum bsums[G] (blocks.h
// block_q6_K; the order of dequantize_row_q6_K: element 128 hh + 32 quad + l has its low 4 bits in
// ql[64 hh + 32 (quad % 2) + l], low nibble for quad < 2, and its top 2 bits in
// qh[32 hh + l] >> 2 quad). Thread tq holds the group's elements 4 tq .. 4 tq + 3 (k slots
// 4 tq .. of the k16 fragments), so it reads the ql words at 64 hh + 32 s + 16 lh + 4 tq
// (s = quad % 2: low nibbles for quad s, high for quad s + 2) and the qh words at 32 hh + 16 lh +
// 4 tq (all four quads), 2-byte aligned like the block.

/// What a thread reads of one row's Q6_K super-block.
struct MmaQ6Raw {
  uint32_t ql[2][2][2];  ///< [hh][s][lh]
  uint32_t qh[2][2];     ///< [hh][lh]
  uint32_t sc[4];        ///< scales[0..15] (int8), four to a word
  uint16_t d;            ///< half bits
};

/// The A-fragment word of one row for group (hh, quad, lh): q in 0..63 as unsigned bytes (the -32
/// is applied with the activations' group sum).
MM_HD uint32_t mma_q6_a_word(const MmaQ6Raw& r, int hh, int quad, int lh) {
  const uint32_t l = r.ql[hh][quad & 1][lh];
  const uint32_t lo = quad < 2 ? l & 0x0F0F0F0Fu : (l >> 4) & 0x0F0F0F0Fu;
  return lo | (((r.qh[hh][lh] >> (2 * quad)) & 0x03030303u) << 4);
}

/// Group G's exact share of the contract's isum: sc_G (sum_l q a - 32 bsum_G).
MM_HD int mma_q6_group(const MmaQ6Raw& r, int group, int dot, int bsum) {
  const int sc = static_cast<int8_t>((r.sc[group >> 2] >> (8 * (group & 3))) & 0xFFu);
  return sc * (dot - 32 * bsum);
}

}  // namespace minfer::cuda::mm
