// Row-interleaved ("packed") weights of the K-quants (Q4_K, Q5_K, Q6_K) and their kernels, for
// the SIMD levels: one 32-bit vector lane per weight row (see packed_legacy.h). Included only
// from *_avx2.cpp / *_avx512.cpp files (isa.h).
//
// Packed layout, for each group of kW rows (rows past the end are zero) and each super-block, an
// entry holding the same bytes per row as the GGUF block (ggml-common.h block_q4_K / q5_K /
// q6_K), reordered: every 4-byte word v of a byte array of the block becomes lane r of vector v
// (kW x 4 bytes), and each half field becomes kW halves. Order within the entry:
//   Q4_K: qs (32 vectors), scales (3), d (kW halves), dmin (kW halves)          = 144 kW bytes
//   Q5_K: qs (32), qh (8), scales (3), d, dmin                                  = 176 kW bytes
//   Q6_K: ql (32), qh (16), scales (4), d                                       = 210 kW bytes
// The kernels compute the contract's integer sums per row lane (quant_ref.h): Q4_K/Q5_K
// isum = sum_j sc_j * (sum q * a) with q unsigned, msum = sum_j m_j * (bsums[2j] + bsums[2j+1]);
// Q6_K isum = sum_g sc_g * (sum q * a - 32 * bsums[g]), so they read the Q8_K bsums (which
// quantize_act makes consistent with qs).
#pragma once

#include "cpu/simd/gemm_pack.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {

/// A byte range of a block moved as 4-byte words, or a half field.
struct PackedField {
  size_t offset;  ///< in the block
  size_t bytes;   ///< multiple of 4 (words) or 2 (one half)
  bool half;
};

/// Generic dword-transposing pack / unpack for a block type whose packed entry is `fields` in
/// order (words: bytes / 4 vectors of kW x 4 bytes; halves: kW x 2 bytes).
template <class Block, size_t N>
struct DwordPacking {
  static constexpr size_t entry_bytes(const PackedField (&f)[N]) {
    size_t s = 0;
    for (const auto& x : f) s += x.half ? 2 * kW : x.bytes * kW;
    return s;
  }
  static void pack(const PackedField (&f)[N], int64_t nb, const uint8_t* w, size_t w_row_bytes, int64_t rows,
                   uint8_t* dst) {
    const size_t eb = entry_bytes(f);
    const int64_t groups = (rows + kW - 1) / kW;
    for (int64_t G = 0; G < groups; ++G) {
      uint8_t* gd = dst + static_cast<size_t>(G) * static_cast<size_t>(nb) * eb;
      std::memset(gd, 0, static_cast<size_t>(nb) * eb);
      for (int r = 0; r < kW && G * kW + r < rows; ++r) {
        const uint8_t* row = w + static_cast<size_t>(G * kW + r) * w_row_bytes;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* blk = row + static_cast<size_t>(b) * sizeof(Block);
          uint8_t* e = gd + static_cast<size_t>(b) * eb;
          for (const auto& x : f) {
            if (x.half) {
              std::memcpy(e + 2 * static_cast<size_t>(r), blk + x.offset, 2);
              e += 2 * kW;
              continue;
            }
            for (size_t v = 0; v < x.bytes / 4; ++v) std::memcpy(e + (v * kW + static_cast<size_t>(r)) * 4, blk + x.offset + 4 * v, 4);
            e += x.bytes * kW;
          }
        }
      }
    }
  }
  static void unpack_group(const PackedField (&f)[N], const uint8_t* grp, int64_t nb, uint8_t* rows,
                           size_t row_bytes) {
    const size_t eb = entry_bytes(f);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* e = grp + static_cast<size_t>(b) * eb;
      for (const auto& x : f) {
        for (int r = 0; r < kW; ++r) {
          uint8_t* blk = rows + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(b) * sizeof(Block);
          if (x.half) {
            std::memcpy(blk + x.offset, e + 2 * static_cast<size_t>(r), 2);
            continue;
          }
          for (size_t v = 0; v < x.bytes / 4; ++v)
            std::memcpy(blk + x.offset + 4 * v, e + (v * kW + static_cast<size_t>(r)) * 4, 4);
        }
        e += x.half ? 2 * kW : x.bytes * kW;
      }
    }
  }
};

/// Per-token facts of a Q8_K activation row for the packed K kernels: the blocks, and per
/// super-block the sub-block sums as int16 pairs (bsums[4p] + bsums[4p+1], bsums[4p+2] +
/// bsums[4p+3]) for p < 4, and -32 * bsums[g] for g < 16.
struct PackedKAct {
  const block_q8_K* blocks = nullptr;
  const int32_t* bpair = nullptr;   ///< [nb][4]
  const int32_t* q6corr = nullptr;  ///< [nb][16]
};
/// Bytes of the per-token arrays of make_packed_k_act for nb super-blocks.
constexpr size_t packed_k_act_bytes(int64_t nb) { return static_cast<size_t>(nb) * (4 + 16) * 4; }

