// Row-at-a-time dot products of the legacy block types (Q4_0, Q5_0, Q8_0 x Q8_0; Q4_1, Q5_1 x
// Q8_1) for the SIMD levels: the decode path (one activation row) and vec_dot. Included only
// from *_avx2.cpp / *_avx512.cpp files (isa.h).
//
// Per block the 32 integer products are summed exactly into 8 int32 partials (dot4), eight
// blocks' partials are reduced to one vector of eight block sums (reduce8), and the f32 terms of
// the contract (quant_ref.h) are formed eight at a time: term = (dw * da) * float(isum)
// [+ (mw * da) * float(asum)], added to the 32 lanes (block t to lane t % 32). The weight values
// enter the integer dot as unsigned bytes u with a fixed offset (Q4_0: w = u - 8, Q5_0: u - 16,
// Q8_0 on avx512: u - 128), so isum = sum(u * a) - offset * asum with asum the block's sum of
// activation values; asum and da are computed once per activation row (ActRow).
#pragma once

#include <algorithm>
#include <vector>

#include "core/fp16.h"
#include "cpu/simd/isa.h"
#include "quant/blocks.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {

/// Per-block facts of one Q8_0 / Q8_1 activation row: qs pointers, asum (exact sum of the 32
/// values) and da (the half scale as f32). asum and da are padded with zeros to a multiple of 8.
struct ActRow {
  const uint8_t* blocks = nullptr;
  size_t block_bytes = 0;  ///< 34 (Q8_0) or 36 (Q8_1)
  size_t qs_offset = 0;    ///< 2 (Q8_0) or 4 (Q8_1)
  const int32_t* asum = nullptr;
  const float* da = nullptr;

  const int8_t* qs(int64_t b) const {
    return reinterpret_cast<const int8_t*>(blocks + static_cast<size_t>(b) * block_bytes + qs_offset);
  }
};

/// Storage for ActRow's arrays (reused across calls).
struct ActRowBuf {
  std::vector<int32_t> asum;
  std::vector<float> da;
};

/// Fills `buf` for the activation row `a` of nb blocks (Q8_1 when `q8_1`) and returns the view.
inline ActRow make_act_row(const void* a, int64_t nb, bool q8_1, ActRowBuf& buf) {
  const size_t padded = static_cast<size_t>((nb + 7) / 8 * 8);
  buf.asum.assign(padded, 0);
  buf.da.assign(padded, 0.0f);
  ActRow r;
  r.blocks = static_cast<const uint8_t*>(a);
  r.block_bytes = q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
  r.qs_offset = q8_1 ? 4 : 2;
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = r.blocks + static_cast<size_t>(b) * r.block_bytes;
    // 1 * a + 1 * a stays within int16 for any bytes.
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, loadu256(blk + r.qs_offset)), ones16);
    buf.asum[static_cast<size_t>(b)] = hsum_i32(s);
    buf.da[static_cast<size_t>(b)] = _cvtsh_ss(load_u16(blk));
  }
  r.asum = buf.asum.data();
  r.da = buf.da.data();
  return r;
}

/// Low / high nibbles of 16 packed bytes as 32 bytes in element order (elements j and j + 16
/// share byte j: ggml-common.h block_q4_0).
inline __m256i nibbles_32(const uint8_t* qs) {
  const __m128i x = loadu128(qs);
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

/// Adds 16 to element j where bit j of the Q5 high-bit word qh is set (blocks.h q5_high_bits).
inline __m256i add_q5_high(__m256i u, const uint8_t qh[4]) {
  const uint32_t bits = q5_high_bits(qh);
#if MINFER_SIMD_AVX512
  return _mm256_mask_add_epi8(u, static_cast<__mmask32>(bits), u, _mm256_set1_epi8(16));
#else
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                       3, 3, 3, 3, 3, 3, 3));
  const __m256i sel = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel);
  return _mm256_or_si256(u, _mm256_and_si256(set, _mm256_set1_epi8(16)));
#endif
}

