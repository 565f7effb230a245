// Per-type pieces of the int8 tensor-core matrix multiply (MMQ, mmq.cu) that the host emulation
// (mmq_emulate.cu) runs as well, so that both compute the same numbers:
//   - the stage geometry: which aligned 16-byte words of a weight row a stage copies to shared
//     memory, and where the stage's first block starts in them;
//   - the decode of staged weight blocks into int8 values (zero points subtracted, so the integer
//     products are the CPU contract's) and their scales;
//   - the per-output arithmetic: one step per 32-element block (legacy types) and one term per
//     256-element super-block (K-quants), from the exact integer sums the mma instructions give.
//
// Block layouts: src/quant/blocks.h (ggml-common.h block_q4_0 ... block_q6_K). The integer sums
// and term formulas are the CPU accumulation contract's (src/quant/quant_ref.h, step 1):
//   Q4_0 / Q5_0 / Q8_0   isum = sum (q - z) a                        (z = 8, 16, 0)
//   Q4_1 / Q5_1          isum = sum q a, plus the activation block sum asum
//   Q4_K / Q5_K          isum = sum_j sc_j sum_32 q a,  msum = sum_j m_j (bsums[2j] + bsums[2j+1])
//                        term = (d da) float(isum) - (dmin da) float(msum)
//   Q6_K                 isum = sum_g scales[g] sum_16 (q - 32) a,  term = (d da) float(isum)
// Legacy blocks are accumulated with a fused multiply-add of the exact product
// (dw da) * float(isum) (one rounding where the CPU rounds the term and then the sum); K-quant
// terms are formed operation for operation as on the CPU and added with one rounding. Only the
// order of the additions differs from the CPU (which spreads terms over 32 lanes): the tests
// bound the difference by the f32 accumulation error (docs/cuda-matmul.md).
#pragma once

#include <cstdint>

#include "core/types.h"
#include "cuda/kernels/mmq.cuh"
#include "cuda/kernels/mmvq_common.cuh"

