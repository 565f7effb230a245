// Data layouts of the tiled matrix kernel (gemm_driver.h) and the code that builds them.
// Included only from *_avx2.cpp / *_avx512.cpp files (isa.h).
//
// The kernel puts one token per 32-bit vector lane ("TV": 16 tokens in a ZMM register on the
// avx512 level, 8 in a YMM on avx2) and broadcasts 4 weight bytes to every lane, so one
// VPDPBUSD adds 4 products for each of 16 tokens with no horizontal sum: each lane ends with
// the exact integer sum of one (weight row, token, block) and the f32 terms of the contract are
// formed lane-wise. This needs two repacked copies, both private to a gemm_tile call:
//  - activations (ActChunk): for W tokens and each block ("unit": 32 elements for Q8_0/Q8_1,
//    a 256-element super-block for Q8_K), group g of 4 consecutive values of token i at
//    q[g][i][0..3], stored as a + 128 (unsigned); then da[i] (f32) and the extra per-token sums
//    the type needs (Q8_1: asum[i]; Q8_K: the sub-block sums as int16 pairs).
//  - weights (panel): for R rows and each unit, the signed weight values in element order
//    (Q4_0: q - 8, Q5_0: q - 16, Q8_0: w, Q4_1/Q5_1/Q4_K/Q5_K: q, Q6_K: q - 32), the
//    correction -128 * (sum of the weight values of each sub-block) that undoes the +128 of the
//    activations, and the scales.
// So sum_j w_j * a_j = corr + sum_j w_j * (a_j + 128), exactly, in int32.
#pragma once

#include <algorithm>
#include <cstring>

#include "cpu/simd/isa.h"
#include "cpu/simd/vecdot_kquants.h"
#include "cpu/simd/vecdot_legacy.h"
#include "quant/blocks.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {

