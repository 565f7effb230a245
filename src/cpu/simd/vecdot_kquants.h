// Row-at-a-time dot products of the K-quants (Q4_K, Q5_K, Q6_K x Q8_K) for the SIMD levels.
// Included only from *_avx2.cpp / *_avx512.cpp files (isa.h).
//
// Per super-block the integer sums of the contract (quant_ref.h) are computed exactly with
// VPMADDUBSW (unsigned weight values x activation bytes, 16-bit pair sums) followed by a 16-bit
// multiply-add with the sub-block scale; then the one f32 term of the super-block is formed in
// scalar code exactly as the contract writes it and added to lane (super-block % 32).
// Pair bounds (avx2 VPMADDUBSW saturation): u <= 63 and |a| <= 128 gives |pair| <= 16128.
// The Q8_K bsums are read (Q4_K/Q5_K mins as in the reference; Q6_K's -32 offset as
// sum_g sc_g * bsums[g]), so they must be the sums of the qs (true for quantize_act output).
#pragma once

#include "cpu/simd/isa.h"
#include "quant/blocks.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {

/// The 8 six-bit scales and 8 mins of a Q4_K / Q5_K block as 16 bytes [sc0..sc7, m0..m7]
/// (packing of blocks.h k4_scale_min, done on the three little-endian 32-bit words).
inline __m128i k4_scales_mins(const uint8_t s[12]) {
  const uint32_t u0 = static_cast<uint32_t>(load_i32(s));
  const uint32_t u1 = static_cast<uint32_t>(load_i32(s + 4));
  const uint32_t u2 = static_cast<uint32_t>(load_i32(s + 8));
  const uint32_t sc_lo = u0 & 0x3F3F3F3Fu;
  const uint32_t m_lo = u1 & 0x3F3F3F3Fu;
  const uint32_t sc_hi = (u2 & 0x0F0F0F0Fu) | ((u0 >> 6) & 0x03030303u) << 4;
  const uint32_t m_hi = ((u2 >> 4) & 0x0F0F0F0Fu) | ((u1 >> 6) & 0x03030303u) << 4;
  return _mm_setr_epi32(static_cast<int>(sc_lo), static_cast<int>(sc_hi), static_cast<int>(m_lo),
                        static_cast<int>(m_hi));
}

/// Shuffle mask that broadcasts 16-bit element `i` of each 128-bit lane to the whole lane.
inline __m256i bcast16_mask(int i) {
  const int lo = 2 * i, hi = 2 * i + 1;
  return _mm256_setr_epi8(lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo,
                          hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi, lo, hi);
}

/// isum and msum of the contract for one Q4_K (kQ5 = false) or Q5_K block and its Q8_K block.
template <bool kQ5>
inline void q45k_sums(const uint8_t* scales, const uint8_t* qs, const uint8_t* qh,
                      const block_q8_K& a, int32_t* isum, int32_t* msum) {
  const __m128i scm = k4_scales_mins(scales);
  // sc16: the 8 scales as int16 in both 128-bit lanes.
  const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(scm));
  // mins duplicated [m0, m0, m1, m1, ...] as 16 int16, to pair with bsums[2j], bsums[2j+1].
  const __m128i mins = _mm_srli_si128(scm, 8);
  const __m256i mins2 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins, mins));
  const __m256i bsums = loadu256(a.bsums);
  *msum = hsum_i32(_mm256_madd_epi16(bsums, mins2));

  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i acc = _mm256_setzero_si256();
  __m256i hbits = _mm256_setzero_si256();
  if constexpr (kQ5) hbits = loadu256(qh);
  for (int p = 0; p < 4; ++p) {
    const __m256i q = loadu256(qs + 32 * p);
    __m256i lo = _mm256_and_si256(q, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if constexpr (kQ5) {
      // bit j of qh[l] is bit 4 of element l of sub-block j (blocks.h unpack_q5_K).
      const __m256i one = _mm256_set1_epi8(1);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), one), 4));
      hbits = _mm256_srli_epi16(hbits, 2);
    }
    const __m256i plo = _mm256_maddubs_epi16(lo, loadu256(a.qs + 64 * p));
    const __m256i phi = _mm256_maddubs_epi16(hi, loadu256(a.qs + 64 * p + 32));
    acc = dot2_i16(acc, plo, _mm256_shuffle_epi8(sc16, bcast16_mask(2 * p)));
    acc = dot2_i16(acc, phi, _mm256_shuffle_epi8(sc16, bcast16_mask(2 * p + 1)));
  }
  *isum = hsum_i32(acc);
}

