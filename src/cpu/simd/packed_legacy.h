// Row-interleaved ("packed") weights of the legacy block types and their kernel, for the SIMD
// levels: one 32-bit vector lane per weight row (kW = 16 rows per ZMM on avx512, 8 per YMM on
// avx2), the activation's 4-byte groups broadcast to every lane, so VPDPBUSD adds 4 products to
// each of kW rows with no horizontal sum. This is the decode path (one token): about 2 vector
// operations per (row, block) against about 8 for the row-at-a-time kernel.
// Included only from *_avx2.cpp / *_avx512.cpp files (isa.h).
//
// Packed layout, for each group of kW rows (rows past the end are zero) and each block b, the
// group's entry of P::kBytes bytes (the same bytes per row as the GGUF block, reordered):
//   q     4 vectors (Q8_0: 8) of kW x 4 bytes: lane r of vector c holds qs[4c .. 4c + 3] of row r
//         (the packed nibbles: low nibbles are elements 4c.., high nibbles elements 16 + 4c..;
//         Q8_0: the values + 128, elements 4c .. 4c + 3)
//   hmask Q5_0 / Q5_1 only: 8 masks of kW * 4 bits, bit 4r + i of mask g = bit 4 of element
//         4g + i of row r (the qh bits, reordered)
//   d     kW halves; m (Q4_1 / Q5_1) kW halves
// Group entries are back to back in block order; groups follow each other.
#pragma once

#include <type_traits>

#include "cpu/simd/gemm_pack.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {

template <class B>
struct PackedLegacy {
  using Block = B;
  static constexpr bool kQ8 = std::is_same_v<B, block_q8_0>;
  static constexpr bool kFive = std::is_same_v<B, block_q5_0> || std::is_same_v<B, block_q5_1>;
  static constexpr bool kMin = std::is_same_v<B, block_q4_1> || std::is_same_v<B, block_q5_1>;
  /// w = u - kOffset with u the unsigned value the kernel multiplies.
  static constexpr int kOffset = std::is_same_v<B, block_q4_0> ? 8 : std::is_same_v<B, block_q5_0> ? 16 : kQ8 ? 128 : 0;
  static constexpr int kQVecs = kQ8 ? 8 : 4;
  static constexpr size_t kQBytes = static_cast<size_t>(kQVecs) * kW * 4;
  static constexpr size_t kMaskBytes = kFive ? 8 * kW * 4 / 8 : 0;
  static constexpr size_t kDOffset = kQBytes + kMaskBytes;
  static constexpr size_t kMOffset = kDOffset + kW * 2;
  static constexpr size_t kBytes = kDOffset + kW * 2 * (kMin ? 2 : 1);
  static_assert(kBytes == sizeof(B) * kW, "the packed form holds the same bytes");
};

template <class P>
size_t packed_legacy_bytes(int64_t nb, int64_t rows) {
  return static_cast<size_t>((rows + kW - 1) / kW) * static_cast<size_t>(nb) * P::kBytes;
}

/// Packs `rows` rows of nb blocks (w_row_bytes apart) into dst (packed_legacy_bytes bytes).
template <class P>
void pack_legacy(int64_t nb, const uint8_t* w, size_t w_row_bytes, int64_t rows, uint8_t* dst) {
  using Block = typename P::Block;
  const int64_t groups = (rows + kW - 1) / kW;
  for (int64_t G = 0; G < groups; ++G) {
    uint8_t* gd = dst + static_cast<size_t>(G) * static_cast<size_t>(nb) * P::kBytes;
    std::memset(gd, 0, static_cast<size_t>(nb) * P::kBytes);
    for (int r = 0; r < kW; ++r) {
      const int64_t row = G * kW + r;
      if (row >= rows) break;
      const auto* x = reinterpret_cast<const Block*>(w + static_cast<size_t>(row) * w_row_bytes);
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* e = gd + static_cast<size_t>(b) * P::kBytes;
        for (int c = 0; c < P::kQVecs; ++c) {
          uint32_t v = static_cast<uint32_t>(load_i32(x[b].qs + 4 * c));
          if constexpr (P::kQ8) v ^= 0x80808080u;
          std::memcpy(e + (static_cast<size_t>(c) * kW + r) * 4, &v, 4);
        }
        if constexpr (P::kFive) {
          const uint32_t qh = q5_high_bits(x[b].qh);
          for (int g = 0; g < 8; ++g) {
            uint8_t* mask = e + P::kQBytes + static_cast<size_t>(g) * (kW * 4 / 8);
            const uint32_t nib = (qh >> (4 * g)) & 0xFu;  // elements 4g .. 4g + 3
            mask[(4 * r) / 8] = static_cast<uint8_t>(mask[(4 * r) / 8] | nib << ((4 * r) % 8));
          }
        }
        std::memcpy(e + P::kDOffset + static_cast<size_t>(r) * 2, &x[b].d, 2);
        if constexpr (P::kMin) std::memcpy(e + P::kMOffset + static_cast<size_t>(r) * 2, &x[b].m, 2);
      }
    }
  }
}