/// The PackedKAct of activation row `a` (nb super-blocks), its arrays in `mem`.
inline PackedKAct make_packed_k_act(const uint8_t* a, int64_t nb, uint8_t* mem) {
  auto* bpair = reinterpret_cast<int32_t*>(mem);
  auto* q6corr = reinterpret_cast<int32_t*>(mem + static_cast<size_t>(nb) * 16);
  PackedKAct p;
  p.blocks = reinterpret_cast<const block_q8_K*>(a);
  for (int64_t b = 0; b < nb; ++b) {
    const int16_t* bs = p.blocks[b].bsums;
    for (int q = 0; q < 4; ++q) {
      const auto s0 = static_cast<uint16_t>(bs[4 * q] + bs[4 * q + 1]);
      const auto s1 = static_cast<uint16_t>(bs[4 * q + 2] + bs[4 * q + 3]);
      bpair[b * 4 + q] = static_cast<int32_t>(static_cast<uint32_t>(s0) | static_cast<uint32_t>(s1) << 16);
    }
    for (int g = 0; g < 16; ++g) q6corr[b * 16 + g] = -32 * bs[g];
  }
  p.bpair = bpair;
  p.q6corr = q6corr;
  return p;
}

/// Q4_K (kQ5 = false) and Q5_K.
template <bool kQ5>
struct PackedK45Kernel {
  using Block = std::conditional_t<kQ5, block_q5_K, block_q4_K>;
  using Act = PackedKAct;
  static constexpr int64_t kUnit = kQKK;
  static constexpr size_t kQh = 128 * kW;                 // qh (Q5_K)
  static constexpr size_t kS = kQ5 ? 160 * kW : 128 * kW;  // scales
  static constexpr size_t kD = kS + 12 * kW;
  static constexpr size_t kBytes = kD + 4 * kW;
  static_assert(kBytes == sizeof(Block) * kW);
  static constexpr PackedField kFields4[4] = {{16, 128, false}, {4, 12, false}, {0, 2, true}, {2, 2, true}};
  static constexpr PackedField kFields5[5] = {{48, 128, false}, {16, 32, false}, {4, 12, false}, {0, 2, true}, {2, 2, true}};

  static constexpr size_t act_bytes(int64_t nb) { return packed_k_act_bytes(nb); }
  static Act make_act(const uint8_t* a, int64_t nb, uint8_t* mem) { return make_packed_k_act(a, nb, mem); }

  template <int NT>
  static void terms(const uint8_t* e, int64_t b, const Act* acts, F (&term)[NT]) {
    const I k3f = TV::bcast("\x3F\x3F\x3F\x3F"), k0f = TV::bcast("\x0F\x0F\x0F\x0F"),
            k03 = TV::bcast("\x03\x03\x03\x03"), kff = TV::bcast("\xFF\x00\x00\x00"),
            k01 = TV::bcast("\x01\x01\x01\x01");
    // blocks.h k4_scale_min on the three words of every row lane.
    const I u0 = TV::load(e + kS), u1 = TV::load(e + kS + 4 * kW), u2 = TV::load(e + kS + 8 * kW);
    const I sc_lo = TV::andi(u0, k3f), m_lo = TV::andi(u1, k3f);
    const I sc_hi = TV::ori(TV::andi(u2, k0f), TV::slli32(TV::andi(TV::srli32(u0, 6), k03), 4));
    const I m_hi = TV::ori(TV::andi(TV::srli32(u2, 4), k0f), TV::slli32(TV::andi(TV::srli32(u1, 6), k03), 4));
    // (m[2p], m[2p+1]) as int16 pairs.
    I mp[4];
    for (int p = 0; p < 4; ++p) {
      const I m = p < 2 ? m_lo : m_hi;
      const int s = 16 * (p % 2);
      mp[p] = TV::ori(TV::andi(TV::srli32(m, s), kff), TV::slli32(TV::andi(TV::srli32(m, s + 8), kff), 16));
    }
    I isum[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) isum[t] = TV::zeroi();
    for (int j = 0; j < 8; ++j) {
      const I sc = TV::andi(TV::srli32(j < 4 ? sc_lo : sc_hi, 8 * (j % 4)), kff);
      I u[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const I v = TV::load(e + static_cast<size_t>(8 * (j / 2) + c) * kW * 4);
        u[c] = (j % 2) ? TV::andi(TV::srli16(v, 4), k0f) : TV::andi(v, k0f);
        if constexpr (kQ5) {
          const I h = TV::load(e + kQh + static_cast<size_t>(c) * kW * 4);
          u[c] = TV::ori(u[c], TV::slli32(TV::andi(TV::srli32(h, j), k01), 4));
        }
      }
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const int8_t* q = acts[t].blocks[b].qs + 32 * j;
        I sub = TV::zeroi();
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) sub = TV::dot4(sub, u[c], TV::bcast(q + 4 * c));
        isum[t] = TV::addi(isum[t], TV::mullo(sub, sc));
      }
    }
    const F d = TV::halves(e + kD), dmin = TV::halves(e + kD + 2 * kW);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      I ms = TV::zeroi();
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) ms = TV::dot2(ms, mp[p], TV::bcast(acts[t].bpair + 4 * b + p));
      const F da = TV::bcastf(&acts[t].blocks[b].d);
      term[t] = TV::sub(TV::mul(TV::mul(d, da), TV::cvt(isum[t])), TV::mul(TV::mul(dmin, da), TV::cvt(ms)));
    }
  }

  static void pack(int64_t nb, const uint8_t* w, size_t w_row_bytes, int64_t rows, uint8_t* dst) {
    if constexpr (kQ5) DwordPacking<Block, 5>::pack(kFields5, nb, w, w_row_bytes, rows, dst);
    else DwordPacking<Block, 4>::pack(kFields4, nb, w, w_row_bytes, rows, dst);
  }
  static void unpack_group(const uint8_t* grp, int64_t nb, uint8_t* rows, size_t row_bytes) {
    if constexpr (kQ5) DwordPacking<Block, 5>::unpack_group(kFields5, grp, nb, rows, row_bytes);
    else DwordPacking<Block, 4>::unpack_group(kFields4, grp, nb, rows, row_bytes);
  }
};