/// isum of the contract for one Q6_K block and its Q8_K block.
inline int32_t q6k_isum(const block_q6_K& w, const block_q8_K& a) {
  const __m128i sc8 = loadu128(w.scales);
  // Even scales to the low lane, odd scales to the high lane, sign-extended to int16: sub-blocks
  // 2c and 2c+1 are the two halves of the c-th 32-element run.
  const __m128i eo = _mm_shuffle_epi8(sc8, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m256i s_eo = _mm256_cvtepi8_epi16(eo);
  const __m256i s_nat = _mm256_cvtepi8_epi16(sc8);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  __m256i acc = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = loadu256(w.ql + 64 * h);
    const __m256i l1 = loadu256(w.ql + 64 * h + 32);
    const __m256i hb = loadu256(w.qh + 32 * h);
    // blocks.h unpack_q6_K: element 128h + 32r + l.
    const __m256i q[4] = {
        _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
        _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30))};
    for (int r = 0; r < 4; ++r) {
      const __m256i pr = _mm256_maddubs_epi16(q[r], loadu256(a.qs + 128 * h + 32 * r));
      acc = dot2_i16(acc, pr, _mm256_shuffle_epi8(s_eo, bcast16_mask(4 * h + r)));
    }
  }
  // sum_g sc_g * sum_l (q - 32) a = sum_g sc_g * sum_l q a - 32 * sum_g sc_g * bsums[g].
  const int32_t off = hsum_i32(_mm256_madd_epi16(loadu256(a.bsums), s_nat));
  return hsum_i32(acc) - 32 * off;
}

/// The contract's dot product of a K-quant row (nb super-blocks) with a Q8_K row.
template <int kType>  // 4, 5 or 6
float kquant_dot_row(int64_t nb, const void* w, const void* a) {
  const auto* y = static_cast<const block_q8_K*>(a);
  float lane[32] = {};
  for (int64_t i = 0; i < nb; ++i) {
    float term;
    if constexpr (kType == 6) {
      const auto& x = static_cast<const block_q6_K*>(w)[i];
      const int32_t isum = q6k_isum(x, y[i]);
      term = (_cvtsh_ss(x.d) * y[i].d) * static_cast<float>(isum);
    } else {
      int32_t isum, msum;
      float d, dmin;
      if constexpr (kType == 4) {
        const auto& x = static_cast<const block_q4_K*>(w)[i];
        q45k_sums<false>(x.scales, x.qs, nullptr, y[i], &isum, &msum);
        d = _cvtsh_ss(x.d);
        dmin = _cvtsh_ss(x.dmin);
      } else {
        const auto& x = static_cast<const block_q5_K*>(w)[i];
        q45k_sums<true>(x.scales, x.qs, x.qh, y[i], &isum, &msum);
        d = _cvtsh_ss(x.d);
        dmin = _cvtsh_ss(x.dmin);
      }
      term = (d * y[i].d) * static_cast<float>(isum) - (dmin * y[i].d) * static_cast<float>(msum);
    }
    lane[i % 32] += term;
  }
  for (int wdt = 16; wdt >= 1; wdt /= 2)
    for (int k = 0; k < wdt; ++k) lane[k] += lane[k + wdt];
  return lane[0];
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