// ---- token vectors ---------------------------------------------------------------------------
#if MINFER_SIMD_AVX512
struct TV {
  static constexpr int W = 16;
  using I = __m512i;
  using F = __m512;
  static I bcast(const void* p) { return _mm512_set1_epi32(load_i32(p)); }
  static I load(const void* p) { return _mm512_loadu_si512(p); }
  static F loadf(const void* p) { return _mm512_loadu_ps(p); }
  static F bcastf(const float* p) { return _mm512_set1_ps(*p); }
  static I dot4(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static I dot2(I acc, I x, I y) { return _mm512_dpwssd_epi32(acc, x, y); }
  static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I addi(I a, I b) { return _mm512_add_epi32(a, b); }
  static I subi(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I andi(I a, I b) { return _mm512_and_si512(a, b); }
  static I ori(I a, I b) { return _mm512_or_si512(a, b); }
  // Shifts as GCC vector operations (same instructions): GCC 12's _mm512_s{l,r}li_* trip
  // -Wmaybe-uninitialized on their internal _mm512_undefined_epi32().
  static I srli16(I a, int n) { return reinterpret_cast<I>(reinterpret_cast<__v32hu>(a) >> n); }
  static I slli16(I a, int n) { return reinterpret_cast<I>(reinterpret_cast<__v32hu>(a) << n); }
  static I srli32(I a, int n) { return reinterpret_cast<I>(reinterpret_cast<__v16su>(a) >> n); }
  static I slli32(I a, int n) { return reinterpret_cast<I>(reinterpret_cast<__v16su>(a) << n); }
  static I srai32(I a, int n) { return reinterpret_cast<I>(reinterpret_cast<__v16si>(a) >> n); }
  static I zeroi() { return _mm512_setzero_si512(); }
  // VCVTDQ2PS (round to nearest), written as a vector conversion: GCC 12's _mm512_cvtepi32_ps
  // trips -Wmaybe-uninitialized on its internal _mm512_undefined_ps().
  static F cvt(I a) { return reinterpret_cast<F>(__builtin_convertvector(reinterpret_cast<__v16si>(a), __v16sf)); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F zero() { return _mm512_setzero_ps(); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  /// 16 halves at p as f32 (zero-masking form: GCC 12's _mm512_cvtph_ps trips
  /// -Wmaybe-uninitialized on its internal _mm512_undefined_ps()).
  static F halves(const void* p) { return _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xFFFF), loadu256(p)); }
};
#else
struct TV {
  static constexpr int W = 8;
  using I = __m256i;
  using F = __m256;
  static I bcast(const void* p) { return _mm256_set1_epi32(load_i32(p)); }
  static I load(const void* p) { return loadu256(p); }
  static F loadf(const void* p) { return _mm256_loadu_ps(static_cast<const float*>(p)); }
  static F bcastf(const float* p) { return _mm256_set1_ps(*p); }
  // u = a + 128 <= 255 and |s| <= 32 for every type on this path: |pair| <= 16320.
  static I dot4(I acc, I u, I s) { return simd::MINFER_SIMD_NS::dot4(acc, u, s); }
  static I dot2(I acc, I x, I y) { return dot2_i16(acc, x, y); }
  static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static I addi(I a, I b) { return _mm256_add_epi32(a, b); }
  static I subi(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I andi(I a, I b) { return _mm256_and_si256(a, b); }
  static I ori(I a, I b) { return _mm256_or_si256(a, b); }
  static I srli16(I a, int n) { return _mm256_srli_epi16(a, n); }
  static I slli16(I a, int n) { return _mm256_slli_epi16(a, n); }
  static I srli32(I a, int n) { return _mm256_srli_epi32(a, n); }
  static I slli32(I a, int n) { return _mm256_slli_epi32(a, n); }
  static I srai32(I a, int n) { return _mm256_srai_epi32(a, n); }
  static I zeroi() { return _mm256_setzero_si256(); }
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F zero() { return _mm256_setzero_ps(); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  /// 8 halves at p as f32.
  static F halves(const void* p) { return _mm256_cvtph_ps(loadu128(p)); }
};
#endif
inline constexpr int kW = TV::W;
using F = TV::F;
using I = TV::I;

// ---- activation chunks -------------------------------------------------------------------------

/// Layout of one unit of an activation chunk: G groups of 4 values per token, then da[W], then
/// X extra int32 words per token ([x][W]).
template <int G, int X>
struct ActUnit {
  static constexpr int kGroups = G;
  static constexpr size_t kQBytes = static_cast<size_t>(G) * kW * 4;
  static constexpr size_t kDaOffset = kQBytes;
  static constexpr size_t kExtraOffset = kQBytes + kW * 4;
  static constexpr size_t kBytes = kExtraOffset + static_cast<size_t>(X) * kW * 4;
};
using ActQ8_0 = ActUnit<8, 0>;
using ActQ8_1 = ActUnit<8, 1>;   // extra: asum
using ActQ8_K = ActUnit<64, 4>;  // extra: (bsum32[2p], bsum32[2p+1]) as int16 pairs, p < 4

enum class ActKind { kQ8_0, kQ8_1, kQ8_K };

/// Packs tokens t0 .. t0 + count - 1 (count <= W; lanes past count repeat the last token) of
/// the activation rows at `a` (a_row_bytes apart) into one chunk of `nunits` units.
template <ActKind kKind>
void pack_act_chunk(const uint8_t* a, size_t a_row_bytes, int64_t t0, int count, int64_t nunits,
                    uint8_t* out) {
  using U = std::conditional_t<kKind == ActKind::kQ8_K, ActQ8_K,
                               std::conditional_t<kKind == ActKind::kQ8_1, ActQ8_1, ActQ8_0>>;
  constexpr size_t kBlockBytes = kKind == ActKind::kQ8_K   ? sizeof(block_q8_K)
                                 : kKind == ActKind::kQ8_1 ? sizeof(block_q8_1)
                                                           : sizeof(block_q8_0);
  constexpr size_t kQsOffset = kKind == ActKind::kQ8_K ? 4 : kKind == ActKind::kQ8_1 ? 4 : 2;
  for (int i = 0; i < kW; ++i) {
    const uint8_t* row = a + static_cast<size_t>(t0 + std::min(i, count - 1)) * a_row_bytes;
    for (int64_t b = 0; b < nunits; ++b) {
      const uint8_t* blk = row + static_cast<size_t>(b) * kBlockBytes;
      uint8_t* u = out + static_cast<size_t>(b) * U::kBytes;
      for (int g = 0; g < U::kGroups; ++g) {
        const uint32_t v = static_cast<uint32_t>(load_i32(blk + kQsOffset + 4 * g)) ^ 0x80808080u;
        std::memcpy(u + (static_cast<size_t>(g) * kW + i) * 4, &v, 4);
      }
      float da;
      if constexpr (kKind == ActKind::kQ8_K) std::memcpy(&da, blk, 4);
      else da = _cvtsh_ss(load_u16(blk));
      std::memcpy(u + U::kDaOffset + static_cast<size_t>(i) * 4, &da, 4);
      if constexpr (kKind == ActKind::kQ8_1) {
        const __m256i s = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_set1_epi8(1), loadu256(blk + kQsOffset)), _mm256_set1_epi16(1));
        const int32_t asum = hsum_i32(s);
        std::memcpy(u + U::kExtraOffset + static_cast<size_t>(i) * 4, &asum, 4);
      }
      if constexpr (kKind == ActKind::kQ8_K) {
        const auto* bs = reinterpret_cast<const block_q8_K*>(blk)->bsums;
        for (int p = 0; p < 4; ++p) {
          const auto s0 = static_cast<uint16_t>(bs[4 * p] + bs[4 * p + 1]);
          const auto s1 = static_cast<uint16_t>(bs[4 * p + 2] + bs[4 * p + 3]);
          const uint32_t pair = static_cast<uint32_t>(s0) | static_cast<uint32_t>(s1) << 16;
          std::memcpy(u + U::kExtraOffset + (static_cast<size_t>(p) * kW + i) * 4, &pair, 4);
        }
      }
    }
  }
}

// ---- weight panels -----------------------------------------------------------------------------

/// One legacy block of one row: signed values, correction, scale (and min for Q4_1/Q5_1).
struct PanelLegacy {
  int8_t w[kQK];
  int32_t corr;  ///< -128 * sum(w)
  float d;
  float m;
  int32_t pad;
};
static_assert(sizeof(PanelLegacy) == 48);

/// One Q4_K / Q5_K super-block of one row.
struct PanelK45 {
  int8_t w[kQKK];
  int32_t corr[8];   ///< -128 * sum of each 32-element sub-block
  int32_t sc[8];     ///< 6-bit sub-block scales
  int32_t mpair[4];  ///< (m[2p], m[2p+1]) as int16 pairs
  float d;
  float dmin;
  int32_t pad[2];
};
static_assert(sizeof(PanelK45) == 352);

/// One Q6_K super-block of one row.
struct PanelK6 {
  int8_t w[kQKK];
  int32_t corr[16];  ///< -128 * sum of each 16-element sub-block (of q - 32)
  int32_t sc[16];    ///< signed 8-bit sub-block scales
  float d;
  int32_t pad[3];
};
static_assert(sizeof(PanelK6) == 400);

/// Sum of the 32 unsigned bytes of v.
inline int32_t sum_u8(__m256i v) { return hsum_i32(_mm256_sad_epu8(v, _mm256_setzero_si256())); }

/// Unpacks one weight row (nunits blocks) into panel entries dst[b * stride], b < nunits.
template <class Block>
void unpack_legacy_row(const uint8_t* row, int64_t nunits, PanelLegacy* dst, int stride) {
  const auto* x = reinterpret_cast<const Block*>(row);
  for (int64_t b = 0; b < nunits; ++b) {
    PanelLegacy& p = dst[b * stride];
    __m256i u;  // unsigned values (Q8_0: w + 128)
    int offset; // w = u - offset
    if constexpr (std::is_same_v<Block, block_q8_0>) {
      u = _mm256_xor_si256(loadu256(x[b].qs), _mm256_set1_epi8(-128));
      offset = 128;
    } else if constexpr (std::is_same_v<Block, block_q4_0> || std::is_same_v<Block, block_q4_1>) {
      u = nibbles_32(x[b].qs);
      offset = std::is_same_v<Block, block_q4_0> ? 8 : 0;
    } else {
      u = add_q5_high(nibbles_32(x[b].qs), x[b].qh);
      offset = std::is_same_v<Block, block_q5_0> ? 16 : 0;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.w), _mm256_sub_epi8(u, _mm256_set1_epi8(static_cast<char>(offset))));
    p.corr = -128 * (sum_u8(u) - offset * kQK);
    p.d = _cvtsh_ss(x[b].d);
    if constexpr (std::is_same_v<Block, block_q4_1> || std::is_same_v<Block, block_q5_1>) p.m = _cvtsh_ss(x[b].m);
    else p.m = 0.0f;
    p.pad = 0;
  }
}

template <bool kQ5>
void unpack_k45_row(const uint8_t* row, int64_t nunits, PanelK45* dst, int stride) {
  using Block = std::conditional_t<kQ5, block_q5_K, block_q4_K>;
  const auto* x = reinterpret_cast<const Block*>(row);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < nunits; ++b) {
    PanelK45& p = dst[b * stride];
    alignas(16) uint8_t scm[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(scm), k4_scales_mins(x[b].scales));
    __m256i hbits = _mm256_setzero_si256();
    if constexpr (kQ5) hbits = loadu256(x[b].qh);
    for (int q = 0; q < 4; ++q) {
      const __m256i v = loadu256(x[b].qs + 32 * q);
      __m256i lo = _mm256_and_si256(v, m4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (kQ5) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), one), 4));
        hbits = _mm256_srli_epi16(hbits, 2);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.w + 64 * q), lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.w + 64 * q + 32), hi);
      p.corr[2 * q] = -128 * sum_u8(lo);
      p.corr[2 * q + 1] = -128 * sum_u8(hi);
    }
    for (int j = 0; j < 8; ++j) p.sc[j] = scm[j];
    for (int q = 0; q < 4; ++q)
      p.mpair[q] = static_cast<int32_t>(static_cast<uint32_t>(scm[8 + 2 * q]) |
                                        static_cast<uint32_t>(scm[8 + 2 * q + 1]) << 16);
    p.d = _cvtsh_ss(x[b].d);
    p.dmin = _cvtsh_ss(x[b].dmin);
    p.pad[0] = p.pad[1] = 0;
  }
}