struct PackedK6Kernel {
  using Block = block_q6_K;
  using Act = PackedKAct;
  static constexpr int64_t kUnit = kQKK;
  static constexpr size_t kQh = 128 * kW;
  static constexpr size_t kS = 192 * kW;
  static constexpr size_t kD = 208 * kW;
  static constexpr size_t kBytes = 210 * kW;
  static_assert(kBytes == sizeof(Block) * kW);
  static constexpr PackedField kFields[4] = {{0, 128, false}, {128, 64, false}, {192, 16, false}, {208, 2, true}};

  static constexpr size_t act_bytes(int64_t nb) { return packed_k_act_bytes(nb); }
  static Act make_act(const uint8_t* a, int64_t nb, uint8_t* mem) { return make_packed_k_act(a, nb, mem); }

  template <int NT>
  static void terms(const uint8_t* e, int64_t b, const Act* acts, F (&term)[NT]) {
    const I m4 = TV::bcast("\x0F\x0F\x0F\x0F"), m30 = TV::bcast("\x30\x30\x30\x30");
    I isum[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) isum[t] = TV::zeroi();
    for (int h = 0; h < 2; ++h)
      for (int half = 0; half < 2; ++half) {
        // Sub-blocks g = 8h + 2r + half (r < 4): elements 128h + 32r + 4c + i, c in [4 half, 4 half + 4).
        I sub[NT][4];
#pragma GCC unroll 4
        for (int t = 0; t < NT; ++t)
#pragma GCC unroll 4
          for (int r = 0; r < 4; ++r) sub[t][r] = TV::bcast(acts[t].q6corr + 16 * b + 8 * h + 2 * r + half);
#pragma GCC unroll 4
        for (int cc = 0; cc < 4; ++cc) {
          const int c = 4 * half + cc;
          const I l0 = TV::load(e + static_cast<size_t>(16 * h + c) * kW * 4);
          const I l1 = TV::load(e + static_cast<size_t>(16 * h + 8 + c) * kW * 4);
          const I hb = TV::load(e + kQh + static_cast<size_t>(8 * h + c) * kW * 4);
          const I q[4] = {TV::ori(TV::andi(l0, m4), TV::andi(TV::slli16(hb, 4), m30)),
                          TV::ori(TV::andi(l1, m4), TV::andi(TV::slli16(hb, 2), m30)),
                          TV::ori(TV::andi(TV::srli16(l0, 4), m4), TV::andi(hb, m30)),
                          TV::ori(TV::andi(TV::srli16(l1, 4), m4), TV::andi(TV::srli16(hb, 2), m30))};
#pragma GCC unroll 4
          for (int t = 0; t < NT; ++t) {
            const int8_t* qa = acts[t].blocks[b].qs + 128 * h + 4 * c;
#pragma GCC unroll 4
            for (int r = 0; r < 4; ++r) sub[t][r] = TV::dot4(sub[t][r], q[r], TV::bcast(qa + 32 * r));
          }
        }
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
          const int g = 8 * h + 2 * r + half;
          const I sv = TV::load(e + kS + static_cast<size_t>(g / 4) * kW * 4);
          const I sc = TV::srai32(TV::slli32(sv, 24 - 8 * (g % 4)), 24);  // signed byte g % 4
#pragma GCC unroll 4
          for (int t = 0; t < NT; ++t) isum[t] = TV::addi(isum[t], TV::mullo(sub[t][r], sc));
        }
      }
    const F d = TV::halves(e + kD);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t)
      term[t] = TV::mul(TV::mul(d, TV::bcastf(&acts[t].blocks[b].d)), TV::cvt(isum[t]));
  }

  static void pack(int64_t nb, const uint8_t* w, size_t w_row_bytes, int64_t rows, uint8_t* dst) {
    DwordPacking<Block, 4>::pack(kFields, nb, w, w_row_bytes, rows, dst);
  }
  static void unpack_group(const uint8_t* grp, int64_t nb, uint8_t* rows, size_t row_bytes) {
    DwordPacking<Block, 4>::unpack_group(kFields, grp, nb, rows, row_bytes);
  }
};

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