/// Per-token facts the packed legacy kernel needs, for each block: the activation block, the
/// integer correction -kOffset * asum, da, and float(asum) (Q4_1 / Q5_1).
struct PackedAct {
  const uint8_t* blocks = nullptr;
  size_t block_bytes = 0, qs_offset = 0;
  const int32_t* corr = nullptr;
  const float* da = nullptr;
  const float* asumf = nullptr;
};

/// Bytes of the per-token arrays of make_packed_act for nb blocks.
constexpr size_t packed_act_bytes(int64_t nb) { return static_cast<size_t>(nb) * 12; }

/// The PackedAct of activation row `a` (nb blocks), its arrays in `mem` (packed_act_bytes(nb)).
inline PackedAct make_packed_act(const uint8_t* a, int64_t nb, bool q8_1, int offset, uint8_t* mem) {
  auto* corr = reinterpret_cast<int32_t*>(mem);
  auto* da = reinterpret_cast<float*>(mem + static_cast<size_t>(nb) * 4);
  auto* asumf = reinterpret_cast<float*>(mem + static_cast<size_t>(nb) * 8);
  PackedAct p;
  p.blocks = a;
  p.block_bytes = q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
  p.qs_offset = q8_1 ? 4 : 2;
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = a + static_cast<size_t>(b) * p.block_bytes;
    const int32_t asum =
        hsum_i32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, loadu256(blk + p.qs_offset)), ones16));
    corr[b] = -offset * asum;
    asumf[b] = static_cast<float>(asum);
    da[b] = _cvtsh_ss(load_u16(blk));
  }
  p.corr = corr;
  p.da = da;
  p.asumf = asumf;
  return p;
}

/// Adds 16 to byte j of u where bit j of the mask at p is set (kW * 4 bits).
inline I add_mask_16(I u, const uint8_t* p) {
#if MINFER_SIMD_AVX512
  uint64_t m;
  std::memcpy(&m, p, 8);
  return _mm512_mask_add_epi8(u, static_cast<__mmask64>(m), u, _mm512_set1_epi8(16));
#else
  return add_high_bits(u, static_cast<uint32_t>(load_i32(p)));
#endif
}

/// The packed legacy policy for the group driver (packed_driver.h): the terms of block b of a
/// group for NT tokens, and the rebuilding of one row's standard blocks.
template <class B>
struct PackedLegacyKernel : PackedLegacy<B> {
  using P = PackedLegacy<B>;
  using Act = PackedAct;
  static constexpr bool kQ8_1Act = P::kMin;
  static constexpr int64_t kUnit = kQK;

  static constexpr size_t act_bytes(int64_t nb) { return packed_act_bytes(nb); }
  static Act make_act(const uint8_t* a, int64_t nb, uint8_t* mem) {
    return make_packed_act(a, nb, kQ8_1Act, P::kOffset, mem);
  }