inline void unpack_k6_row(const uint8_t* row, int64_t nunits, PanelK6* dst, int stride) {
  const auto* x = reinterpret_cast<const block_q6_K*>(row);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  for (int64_t b = 0; b < nunits; ++b) {
    PanelK6& p = dst[b * stride];
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = loadu256(x[b].ql + 64 * h);
      const __m256i l1 = loadu256(x[b].ql + 64 * h + 32);
      const __m256i hb = loadu256(x[b].qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                          _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30))};
      for (int r = 0; r < 4; ++r) {
        const int e0 = 128 * h + 32 * r;  // elements e0 .. e0 + 31: sub-blocks e0/16, e0/16 + 1
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.w + e0), _mm256_sub_epi8(q[r], _mm256_set1_epi8(32)));
        const __m256i s = _mm256_sad_epu8(q[r], _mm256_setzero_si256());  // 4 sums of 8 bytes
        alignas(32) int64_t s4[4];
        _mm256_store_si256(reinterpret_cast<__m256i*>(s4), s);
        p.corr[e0 / 16] = -128 * (static_cast<int32_t>(s4[0] + s4[1]) - 32 * 16);
        p.corr[e0 / 16 + 1] = -128 * (static_cast<int32_t>(s4[2] + s4[3]) - 32 * 16);
      }
    }
    for (int g = 0; g < 16; ++g) p.sc[g] = x[b].scales[g];
    p.d = _cvtsh_ss(x[b].d);
    p.pad[0] = p.pad[1] = p.pad[2] = 0;
  }
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
