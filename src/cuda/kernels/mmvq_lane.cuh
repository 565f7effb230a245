// One K-quant super-block per thread: the f32 term of a whole Q4_K, Q5_K or Q6_K super-block
// (256 weights) times its Q8K activation block, computed by one thread from copies of both in
// shared memory. The decode MMVQ of mmvq_lane.cu gives lane t % 32 super-block t, which is where
// the accumulation contract (quant_ref.h) adds that term, so its lanes exchange nothing before
// the final fold; one scale decode and one term per 256 weights (the direct kernels split a
// super-block over 4 lanes and pay both 4 times, plus the shuffles).
//
// Block layouts: src/quant/blocks.h (ggml-common.h block_q4_K, block_q5_K, block_q6_K). Integer
// sums are exact (quant_ref.h: their order is free); the term is kquarter_term / q6k_quarter_term,
// the contract's formula and operation order.
//
// Everything here is __host__ __device__ (MM_HD): mmvq_emulate.cu runs it on the host.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/types.h"
#include "cuda/kernels/mmvq_blocks.cuh"
#include "cuda/kernels/mmvq_common.cuh"

namespace minfer::cuda::mm {

/// The activation stage of mmvq_lane.cu, per super-block t at t * kLaneActStride bytes: the 256
/// qs (int8) at +0, the 16 bsums (int16, sums of 16 consecutive qs) at +kLaneActBsums, d (f32) at
/// +kLaneActD. 304 = 19 x 16 bytes: 8 lanes reading 16 bytes 304 bytes apart (one phase of a
/// 16-byte shared-memory load) touch 8 distinct groups of 4 banks.
inline constexpr int kLaneActStride = 304;
inline constexpr int kLaneActBsums = 256;
inline constexpr int kLaneActD = 288;

/// Bytes of one super-block (blocks.h): Q4_K 144, Q5_K 176, Q6_K 210.
template <TensorType kType>
inline constexpr int kLaneBlockBytes = kType == TensorType::Q4_K ? 144 : kType == TensorType::Q5_K ? 176 : 210;

// ---- small exact integer helpers (device instructions, same values on the host) ---------------

/// c + sum of (unsigned byte i of a) * (signed byte i of b): dp4a.u32.s32.
MM_HD int dp4a_us(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
#else
  for (int i = 0; i < 4; ++i) c += static_cast<int>((a >> (8 * i)) & 0xFFu) * static_cast<int8_t>(b >> (8 * i));
  return c;
#endif
}

/// c + (signed 16-bit half 0 of a) * (signed byte kByte of b) + (half 1 of a) * (byte kByte + 1 of
/// b), kByte 0 or 2: dp2a.lo / dp2a.hi (.s32.s32).
template <int kByte>
MM_HD int dp2a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
  if constexpr (kByte == 0)
    return __dp2a_lo(static_cast<int>(a), static_cast<int>(b), c);
  else
    return __dp2a_hi(static_cast<int>(a), static_cast<int>(b), c);
#else
  return c + static_cast<int16_t>(a & 0xFFFFu) * static_cast<int8_t>(b >> (8 * kByte)) +
         static_cast<int16_t>(a >> 16) * static_cast<int8_t>(b >> (8 * kByte + 8));
#endif
}

/// 16 bytes at p (16-byte aligned), as four little-endian words.
MM_HD uint4 lane_ld16(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint4*>(p);
#else
  uint4 r;
  std::memcpy(&r, p, 16);
  return r;
#endif
}

MM_HD uint32_t lane_ld4(const uint8_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t r;
  std::memcpy(&r, p, 4);
  return r;
#endif
}

/// The 6-bit scales and mins of all 8 sub-blocks of a Q4_K/Q5_K super-block from its scale bytes
/// (s0 = bytes 0..3, s1 = 4..7, s2 = 8..11; the packing of ggml-common.h get_scale_min_k4): byte
/// j of sc[0] / mn[0] is sub-block j's scale / min (j < 4), byte j of sc[1] / mn[1] sub-block
/// 4 + j's.
MM_HD void k4_scales_all(uint32_t s0, uint32_t s1, uint32_t s2, uint32_t (&sc)[2], uint32_t (&mn)[2]) {
  sc[0] = s0 & 0x3F3F3F3Fu;
  mn[0] = s1 & 0x3F3F3F3Fu;
  sc[1] = (s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u);
  mn[1] = ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u);
}