namespace minfer::cuda::mm {

/// Compile-time facts of one weight type for MMQ.
template <TensorType T>
struct MmqTraits {
  static constexpr bool kKQuant = T == TensorType::Q4_K || T == TensorType::Q5_K || T == TensorType::Q6_K;
  static constexpr bool kMin = T == TensorType::Q4_1 || T == TensorType::Q5_1;
  static constexpr int kBlock = kKQuant ? 256 : 32;  ///< elements per weight block
  static constexpr int kBytes = T == TensorType::Q4_0   ? 18
                                : T == TensorType::Q4_1 ? 20
                                : T == TensorType::Q5_0 ? 22
                                : T == TensorType::Q5_1 ? 24
                                : T == TensorType::Q8_0 ? 34
                                : T == TensorType::Q4_K ? 144
                                : T == TensorType::Q5_K ? 176
                                                        : 210;  ///< bytes per block (blocks.h)
  static constexpr int kStageK = kKQuant ? 256 : 128;  ///< elements of k per pipeline stage
  static constexpr int kStageBlocks = kStageK / kBlock;
  /// Aligned 16-byte words that cover a stage of one row wherever it starts (blocks are only
  /// 2-byte aligned: up to 14 bytes before the first block share its word).
  static constexpr int kRawWords = (kStageBlocks * kBytes + 14 + 15) / 16;
};

// ---- stage geometry ----------------------------------------------------------------------------

/// The words a stage copies for one row: [first, first + 16 * words) relative to the tensor's
/// 16-byte aligned start, the stage's first block at byte `shift` of the copy.
struct MmqRowStage {
  int64_t first;
  int words;
  int shift;
};

/// Stage of blocks [kb0, kb0 + nblk) of row `row` (row_bytes bytes per row).
MM_HD MmqRowStage mmq_row_stage(int64_t row, int64_t row_bytes, int64_t kb0, int nblk, int block_bytes) {
  const int64_t start = row * row_bytes + kb0 * block_bytes;
  MmqRowStage g;
  g.first = start & ~int64_t{15};
  g.shift = static_cast<int>(start & 15);
  g.words = (g.shift + nblk * block_bytes + 15) >> 4;
  return g;
}

// Reads from a staged row use mmvq_common.cuh's sm_u16 / sm_u32 (2-byte aligned offsets; sm_u32
// reads the aligned word after the one holding the offset, so a staged buffer keeps 4 bytes of
// slack) and spread4_to_bit4.

/// Each byte b (0..127) of x becomes b - z (z <= 128) as a two's complement byte; no borrow
/// crosses bytes (bit 7 is set before subtracting).
template <uint32_t kZ>
MM_HD uint32_t bytes_minus(uint32_t x) {
  constexpr uint32_t z = kZ * 0x01010101u;
  return ((x | 0x80808080u) - z) ^ 0x80808080u;
}

// ---- weight decode -----------------------------------------------------------------------------

/// Legacy block at byte o of a staged row: its 32 weights as int8 with the zero point subtracted
/// (q - 8 for Q4_0, q - 16 for Q5_0, q for Q4_1/Q5_1/Q8_0), element 4i + b in byte b of out[i];
/// *d = the scale, *m = the min (Q4_1/Q5_1, else 0).
template <TensorType T>
MM_HD void mmq_decode_legacy(const uint8_t* raw, int o, uint32_t out[8], float* d, float* m) {
  *d = half_to_float(sm_u16(raw, o));
  *m = 0.0f;
  if constexpr (T == TensorType::Q8_0) {
    MM_UNROLL for (int i = 0; i < 8; ++i) out[i] = sm_u32(raw, o + 2 + 4 * i);
  } else {
    constexpr bool kMin = MmqTraits<T>::kMin;
    constexpr bool kQh = T == TensorType::Q5_0 || T == TensorType::Q5_1;
    if constexpr (kMin) *m = half_to_float(sm_u16(raw, o + 2));
    const int qh_off = o + (kMin ? 4 : 2);
    const int qs_off = qh_off + (kQh ? 4 : 0);
    const uint32_t qh = kQh ? sm_u32(raw, qh_off) : 0u;
    MM_UNROLL for (int i = 0; i < 4; ++i) {
      const uint32_t q = sm_u32(raw, qs_off + 4 * i);
      uint32_t lo = q & 0x0F0F0F0Fu, hi = (q >> 4) & 0x0F0F0F0Fu;  // elements 4i.., 16 + 4i..
      if constexpr (kQh) {
        lo |= spread4_to_bit4(qh >> (4 * i));
        hi |= spread4_to_bit4(qh >> (16 + 4 * i));
      }
      if constexpr (T == TensorType::Q4_0) {
        lo = bytes_minus<8>(lo);
        hi = bytes_minus<8>(hi);
      } else if constexpr (T == TensorType::Q5_0) {
        lo = bytes_minus<16>(lo);
        hi = bytes_minus<16>(hi);
      }
      out[i] = lo;
      out[4 + i] = hi;
    }
  }
}

/// The scales of a K-quant super-block, bytes packed four per word.
struct KScales {
  float d = 0.0f, dmin = 0.0f;
  uint32_t sc[4] = {};    ///< Q4_K/Q5_K: sc[0..1] the 6-bit sub-block scales; Q6_K: scales[16]
  uint32_t mins[2] = {};  ///< Q4_K/Q5_K: the 6-bit sub-block mins m_0 .. m_7
};

/// Scales of the K-quant super-block at byte o of a staged row. Q4_K/Q5_K: sub-block j's scale
/// and min as in blocks.h k4_scale_min (j < 4: low 6 bits of bytes j and j + 4; j >= 4: the
/// nibbles of byte j + 4 and the top 2 bits of bytes j - 4 and j), computed four at a time.
template <TensorType T>
MM_HD KScales mmq_decode_kscales(const uint8_t* raw, int o) {
  KScales s;
  if constexpr (T == TensorType::Q6_K) {
    s.d = half_to_float(sm_u16(raw, o + 208));
    MM_UNROLL for (int i = 0; i < 4; ++i) s.sc[i] = sm_u32(raw, o + 192 + 4 * i);
  } else {
    s.d = half_to_float(sm_u16(raw, o));
    s.dmin = half_to_float(sm_u16(raw, o + 2));
    const uint32_t b0 = sm_u32(raw, o + 4), b1 = sm_u32(raw, o + 8), b2 = sm_u32(raw, o + 12);
    s.sc[0] = b0 & 0x3F3F3F3Fu;
    s.mins[0] = b1 & 0x3F3F3F3Fu;
    s.sc[1] = (b2 & 0x0F0F0F0Fu) | ((b0 >> 6) & 0x03030303u) << 4;
    s.mins[1] = ((b2 >> 4) & 0x0F0F0F0Fu) | ((b1 >> 6) & 0x03030303u) << 4;
  }
  return s;
}

/// Half `h` (elements 128h .. 128h+127) of the K-quant super-block at byte o of a staged row, as
/// int8 values (Q4_K 0..15, Q5_K 0..31, Q6_K q - 32): 32 words, element 128h + 4i + b in byte b
/// of out[i].
template <TensorType T>
MM_HD void mmq_decode_khalf(const uint8_t* raw, int o, int h, uint32_t* out) {
  if constexpr (T == TensorType::Q6_K) {
    // e = 128h + 32r + l: low 4 bits in ql[64h + l + 32(r & 1)] (low nibble for r < 2),
    // high 2 bits at bit 2r of qh[32h + l] (ggml-common.h block_q6_K).
    MM_UNROLL for (int i = 0; i < 8; ++i) {
      const uint32_t a = sm_u32(raw, o + 64 * h + 4 * i);
      const uint32_t b = sm_u32(raw, o + 64 * h + 32 + 4 * i);
      const uint32_t q = sm_u32(raw, o + 128 + 32 * h + 4 * i);
      out[i] = bytes_minus<32>((a & 0x0F0F0F0Fu) | (q & 0x03030303u) << 4);
      out[8 + i] = bytes_minus<32>((b & 0x0F0F0F0Fu) | ((q >> 2) & 0x03030303u) << 4);
      out[16 + i] = bytes_minus<32>(((a >> 4) & 0x0F0F0F0Fu) | ((q >> 4) & 0x03030303u) << 4);
      out[24 + i] = bytes_minus<32>(((b >> 4) & 0x0F0F0F0Fu) | ((q >> 6) & 0x03030303u) << 4);
    }
  } else {
    // Sub-block j = 2p + odd: qs[32p + l], low nibble for even j, high for odd (Q5_K: bit j
    // of qh[l] is bit 4).
    constexpr int kQs = T == TensorType::Q4_K ? 16 : 48;
    MM_UNROLL for (int pp = 0; pp < 2; ++pp) {
      const int p = 2 * h + pp;
      MM_UNROLL for (int i = 0; i < 8; ++i) {
        const uint32_t q = sm_u32(raw, o + kQs + 32 * p + 4 * i);
        uint32_t lo = q & 0x0F0F0F0Fu, hi = (q >> 4) & 0x0F0F0F0Fu;
        if constexpr (T == TensorType::Q5_K) {
          const uint32_t qh = sm_u32(raw, o + 16 + 4 * i);
          lo |= ((qh >> (2 * p)) & 0x01010101u) << 4;
          hi |= ((qh >> (2 * p + 1)) & 0x01010101u) << 4;
        }
        out[16 * pp + i] = lo;
        out[16 * pp + 8 + i] = hi;
      }
    }
  }
}

// ---- activation scales -------------------------------------------------------------------------

/// Q8 block scale pair (ds: d, bits of the int32 block sum) -> the Q4_1/Q5_1 min factor
/// da * float(asum) (asum is exact in f32: |asum| <= 32 * 127).
MM_HD float mmq_min_factor(float da, float sum_bits) { return fmul(da, i2f(static_cast<int>(f2u(sum_bits)))); }

/// Sums of the Q8_K bsums over the 32-element sub-blocks 2p and 2p + 1, two int16 per word
/// (|sum| <= 32 * 128 fits).
MM_HD uint32_t mmq_pack_bsums(const int16_t* bs, int p) {
  const int lo = bs[4 * p] + bs[4 * p + 1], hi = bs[4 * p + 2] + bs[4 * p + 3];
  return (static_cast<uint32_t>(lo) & 0xFFFFu) | static_cast<uint32_t>(hi) << 16;
}

// ---- per-output arithmetic ---------------------------------------------------------------------

/// float(i) for |i| < 2^22, exact, in two full-rate operations: i is added to the significand of
/// 1.5 * 2^23 (whose unit in the last place is 1), then 1.5 * 2^23 is subtracted.
MM_HD float small_i2f(int i) { return fsub(u2f(0x4B400000u + static_cast<uint32_t>(i)), 12582912.0f); }

MM_HD float fma_rn(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

/// One legacy block of one output: acc + (dw da) float(isum), the product exact (|isum| <=
/// 32 * 128 * 127 < 2^22).
MM_HD float mmq_legacy_step(float acc, float dw, float da, int isum) {
  return fma_rn(fmul(dw, da), small_i2f(isum), acc);
}

/// The min part of a Q4_1/Q5_1 block: acc + mw (da float(asum)).
MM_HD float mmq_min_step(float acc, float mw, float min_factor) { return fma_rn(mw, min_factor, acc); }

/// msum = sum_j m_j bs32_j, j = 0..7 (mins one per byte, bs32 two int16 per word): exact.
MM_HD int mmq_msum(const uint32_t mins[2], const uint32_t bs[4]) {
#ifdef __CUDA_ARCH__
  int s = __dp2a_lo(static_cast<int>(bs[0]), static_cast<int>(mins[0]), 0);
  s = __dp2a_hi(static_cast<int>(bs[1]), static_cast<int>(mins[0]), s);
  s = __dp2a_lo(static_cast<int>(bs[2]), static_cast<int>(mins[1]), s);
  return __dp2a_hi(static_cast<int>(bs[3]), static_cast<int>(mins[1]), s);
#else
  int s = 0;
  for (int j = 0; j < 8; ++j) {
    const int m = static_cast<int8_t>(mins[j >> 2] >> (8 * (j & 3)));
    const int b = static_cast<int16_t>(bs[j >> 1] >> (16 * (j & 1)));
    s += m * b;
  }
  return s;
#endif
}

/// The K-quant super-block term, operation for operation as the CPU contract.
template <TensorType T>
MM_HD float mmq_kquant_term(float d, float dmin, float da, int isum, int msum) {
  if constexpr (T == TensorType::Q6_K) {
    (void)dmin;
    (void)msum;
    return fmul(fmul(d, da), i2f(isum));
  } else {
    return fsub(fmul(fmul(d, da), i2f(isum)), fmul(fmul(dmin, da), i2f(msum)));
  }
}

}  // namespace minfer::cuda::mm