  template <int NT>
  static void terms(const uint8_t* e, int64_t b, const Act* acts, F (&term)[NT]) {
    I u[8];
    if constexpr (P::kQ8) {
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) u[g] = TV::load(e + static_cast<size_t>(g) * kW * 4);
    } else {
      const I m4 = TV::bcast("\x0F\x0F\x0F\x0F");
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const I v = TV::load(e + static_cast<size_t>(c) * kW * 4);
        u[c] = TV::andi(v, m4);
        u[c + 4] = TV::andi(TV::srli16(v, 4), m4);
      }
      if constexpr (P::kFive) {
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) u[g] = add_mask_16(u[g], e + P::kQBytes + static_cast<size_t>(g) * (kW * 4 / 8));
      }
    }
    const F dw = TV::halves(e + P::kDOffset);
    F mw = TV::zero();
    if constexpr (P::kMin) mw = TV::halves(e + P::kMOffset);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const Act& a = acts[t];
      const uint8_t* q = a.blocks + static_cast<size_t>(b) * a.block_bytes + a.qs_offset;
      I acc = TV::bcast(a.corr + b);
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) acc = TV::dot4(acc, u[g], TV::bcast(q + 4 * g));
      const F da = TV::bcastf(a.da + b);
      term[t] = TV::mul(TV::mul(dw, da), TV::cvt(acc));
      if constexpr (P::kMin) term[t] = TV::add(term[t], TV::mul(TV::mul(mw, da), TV::bcastf(a.asumf + b)));
    }
  }

  /// Writes the kW rows of the group (nb blocks each) back in the standard layout, row r at
  /// rows + r * row_bytes.
  static void unpack_group(const uint8_t* grp, int64_t nb, uint8_t* rows, size_t row_bytes) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* e = grp + static_cast<size_t>(b) * P::kBytes;
      alignas(64) uint32_t qh[kW];
      if constexpr (P::kFive) {
        // Row r's qh nibble g is bits 4r .. 4r + 3 of mask g; all rows at once, one per lane.
        I acc = TV::zeroi();
        for (int g = 0; g < 8; ++g) {
          const uint8_t* mask = e + P::kQBytes + static_cast<size_t>(g) * (kW * 4 / 8);
#if MINFER_SIMD_AVX512
          const __m512i lo = _mm512_set1_epi32(load_i32(mask)), hi = _mm512_set1_epi32(load_i32(mask + 4));
          const __m512i v = _mm512_mask_blend_epi32(static_cast<__mmask16>(0xFF00), lo, hi);
          const __m512i sh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
          // Variable shift as a GCC vector operation (VPSRLVD): GCC 12's _mm512_srlv_epi32 trips
          // -Wmaybe-uninitialized.
          const I nib = _mm512_and_si512(
              reinterpret_cast<__m512i>(reinterpret_cast<__v16su>(v) >> reinterpret_cast<__v16su>(sh)),
              _mm512_set1_epi32(0xF));
#else
          const __m256i v = _mm256_set1_epi32(load_i32(mask));
          const I nib = _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                         _mm256_set1_epi32(0xF));
#endif
          acc = TV::ori(acc, TV::slli32(nib, 4 * g));
        }
        TV::store(reinterpret_cast<float*>(qh), reinterpret_cast<F&>(acc));
      }
      for (int r = 0; r < kW; ++r) {
        auto* x = reinterpret_cast<B*>(rows + static_cast<size_t>(r) * row_bytes) + b;
        for (int c = 0; c < P::kQVecs; ++c) {
          uint32_t v = static_cast<uint32_t>(load_i32(e + (static_cast<size_t>(c) * kW + r) * 4));
          if constexpr (P::kQ8) v ^= 0x80808080u;
          std::memcpy(x->qs + 4 * c, &v, 4);
        }
        if constexpr (P::kFive) std::memcpy(x->qh, &qh[r], 4);
        std::memcpy(&x->d, e + P::kDOffset + static_cast<size_t>(r) * 2, 2);
        if constexpr (P::kMin) std::memcpy(&x->m, e + P::kMOffset + static_cast<size_t>(r) * 2, 2);
      }
    }
  }

  static void pack(int64_t nb, const uint8_t* w, size_t w_row_bytes, int64_t rows, uint8_t* dst) {
    pack_legacy<P>(nb, w, w_row_bytes, rows, dst);
  }
};

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
