// Per-type pieces of the quantized MMVQ kernels: how a weight block staged in shared memory is
// unpacked into dp4a operands, and how its f32 term is formed from the exact integer sums.
// Block layouts: src/quant/blocks.h (ggml-common.h). Term formulas and their operation order:
// the accumulation contract in src/quant/quant_ref.h, step 1, each f32 operation one _rn
// intrinsic (never contracted into an FMA).
//
// Everything here is __host__ __device__ (MM_HD): mmvq_emulate.cu runs it on the host.
//
// Legacy types (32-element blocks) are handled one block per lane: decode() unpacks the whole
// block, term() forms the block's term for one token column.
// K-quants (256-element super-blocks) are handled by 8 lanes per super-block: lane `part`
// (0..7) unpacks 32 of its elements, partial() gives that part's share of the integer sums
// (exact, so the 8 shares add up to the contract's isum / msum in any order), and term() forms
// the super-block's term from the totals.
#pragma once

#include <cstdint>

#include "core/types.h"
#include "cuda/kernels/mmvq_common.cuh"
#include "cuda/kernels/quantize_acts.cuh"

namespace minfer::cuda::mm {

/// A read-only load through the non-coherent cache on the device; a plain load on the host.
template <typename T>
MM_HD T ldg(const T* p) {
#ifdef __CUDA_ARCH__
  return __ldg(p);
#else
  return *p;
#endif
}

// ---- legacy types x Q8 activations ------------------------------------------------------------

/// A decoded legacy block: q[i] holds elements 4i .. 4i+3 as bytes (nibble values 0..15 for
/// Q4_x, 0..31 for Q5_x, signed int8 for Q8_0), d and m its half scale / min as floats.
struct LegacyW {
  uint32_t q[8];
  float d;
  float m;
};

/// Unpacks 16 bytes of nibbles (element j low nibble of qs[j], element j+16 high nibble,
/// ggml-common.h block_q4_0) into element order; qh (when given) adds bit 4 of element j from
/// bit j (block_q5_0).
MM_HD void unpack_nibbles(const uint4& qs, uint32_t qh, bool has_qh,
                                               LegacyW* w) {
  const uint32_t in[4] = {qs.x, qs.y, qs.z, qs.w};
MM_UNROLL
  for (int i = 0; i < 4; ++i) {
    w->q[i] = in[i] & 0x0F0F0F0Fu;
    w->q[4 + i] = (in[i] >> 4) & 0x0F0F0F0Fu;
    if (has_qh) {
      w->q[i] |= spread4_to_bit4(qh >> (4 * i));
      w->q[4 + i] |= spread4_to_bit4(qh >> (16 + 4 * i));
    }
  }
}

template <TensorType kType>
struct Legacy;

// kOffset: the zero point subtracted from q (Q4_0: 8, Q5_0: 16), applied exactly as
// isum = sum(q * a) - kOffset * sum(a). kHasMin: term adds (m * da) * float(sum(a)).
// CB: blocks staged per chunk (a multiple of 32: lane l always handles blocks t = l mod 32);
// U: 16-byte words per lane per chunk, enough for CB blocks at any 2-byte alignment.
template <>
struct Legacy<TensorType::Q4_0> {
  static constexpr int kBytes = 18, kOffset = 8, CB = 96, U = 4;
  static constexpr bool kHasMin = false;
  MM_HD static LegacyW decode(const uint8_t* sb, int off) {
    LegacyW w;
    w.d = half_to_float(sm_u16(sb, off));
    w.m = 0.0f;
    unpack_nibbles(sm_u32x4(sb, off + 2), 0u, false, &w);
    return w;
  }
};
template <>
struct Legacy<TensorType::Q4_1> {
  static constexpr int kBytes = 20, kOffset = 0, CB = 96, U = 4;
  static constexpr bool kHasMin = true;
  MM_HD static LegacyW decode(const uint8_t* sb, int off) {
    LegacyW w;
    w.d = half_to_float(sm_u16(sb, off));
    w.m = half_to_float(sm_u16(sb, off + 2));
    unpack_nibbles(sm_u32x4(sb, off + 4), 0u, false, &w);
    return w;
  }
};
template <>
struct Legacy<TensorType::Q5_0> {
  static constexpr int kBytes = 22, kOffset = 16, CB = 96, U = 5;
  static constexpr bool kHasMin = false;
  MM_HD static LegacyW decode(const uint8_t* sb, int off) {
    LegacyW w;
    w.d = half_to_float(sm_u16(sb, off));
    w.m = 0.0f;
    unpack_nibbles(sm_u32x4(sb, off + 6), sm_u32(sb, off + 2), true, &w);
    return w;
  }
};
template <>
struct Legacy<TensorType::Q5_1> {
  static constexpr int kBytes = 24, kOffset = 0, CB = 96, U = 5;
  static constexpr bool kHasMin = true;
  MM_HD static LegacyW decode(const uint8_t* sb, int off) {
    LegacyW w;
    w.d = half_to_float(sm_u16(sb, off));
    w.m = half_to_float(sm_u16(sb, off + 2));
    unpack_nibbles(sm_u32x4(sb, off + 8), sm_u32(sb, off + 4), true, &w);
    return w;
  }
};
template <>
struct Legacy<TensorType::Q8_0> {
  static constexpr int kBytes = 34, kOffset = 0, CB = 64, U = 5;
  static constexpr bool kHasMin = false;
  MM_HD static LegacyW decode(const uint8_t* sb, int off) {
    LegacyW w;
    w.d = half_to_float(sm_u16(sb, off));
    w.m = 0.0f;
    const uint4 a = sm_u32x4(sb, off + 2), b = sm_u32x4(sb, off + 18);
    w.q[0] = a.x; w.q[1] = a.y; w.q[2] = a.z; w.q[3] = a.w;
    w.q[4] = b.x; w.q[5] = b.y; w.q[6] = b.z; w.q[7] = b.w;
    return w;
  }
};

/// The term of legacy block t for token column `col` (quant_ref.h step 1):
/// Q4_0/Q5_0/Q8_0: (dw * da) * float(isum); Q4_1/Q5_1: (dw * da) * float(isum) +
/// (mw * da) * float(asum).
template <TensorType kType>
MM_HD float legacy_term(const LegacyW& w, const Q8View& a, int col,
                                             int64_t t) {
  using T = Legacy<kType>;
  const int8_t* aq = a.qs + col * a.k + t * 32;
  const int4 a0 = ldg(reinterpret_cast<const int4*>(aq));
  const int4 a1 = ldg(reinterpret_cast<const int4*>(aq + 16));
  const float2 ds = ldg(a.ds + col * a.nb + t);
  const float da = ds.x;
  const int asum = static_cast<int>(f2u(ds.y));
  int s = 0;
  s = dp4a(w.q[0], a0.x, s);
  s = dp4a(w.q[1], a0.y, s);
  s = dp4a(w.q[2], a0.z, s);
  s = dp4a(w.q[3], a0.w, s);
  s = dp4a(w.q[4], a1.x, s);
  s = dp4a(w.q[5], a1.y, s);
  s = dp4a(w.q[6], a1.z, s);
  s = dp4a(w.q[7], a1.w, s);
  if constexpr (T::kOffset != 0) s -= T::kOffset * asum;
  const float main = fmul(fmul(w.d, da), i2f(s));
  if constexpr (T::kHasMin)
    return fadd(main, fmul(fmul(w.m, da), i2f(asum)));
  return main;
}

// ---- K-quants x Q8K activations ---------------------------------------------------------------

/// Part `part` (0..7) of a super-block, decoded. Q4_K/Q5_K: part covers qs bytes
/// [16 part, 16 part + 16): sub-blocks j0 = 2p and j0 + 1 (p = part / 2), elements
/// 16h .. 16h+15 of each (h = part % 2); lo[i] / hi[i] hold 4 of those elements of j0 / j0 + 1.
/// Q6_K: part covers half hh = part / 4 and elements l in [8 q4, 8 q4 + 8) (q4 = part % 4) of
/// each of the 4 rows r (element 128 hh + 32 r + l); v[2r + w] holds 4 of row r's elements.
struct KPartW {
  uint32_t v[8];
  int sc[4];
  int mn[2];
  float d;
  float dmin;
};

/// The 6-bit scale and min of sub-block j from the packed scales s[0..11] as three words
/// (ggml-quants.c get_scale_min_k4; blocks.h k4_scale_min).
MM_HD void k4_scale_min_words(int j, uint32_t s0, uint32_t s1, uint32_t s2,
                                                   int* sc, int* m) {
  if (j < 4) {
    *sc = (s0 >> (8 * j)) & 63;
    *m = (s1 >> (8 * j)) & 63;
  } else {
    const int jj = 8 * (j - 4);
    *sc = ((s2 >> jj) & 0xF) | (((s0 >> (jj + 6)) & 3) << 4);
    *m = ((s2 >> (jj + 4)) & 0xF) | (((s1 >> (jj + 6)) & 3) << 4);
  }
}

template <TensorType kType>
struct KQuant;

// CB: super-blocks staged per chunk (a multiple of 4, the super-blocks a warp handles at once);
// U as for Legacy.
template <>
struct KQuant<TensorType::Q4_K> {
  static constexpr int kBytes = 144, CB = 16, U = 5;
  static constexpr bool kHasMin = true;
  MM_HD static KPartW decode(const uint8_t* sb, int off, int part) {
    KPartW w;
    const uint4 hd = sm_u32x4(sb, off);  // d, dmin, scales[0..11]
    const uint4 qs = sm_u32x4(sb, off + 16 + 16 * part);
    const int p = part >> 1;
    w.d = half_to_float(static_cast<uint16_t>(hd.x & 0xFFFFu));
    w.dmin = half_to_float(static_cast<uint16_t>(hd.x >> 16));
    k4_scale_min_words(2 * p, hd.y, hd.z, hd.w, &w.sc[0], &w.mn[0]);
    k4_scale_min_words(2 * p + 1, hd.y, hd.z, hd.w, &w.sc[1], &w.mn[1]);
    const uint32_t in[4] = {qs.x, qs.y, qs.z, qs.w};
MM_UNROLL
    for (int i = 0; i < 4; ++i) {
      w.v[i] = in[i] & 0x0F0F0F0Fu;
      w.v[4 + i] = (in[i] >> 4) & 0x0F0F0F0Fu;
    }
    return w;
  }
};
template <>
struct KQuant<TensorType::Q5_K> {
  static constexpr int kBytes = 176, CB = 12, U = 5;
  static constexpr bool kHasMin = true;
  MM_HD static KPartW decode(const uint8_t* sb, int off, int part) {
    KPartW w;
    const uint4 hd = sm_u32x4(sb, off);
    const int p = part >> 1, h = part & 1;
    const uint4 qh = sm_u32x4(sb, off + 16 + 16 * h);
    const uint4 qs = sm_u32x4(sb, off + 48 + 16 * part);
    w.d = half_to_float(static_cast<uint16_t>(hd.x & 0xFFFFu));
    w.dmin = half_to_float(static_cast<uint16_t>(hd.x >> 16));
    k4_scale_min_words(2 * p, hd.y, hd.z, hd.w, &w.sc[0], &w.mn[0]);
    k4_scale_min_words(2 * p + 1, hd.y, hd.z, hd.w, &w.sc[1], &w.mn[1]);
    const uint32_t in[4] = {qs.x, qs.y, qs.z, qs.w};
    const uint32_t hb[4] = {qh.x, qh.y, qh.z, qh.w};
MM_UNROLL
    for (int i = 0; i < 4; ++i) {
      w.v[i] = (in[i] & 0x0F0F0F0Fu) | (((hb[i] >> (2 * p)) & 0x01010101u) << 4);
      w.v[4 + i] = ((in[i] >> 4) & 0x0F0F0F0Fu) | (((hb[i] >> (2 * p + 1)) & 0x01010101u) << 4);
    }
    return w;
  }
};
template <>
struct KQuant<TensorType::Q6_K> {
  static constexpr int kBytes = 210, CB = 12, U = 5;
  static constexpr bool kHasMin = false;
  MM_HD static KPartW decode(const uint8_t* sb, int off, int part) {
    KPartW w;
    const int hh = part >> 2, q4 = part & 3;
    const uint2 l0 = sm_u32x2(sb, off + 64 * hh + 8 * q4);        // rows 0 (lo), 2 (hi)
    const uint2 l1 = sm_u32x2(sb, off + 64 * hh + 32 + 8 * q4);   // rows 1 (lo), 3 (hi)
    const uint2 qh = sm_u32x2(sb, off + 128 + 32 * hh + 8 * q4);  // 2 bits per row
    const uint2 sc = sm_u32x2(sb, off + 192 + 8 * hh);            // scales[8 hh .. 8 hh + 7]
    w.d = half_to_float(sm_u16(sb, off + 208));
    w.dmin = 0.0f;
    const uint32_t lo[2] = {l0.x, l0.y}, lo1[2] = {l1.x, l1.y}, hb[2] = {qh.x, qh.y};
MM_UNROLL
    for (int wd = 0; wd < 2; ++wd) {
      w.v[0 + wd] = (lo[wd] & 0x0F0F0F0Fu) | ((hb[wd] & 0x03030303u) << 4);
      w.v[2 + wd] = (lo1[wd] & 0x0F0F0F0Fu) | (((hb[wd] >> 2) & 0x03030303u) << 4);
      w.v[4 + wd] = ((lo[wd] >> 4) & 0x0F0F0F0Fu) | (((hb[wd] >> 4) & 0x03030303u) << 4);
      w.v[6 + wd] = ((lo1[wd] >> 4) & 0x0F0F0F0Fu) | (((hb[wd] >> 6) & 0x03030303u) << 4);
    }
MM_UNROLL
    for (int r = 0; r < 4; ++r) {
      const int g = 2 * r + (q4 >> 1);  // scale group 8 hh + g: 16 elements per group
      const uint32_t word = g < 4 ? sc.x : sc.y;
      w.sc[r] = static_cast<int8_t>((word >> (8 * (g & 3))) & 0xFFu);
    }
    w.mn[0] = w.mn[1] = 0;
    return w;
  }
};

/// This part's share of isum (x) and msum (y) for super-block t, token column col.
/// Q4_K/Q5_K: isum = sum_j sc_j * sum_l q * a, msum = sum_j m_j * (bsums[2j] + bsums[2j+1]);
/// Q6_K: isum = sum_g sc_g * sum_l (q - 32) * a (-32 applied as a dp4a with bytes of -32).
template <TensorType kType>
MM_HD int2 kquant_partial(const KPartW& w, const Q8KView& a, int col,
                                               int64_t t, int part) {
  const int8_t* aq = a.qs + col * a.k + t * 256;
  if constexpr (kType == TensorType::Q6_K) {
    const int hh = part >> 2, q4 = part & 3;
    int isum = 0;
MM_UNROLL
    for (int r = 0; r < 4; ++r) {
      const int2 av = ldg(reinterpret_cast<const int2*>(aq + 128 * hh + 32 * r + 8 * q4));
      int s = dp4a(w.v[2 * r], av.x, 0);
      s = dp4a(w.v[2 * r + 1], av.y, s);
      s = dp4a(0xE0E0E0E0u, av.x, s);  // + sum(-32 * a)
      s = dp4a(0xE0E0E0E0u, av.y, s);
      isum += w.sc[r] * s;
    }
    return make_int2(isum, 0);
  } else {
    const int p = part >> 1, h = part & 1;
    const int4 a0 = ldg(reinterpret_cast<const int4*>(aq + 64 * p + 16 * h));
    const int4 a1 = ldg(reinterpret_cast<const int4*>(aq + 64 * p + 32 + 16 * h));
    int s0 = dp4a(w.v[0], a0.x, 0);
    s0 = dp4a(w.v[1], a0.y, s0);
    s0 = dp4a(w.v[2], a0.z, s0);
    s0 = dp4a(w.v[3], a0.w, s0);
    int s1 = dp4a(w.v[4], a1.x, 0);
    s1 = dp4a(w.v[5], a1.y, s1);
    s1 = dp4a(w.v[6], a1.z, s1);
    s1 = dp4a(w.v[7], a1.w, s1);
    const int16_t* bs = a.bsums + (col * a.nb + t) * 16;
    const int b0 = ldg(bs + 4 * p + h);      // bsums[2 j0 + h]
    const int b1 = ldg(bs + 4 * p + 2 + h);  // bsums[2 (j0 + 1) + h]
    return make_int2(w.sc[0] * s0 + w.sc[1] * s1, w.mn[0] * b0 + w.mn[1] * b1);
  }
}

/// A quarter q (0..3) of a Q4_K/Q5_K super-block: sub-blocks 2q and 2q + 1, elements 64q ..
/// 64q + 63, unpacked from words read straight from global memory (the direct-load MMVQ,
/// mmvq_kquants_direct.cu). lo[i] holds elements 64q + 4i .. 64q + 4i + 3 (sub-block 2q),
/// hi[i] elements 64q + 32 + 4i .. (sub-block 2q + 1), as bytes 0..15 (Q4_K) or 0..31 (Q5_K).
struct KQuarterW {
  uint32_t lo[8];
  uint32_t hi[8];
  uint32_t sc;  ///< scale of sub-block 2q in bits 0..7, of 2q + 1 in bits 8..15 (6-bit values)
  uint32_t mn;  ///< the two mins, same packing
};

/// The 6-bit scales and mins of sub-blocks 2q and 2q + 1 from scales[0..11] as the words s0,
/// s1, s2 (the rule of get_scale_min_k4, ggml-quants.c; blocks.h k4_scale_min), without a
/// branch: both sub-blocks sit in bytes 2(q % 2), 2(q % 2) + 1 of each word.
MM_HD void k4_quarter_scales(int q, uint32_t s0, uint32_t s1, uint32_t s2, uint32_t* sc,
                             uint32_t* mn) {
  const int sh = 16 * (q & 1);
  const uint32_t a = s0 >> sh, b = s1 >> sh, c = s2 >> sh;
  if (q < 2) {  // j < 4: the low 6 bits of scales[j] / scales[j + 4]
    *sc = a & 0x3F3Fu;
    *mn = b & 0x3F3Fu;
  } else {  // j >= 4: 4 bits from scales[j + 4], the top 2 from scales[j - 4] / scales[j]
    *sc = (c & 0x0F0Fu) | ((a >> 2) & 0x3030u);
    *mn = ((c >> 4) & 0x0F0Fu) | ((b >> 2) & 0x3030u);
  }
}

/// Quarter q of a Q4_K (qh unused) or Q5_K super-block from its header word hd (d, dmin,
/// scales[0..11]), the 32 qs bytes 32q .. 32q + 31 (qa, qb) and, for Q5_K, the 32 qh bytes (ha,
/// hb: bit j of qh[l] is bit 4 of element 32 j + l). Layouts: blocks.h block_q4_K, block_q5_K.
template <TensorType kType>
MM_HD KQuarterW kquarter_decode(const uint4& hd, const uint4& qa, const uint4& qb, const uint4& ha,
                                const uint4& hb, int q) {
  KQuarterW w;
  k4_quarter_scales(q, hd.y, hd.z, hd.w, &w.sc, &w.mn);
  const uint32_t in[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
MM_UNROLL
  for (int i = 0; i < 8; ++i) {
    w.lo[i] = in[i] & 0x0F0F0F0Fu;
    w.hi[i] = (in[i] >> 4) & 0x0F0F0F0Fu;
  }
  if constexpr (kType == TensorType::Q5_K) {
    const uint32_t h[8] = {ha.x, ha.y, ha.z, ha.w, hb.x, hb.y, hb.z, hb.w};
MM_UNROLL
    for (int i = 0; i < 8; ++i) {
      w.lo[i] |= ((h[i] >> (2 * q)) & 0x01010101u) << 4;
      w.hi[i] |= ((h[i] >> (2 * q + 1)) & 0x01010101u) << 4;
    }
  }
  return w;
}

/// Quarter q's share of isum (x) and msum (y) of super-block t for token column col (the sums
/// of kquant_partial, split 4 ways instead of 8; exact, so the 4 shares add up to the totals).
MM_HD int2 kquarter_partial(const KQuarterW& w, const Q8KView& a, int col, int64_t t, int q) {
  const int8_t* aq = a.qs + col * a.k + t * 256 + 64 * q;
  const int4 a0 = ldg(reinterpret_cast<const int4*>(aq));
  const int4 a1 = ldg(reinterpret_cast<const int4*>(aq + 16));
  const int4 a2 = ldg(reinterpret_cast<const int4*>(aq + 32));
  const int4 a3 = ldg(reinterpret_cast<const int4*>(aq + 48));
  int s0 = dp4a(w.lo[0], a0.x, 0);
  s0 = dp4a(w.lo[1], a0.y, s0);
  s0 = dp4a(w.lo[2], a0.z, s0);
  s0 = dp4a(w.lo[3], a0.w, s0);
  s0 = dp4a(w.lo[4], a1.x, s0);
  s0 = dp4a(w.lo[5], a1.y, s0);
  s0 = dp4a(w.lo[6], a1.z, s0);
  s0 = dp4a(w.lo[7], a1.w, s0);
  int s1 = dp4a(w.hi[0], a2.x, 0);
  s1 = dp4a(w.hi[1], a2.y, s1);
  s1 = dp4a(w.hi[2], a2.z, s1);
  s1 = dp4a(w.hi[3], a2.w, s1);
  s1 = dp4a(w.hi[4], a3.x, s1);
  s1 = dp4a(w.hi[5], a3.y, s1);
  s1 = dp4a(w.hi[6], a3.z, s1);
  s1 = dp4a(w.hi[7], a3.w, s1);
  // bsums[4q .. 4q + 3]: 16-element sums; sub-block 2q covers the first two.
  const int2 bs = ldg(reinterpret_cast<const int2*>(a.bsums + (col * a.nb + t) * 16 + 4 * q));
  const int b01 = static_cast<int16_t>(bs.x & 0xFFFF) + (bs.x >> 16);
  const int b23 = static_cast<int16_t>(bs.y & 0xFFFF) + (bs.y >> 16);
  const int sc0 = static_cast<int>(w.sc & 0xFFu), sc1 = static_cast<int>(w.sc >> 8);
  const int m0 = static_cast<int>(w.mn & 0xFFu), m1 = static_cast<int>(w.mn >> 8);
  return make_int2(sc0 * s0 + sc1 * s1, m0 * b01 + m1 * b23);
}

/// The term of a Q4_K/Q5_K super-block from its header's d and dmin (half bits in hd_x) and the
/// exact totals (kquant_term's formula and operation order).
MM_HD float kquarter_term(uint32_t hd_x, float da, int isum, int msum) {
  const float d = half_to_float(static_cast<uint16_t>(hd_x & 0xFFFFu));
  const float dmin = half_to_float(static_cast<uint16_t>(hd_x >> 16));
  return fsub(fmul(fmul(d, da), i2f(isum)), fmul(fmul(dmin, da), i2f(msum)));
}

// ---- Q6_K quarters (the direct-load MMVQ, mmvq_q6k_direct.cu) -----------------------------------

/// Quarter q (0..3) of a Q6_K super-block: half hh = q / 2 and, for l = 0..31, the elements of
/// quadrants sub = q % 2 (lo) and sub + 2 (hi) of that half. Layout (blocks.h block_q6_K,
/// ggml-common.h; the order of dequantize_row_q6_K): element 128 hh + 32 quad + l has its low 4
/// bits in ql[64 hh + 32 (quad % 2) + l] (low nibble for quad < 2, high nibble otherwise), its
/// top 2 bits in qh[32 hh + l] >> 2 quad, and the scale scales[8 hh + 2 quad + l / 16]; its value
/// is d * scale * (q - 32). So the quarter reads the 32 ql bytes 32 q .. 32 q + 31, the 32 qh
/// bytes 32 hh .. 32 hh + 31 and four scales.
struct Q6QuarterW {
  uint32_t lo[8];  ///< elements 128 hh + 32 sub + 4 i .. + 3 as bytes q = 0..63 (value q - 32)
  uint32_t hi[8];  ///< elements 128 hh + 64 + 32 sub + 4 i .. + 3, same
  int sc[4];       ///< scales of lo l < 16, lo l >= 16, hi l < 16, hi l >= 16
  uint16_t d;      ///< the super-block's d (half bits)
};

/// Quarter q of the Q6_K super-block whose first byte is at byte offset o (even, 0..14) of the
/// aligned 16-byte words: l = words 2q .. 2q + 2 of the block's span (ql bytes 32 q ..), h = words
/// 8 + 2 hh .. 10 + 2 hh (qh bytes 32 hh ..), s = words 12, 13 (scales, d). A block of 210 bytes
/// at offset o spans 14 such words; the words are counted from the one holding its first byte.
MM_HD Q6QuarterW q6k_quarter_decode(const uint4 (&l)[3], const uint4 (&h)[3], const uint4 (&s)[2], int o,
                                    int q) {
  const uint32_t lv[12] = {l[0].x, l[0].y, l[0].z, l[0].w, l[1].x, l[1].y,
                           l[1].z, l[1].w, l[2].x, l[2].y, l[2].z, l[2].w};
  const uint32_t hv[12] = {h[0].x, h[0].y, h[0].z, h[0].w, h[1].x, h[1].y,
                           h[1].z, h[1].w, h[2].x, h[2].y, h[2].z, h[2].w};
  const uint32_t sv[8] = {s[0].x, s[0].y, s[0].z, s[0].w, s[1].x, s[1].y, s[1].z, s[1].w};
  uint32_t ql[8], qh[8], hd[5];
  extract_words(lv, o, ql);
  extract_words(hv, o, qh);
  extract_words(sv, o, hd);  // scales[0..15] in hd[0..3], d in the low half of hd[4]
  const int sub = q & 1, hh = q >> 1;
  Q6QuarterW w;
MM_UNROLL
  for (int i = 0; i < 8; ++i) {
    w.lo[i] = (ql[i] & 0x0F0F0F0Fu) | (((qh[i] >> (2 * sub)) & 0x03030303u) << 4);
    w.hi[i] = ((ql[i] >> 4) & 0x0F0F0F0Fu) | (((qh[i] >> (2 * sub + 4)) & 0x03030303u) << 4);
  }
  // scales[8 hh + 2 sub + {0, 1}] (lo) and scales[8 hh + 4 + 2 sub + {0, 1}] (hi).
  const uint32_t sa = (hh ? hd[2] : hd[0]) >> (16 * sub), sb = (hh ? hd[3] : hd[1]) >> (16 * sub);
  w.sc[0] = static_cast<int8_t>(sa & 0xFFu);
  w.sc[1] = static_cast<int8_t>((sa >> 8) & 0xFFu);
  w.sc[2] = static_cast<int8_t>(sb & 0xFFu);
  w.sc[3] = static_cast<int8_t>((sb >> 8) & 0xFFu);
  w.d = static_cast<uint16_t>(hd[4] & 0xFFFFu);
  return w;
}

/// The activations a Q6_K quarter q multiplies, for super-block t and token column col: a[0], a[1]
/// the lo quadrant's 32 values, a[2], a[3] the hi quadrant's, b_lo / b_hi the two 16-element sums
/// (bsums) of each, as packed int16 pairs.
struct Q6QuarterA {
  int4 a[4];
  int b_lo;
  int b_hi;
};

MM_HD Q6QuarterA q6k_quarter_acts(const Q8KView& a, int col, int64_t t, int q) {
  const int hh = q >> 1, sub = q & 1;
  const int8_t* aq = a.qs + col * a.k + t * 256 + 128 * hh + 32 * sub;
  Q6QuarterA r;
  r.a[0] = ldg(reinterpret_cast<const int4*>(aq));
  r.a[1] = ldg(reinterpret_cast<const int4*>(aq + 16));
  r.a[2] = ldg(reinterpret_cast<const int4*>(aq + 64));
  r.a[3] = ldg(reinterpret_cast<const int4*>(aq + 80));
  const int16_t* bs = a.bsums + (col * a.nb + t) * 16 + 8 * hh + 2 * sub;
  r.b_lo = ldg(reinterpret_cast<const int*>(bs));
  r.b_hi = ldg(reinterpret_cast<const int*>(bs + 4));
  return r;
}

/// Quarter w's exact share of the contract's isum = sum_g sc_g * sum_l (q - 32) * a (quant_ref.h):
/// per 16-element group sc * (sum q * a - 32 * bsum); the four quarters' shares add up to it.
MM_HD int q6k_quarter_isum(const Q6QuarterW& w, const Q6QuarterA& a) {
  int s[4];
MM_UNROLL
  for (int h = 0; h < 2; ++h) {
    const uint32_t* v = h == 0 ? w.lo : w.hi;
    const int4& a0 = a.a[2 * h];
    const int4& a1 = a.a[2 * h + 1];
    int s0 = dp4a(v[0], static_cast<uint32_t>(a0.x), 0);
    s0 = dp4a(v[1], static_cast<uint32_t>(a0.y), s0);
    s0 = dp4a(v[2], static_cast<uint32_t>(a0.z), s0);
    s0 = dp4a(v[3], static_cast<uint32_t>(a0.w), s0);
    int s1 = dp4a(v[4], static_cast<uint32_t>(a1.x), 0);
    s1 = dp4a(v[5], static_cast<uint32_t>(a1.y), s1);
    s1 = dp4a(v[6], static_cast<uint32_t>(a1.z), s1);
    s1 = dp4a(v[7], static_cast<uint32_t>(a1.w), s1);
    const int b = h == 0 ? a.b_lo : a.b_hi;
    s[2 * h] = s0 - 32 * static_cast<int16_t>(b & 0xFFFF);
    s[2 * h + 1] = s1 - 32 * (b >> 16);
  }
  return w.sc[0] * s[0] + w.sc[1] * s[1] + w.sc[2] * s[2] + w.sc[3] * s[3];
}

/// The Q6_K super-block's term (d * da) * float(isum) (kquant_term's formula and order).
MM_HD float q6k_quarter_term(uint16_t d, float da, int isum) {
  return fmul(fmul(half_to_float(d), da), i2f(isum));
}

/// The super-block's term from the exact totals: Q4_K/Q5_K (d * da) * float(isum) -
/// (dmin * da) * float(msum); Q6_K (d * da) * float(isum).
template <TensorType kType>
MM_HD float kquant_term(const KPartW& w, float da, int isum, int msum) {
  const float main = fmul(fmul(w.d, da), i2f(isum));
  if constexpr (KQuant<kType>::kHasMin)
    return fsub(main, fmul(fmul(w.dmin, da), i2f(msum)));
  return main;
}

}  // namespace minfer::cuda::mm