/// The term of the Q4_K or Q5_K super-block at w (16-byte aligned) times the activation block at
/// a (16-byte aligned, the kLaneActStride layout).
template <TensorType kType>
MM_HD float kquant_lane_term(const uint8_t* w, const uint8_t* a) {
  static_assert(kType == TensorType::Q4_K || kType == TensorType::Q5_K);
  constexpr int kQs = kType == TensorType::Q4_K ? 16 : 48;  // qs offset; Q5_K: qh[32] at 16
  const uint4 hd = lane_ld16(w);
  uint32_t sc[2], mn[2];
  k4_scales_all(hd.y, hd.z, hd.w, sc, mn);
  uint32_t qh[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if constexpr (kType == TensorType::Q5_K) {
    const uint4 h0 = lane_ld16(w + 16), h1 = lane_ld16(w + 32);
    const uint32_t h[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
MM_UNROLL
    for (int i = 0; i < 8; ++i) qh[i] = h[i];
  }
  int isum = 0;
MM_UNROLL
  for (int q = 0; q < 4; ++q) {  // sub-blocks 2q (low nibbles) and 2q + 1 (high nibbles)
    const uint4 qa = lane_ld16(w + kQs + 32 * q), qb = lane_ld16(w + kQs + 32 * q + 16);
    const uint4 a0 = lane_ld16(a + 64 * q), a1 = lane_ld16(a + 64 * q + 16);
    const uint4 a2 = lane_ld16(a + 64 * q + 32), a3 = lane_ld16(a + 64 * q + 48);
    const uint32_t qw[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
    const uint32_t alo[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
    const uint32_t ahi[8] = {a2.x, a2.y, a2.z, a2.w, a3.x, a3.y, a3.z, a3.w};
    int s_lo = 0, s_hi = 0;
MM_UNROLL
    for (int i = 0; i < 8; ++i) {
      if constexpr (kType == TensorType::Q4_K) {
        s_lo = dp4a(qw[i] & 0x0F0F0F0Fu, alo[i], s_lo);
        s_hi = dp4a_us(qw[i] & 0xF0F0F0F0u, ahi[i], s_hi);  // 16 x the high nibbles
      } else {
        const uint32_t lo = (qw[i] & 0x0F0F0F0Fu) | (((qh[i] >> (2 * q)) & 0x01010101u) << 4);
        const uint32_t hi = ((qw[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> (2 * q + 1)) & 0x01010101u) << 4);
        s_lo = dp4a(lo, alo[i], s_lo);
        s_hi = dp4a(hi, ahi[i], s_hi);
      }
    }
    if constexpr (kType == TensorType::Q4_K) s_hi >>= 4;  // an exact multiple of 16
    const uint32_t scw = sc[q >> 1] >> (16 * (q & 1));
    isum += static_cast<int>(scw & 0xFFu) * s_lo + static_cast<int>((scw >> 8) & 0xFFu) * s_hi;
  }
  // msum = sum_j m_j * (bsums[2j] + bsums[2j + 1]): word j of the bsums holds that pair.
  const uint4 b0 = lane_ld16(a + kLaneActBsums), b1 = lane_ld16(a + kLaneActBsums + 16);
  const uint32_t bw[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
  int msum = 0;
MM_UNROLL
  for (int j = 0; j < 8; ++j) {
    const uint32_t m = (mn[j >> 2] >> (8 * (j & 3))) & 0xFFu;
    msum = dp2a<0>(bw[j], m * 0x0101u, msum);
  }
  const float da = u2f(lane_ld4(a + kLaneActD));
  return kquarter_term(hd.x, da, isum, msum);
}

/// The term of the Q6_K super-block at w (2-byte aligned: 210-byte blocks) times the activation
/// block at a (16-byte aligned, the kLaneActStride layout). Reads the aligned words around the
/// block, up to 2 bytes past its end (the stage keeps slack there).
MM_HD float q6k_lane_term(const uint8_t* w, const uint8_t* a) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(w);
  const uint8_t* wa = reinterpret_cast<const uint8_t*>(addr & ~uintptr_t{3});
  const int sh = (addr & 2u) ? 16 : 0;
  // Word i of the block (bytes 4i .. 4i + 3): ql i = 0..31, qh 32..47, scales 48..51.
  auto word = [&](int i) { return funnel_r(lane_ld4(wa + 4 * i), lane_ld4(wa + 4 * i + 4), sh); };
  int s[16];  // per 16-element group g: sum of q * a, q in [0, 63] (the -32 is applied below)
MM_UNROLL
  for (int hh = 0; hh < 2; ++hh)
MM_UNROLL
    for (int half = 0; half < 2; ++half) {
      uint4 av[4];  // quadrant Q's activations 16 half .. 16 half + 15
MM_UNROLL
      for (int Q = 0; Q < 4; ++Q) av[Q] = lane_ld16(a + 128 * hh + 32 * Q + 16 * half);
      int acc[4] = {0, 0, 0, 0};
MM_UNROLL
      for (int ii = 0; ii < 4; ++ii) {
        const int i = 4 * half + ii;  // elements 4i .. 4i + 3 of each quadrant of half hh
        const uint32_t A = word(16 * hh + i), B = word(16 * hh + 8 + i), H = word(32 + 8 * hh + i);
        const uint32_t v0 = (A & 0x0F0F0F0Fu) | ((H << 4) & 0x30303030u);
        const uint32_t v1 = (B & 0x0F0F0F0Fu) | ((H << 2) & 0x30303030u);
        const uint32_t v2 = ((A >> 4) & 0x0F0F0F0Fu) | (H & 0x30303030u);
        const uint32_t v3 = ((B >> 4) & 0x0F0F0F0Fu) | ((H >> 2) & 0x30303030u);
        const uint32_t a0[4] = {av[0].x, av[0].y, av[0].z, av[0].w};
        const uint32_t a1[4] = {av[1].x, av[1].y, av[1].z, av[1].w};
        const uint32_t a2[4] = {av[2].x, av[2].y, av[2].z, av[2].w};
        const uint32_t a3[4] = {av[3].x, av[3].y, av[3].z, av[3].w};
        acc[0] = dp4a(v0, a0[ii], acc[0]);
        acc[1] = dp4a(v1, a1[ii], acc[1]);
        acc[2] = dp4a(v2, a2[ii], acc[2]);
        acc[3] = dp4a(v3, a3[ii], acc[3]);
      }
MM_UNROLL
      for (int Q = 0; Q < 4; ++Q) s[8 * hh + 2 * Q + half] = acc[Q];
    }
  // isum = sum_g sc_g * (s_g - 32 * bsums_g) = sum_g sc_g * s_g - 32 * sum_g sc_g * bsums_g.
  int ssum = 0, bsum = 0;
MM_UNROLL
  for (int m = 0; m < 4; ++m) {
    const uint32_t scw = word(48 + m);  // scales 4m .. 4m + 3 (int8)
MM_UNROLL
    for (int b = 0; b < 4; ++b) ssum += static_cast<int>(static_cast<int8_t>(scw >> (8 * b))) * s[4 * m + b];
    bsum = dp2a<0>(lane_ld4(a + kLaneActBsums + 8 * m), scw, bsum);
    bsum = dp2a<2>(lane_ld4(a + kLaneActBsums + 8 * m + 4), scw, bsum);
  }
  const uint32_t dw = lane_ld4(wa + 208);  // d: block bytes 208, 209
  const uint16_t d = static_cast<uint16_t>(sh ? dw >> 16 : dw & 0xFFFFu);
  const float da = u2f(lane_ld4(a + kLaneActD));
  return q6k_quarter_term(d, da, ssum - 32 * bsum);
}

// ---- the grid's deal of work (host-checked by mmvq_emulate.cu) ------------------------------

/// The row groups warp wg of a lane-kernel grid computes: first, first + step, ... (count of them).
/// split 0: the contiguous run [wg g, min(wg g + g, n_groups)) of g = groups_per_warp groups;
/// split 1: round robin over the grid's first n_warps warps (the launcher's count, which the
/// grid's whole blocks may exceed: warps from n_warps on get nothing), groups wg, wg + n_warps,
/// wg + 2 n_warps, ... below n_groups (the grid's first wave then reads the first n_warps groups:
/// a prefix of the rows). Either way every group belongs to exactly one warp.
struct LaneWarpRun {
  int64_t first;
  int64_t step;
  int64_t count;
};
MM_HD LaneWarpRun lane_warp_run(int split, int64_t wg, int64_t n_warps, int64_t n_groups, int64_t groups_per_warp) {
  if (split == 0) {
    const int64_t first = wg * groups_per_warp;
    const int64_t end = first + groups_per_warp < n_groups ? first + groups_per_warp : n_groups;
    return {first, 1, end > first ? end - first : 0};
  }
  if (wg >= n_warps || wg >= n_groups) return {wg, n_warps, 0};
  // 32-bit division (grids and row groups stay far below 2^32).
  return {wg, n_warps,
          static_cast<int64_t>(static_cast<uint32_t>(n_groups - 1 - wg) / static_cast<uint32_t>(n_warps)) + 1};
}

/// The grid row of slot j (0 .. k_rows - 1) of row group g in a grid of two weight types: groups
/// [0, groups_a) hold the first type's rows_a rows, k_rows a group (the last one may be partial);
/// the second type's rows (rows_total - rows_a of them) start at group groups_a =
/// ceil(rows_a / k_rows), so no group mixes the types. False for a slot past its type's rows;
/// otherwise *row is the row in the concatenation of all segments and *second tells its type.
MM_HD bool lane_mixed_row(int64_t groups_a, int64_t rows_a, int64_t rows_total, int k_rows, int64_t g, int j,
                          int64_t* row, bool* second) {
  *second = g >= groups_a;
  *row = *second ? rows_a + (g - groups_a) * k_rows + j : g * k_rows + j;
  return *row < (*second ? rows_total : rows_a);
}

/// 16-byte words of the L2 prefetch each warp of an n_warps grid takes (host side): the ranges'
/// n lengths (multiples of 16) in words, divided by the warps, rounded up.
inline uint32_t l2_words_per_warp(const uint32_t* bytes, int n, int64_t n_warps) {
  uint64_t words = 0;
  for (int i = 0; i < n; ++i) words += bytes[i] / 16;
  return n_warps > 0 ? static_cast<uint32_t>((words + static_cast<uint64_t>(n_warps) - 1) / static_cast<uint64_t>(n_warps))
                     : 0u;
}

/// The bytes [*lo, *hi) of the concatenation of the ranges of lengths b0, b1, b2 (multiples of 16;
/// 0 for an absent range) that warp wg asks the L2 cache for: words [wg q, (wg + 1) q) of q =
/// words_per_warp (l2_words_per_warp), clamped to the total, so the shares of the grid's warps
/// tile it in 16-byte words (the last ones may be empty). Multiplications only: no 64-bit
/// division in the kernel.
MM_HD void l2_share_bounds(uint32_t b0, uint32_t b1, uint32_t b2, uint32_t words_per_warp, int64_t wg, uint64_t* lo,
                           uint64_t* hi) {
  const uint64_t total = static_cast<uint64_t>(b0) + b1 + b2;
  const uint64_t q = static_cast<uint64_t>(words_per_warp) * 16;
  const uint64_t l = static_cast<uint64_t>(wg) * q, h = l + q;
  *lo = l < total ? l : total;
  *hi = h < total ? h : total;
}

/// The part of a warp's share [lo, hi) (l2_share_bounds) that falls in the range occupying bytes
/// [b0, b0 + len) of the concatenation: *off bytes into the range, *n bytes long (0: none).
MM_HD void l2_range_piece(uint64_t lo, uint64_t hi, uint64_t b0, uint32_t len, uint64_t* off, uint32_t* n) {
  const uint64_t b1 = b0 + len, s = lo > b0 ? lo : b0, e = hi < b1 ? hi : b1;
  *off = s < e ? s - b0 : 0;
  *n = s < e ? static_cast<uint32_t>(e - s) : 0u;
}

/// The term of super-block w (kType's alignment as above) times activation block a.
template <TensorType kType>
MM_HD float lane_term(const uint8_t* w, const uint8_t* a) {
  if constexpr (kType == TensorType::Q6_K)
    return q6k_lane_term(w, a);
  else
    return kquant_lane_term<kType>(w, a);
}

}  // namespace minfer::cuda::mm