// Weight-type policies: partial() returns 8 int32 whose sum is sum_j u_j * a_j for the block
// (avx2 pair bounds: u <= 31 and |a| <= 128 gives |pair| <= 7936).
struct LegacyQ4_0 {
  using Block = block_q4_0;
  static constexpr int kShift = 3;  // w = u - 8
  static constexpr bool kMin = false;
  static __m256i partial(const Block& b, const int8_t* a) {
    return dot4(_mm256_setzero_si256(), nibbles_32(b.qs), loadu256(a));
  }
};
struct LegacyQ5_0 {
  using Block = block_q5_0;
  static constexpr int kShift = 4;  // w = u - 16
  static constexpr bool kMin = false;
  static __m256i partial(const Block& b, const int8_t* a) {
    return dot4(_mm256_setzero_si256(), add_q5_high(nibbles_32(b.qs), b.qh), loadu256(a));
  }
};
struct LegacyQ4_1 {
  using Block = block_q4_1;
  static constexpr int kShift = 0;
  static constexpr bool kMin = true;
  static __m256i partial(const Block& b, const int8_t* a) {
    return dot4(_mm256_setzero_si256(), nibbles_32(b.qs), loadu256(a));
  }
};
struct LegacyQ5_1 {
  using Block = block_q5_1;
  static constexpr int kShift = 0;
  static constexpr bool kMin = true;
  static __m256i partial(const Block& b, const int8_t* a) {
    return dot4(_mm256_setzero_si256(), add_q5_high(nibbles_32(b.qs), b.qh), loadu256(a));
  }
};
struct LegacyQ8_0 {
  using Block = block_q8_0;
#if MINFER_SIMD_AVX512
  static constexpr int kShift = 7;  // u = w + 128 (w ^ 0x80)
#else
  static constexpr int kShift = 0;  // sign trick: |w| * (a * sign(w)); |pair| <= 2 * 128 * 127
#endif
  static constexpr bool kMin = false;
  static __m256i partial(const Block& b, const int8_t* a) {
    const __m256i w = loadu256(b.qs);
#if MINFER_SIMD_AVX512
    return dot4(_mm256_setzero_si256(), _mm256_xor_si256(w, _mm256_set1_epi8(-128)), loadu256(a));
#else
    return dot4(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(loadu256(a), w));
#endif
  }
};

/// Terms of blocks b0 .. b0 + count - 1 (count <= 8; missing blocks contribute +0.0 terms, which
/// leave a lane unchanged) added to lane register `reg`.
template <class K, bool kFull>
inline void legacy_group(const typename K::Block* w, const ActRow& a, int64_t b0, int count,
                         Lanes32& lanes, int reg) {
  using Block = typename K::Block;
  __m256i p[8];
  __m256 dw, mw = _mm256_setzero_ps();
  if constexpr (kFull) {
    for (int i = 0; i < 8; ++i) p[i] = K::partial(w[b0 + i], a.qs(b0 + i));
    dw = halves_to_f32_strided(reinterpret_cast<const uint8_t*>(&w[b0].d), sizeof(Block));
    if constexpr (K::kMin)
      mw = halves_to_f32_strided(reinterpret_cast<const uint8_t*>(&w[b0].m), sizeof(Block));
  } else {
    alignas(16) uint16_t dh[8] = {}, mh[8] = {};
    for (int i = 0; i < 8; ++i) {
      if (i < count) {
        p[i] = K::partial(w[b0 + i], a.qs(b0 + i));
        dh[i] = w[b0 + i].d;
        if constexpr (K::kMin) mh[i] = w[b0 + i].m;
      } else {
        p[i] = _mm256_setzero_si256();
      }
    }
    dw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(dh)));
    if constexpr (K::kMin) mw = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(mh)));
  }
  __m256i isum = reduce8(p);
  const __m256i asum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.asum + b0));
  if constexpr (K::kShift > 0) isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(asum, K::kShift));
  const __m256 da = _mm256_loadu_ps(a.da + b0);
  __m256 term = _mm256_mul_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(isum));
  if constexpr (K::kMin)
    term = _mm256_add_ps(term, _mm256_mul_ps(_mm256_mul_ps(mw, da), _mm256_cvtepi32_ps(asum)));
  lanes.r[reg] = _mm256_add_ps(lanes.r[reg], term);
}

/// The contract's dot product of one weight row (nb blocks) with one prepared activation row.
template <class K>
float legacy_dot_row(int64_t nb, const void* w, const ActRow& a) {
  const auto* wb = static_cast<const typename K::Block*>(w);
  Lanes32 lanes;
  int64_t b0 = 0;
  int reg = 0;
  for (; b0 + 8 <= nb; b0 += 8, reg = (reg + 1) & 3) legacy_group<K, true>(wb, a, b0, 8, lanes, reg);
  if (b0 < nb) legacy_group<K, false>(wb, a, b0, static_cast<int>(nb - b0), lanes, reg);
  return lanes.fold();
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
