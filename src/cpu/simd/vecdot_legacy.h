// Row-at-a-time dot products of the legacy block types (Q4_0, Q5_0, Q8_0 x Q8_0; Q4_1, Q5_1 x
// Q8_1) for the SIMD levels: the decode path (one activation row) and vec_dot. Included only
// from *_avx2.cpp / *_avx512.cpp files (isa.h).
//
// Per block the 32 integer products are summed exactly into int32 partials (dot4): 8 partials
// of one block per register for Q8_0; for the 4- and 5-bit types two blocks share a register
// (the 16 packed bytes of block b and of block b + 1 fill one YMM, so one AND / shift gives the
// low nibbles of both, against activations stored once per row in that order: ActRow::pairs),
// 4 partials each. Eight blocks' partials are reduced to one vector of eight block sums
// (reduce8 / reduce_pairs4), and the f32 terms of
// the contract (quant_ref.h) are formed eight at a time: term = (dw * da) * float(isum)
// [+ (mw * da) * float(asum)], added to the 32 lanes (block t to lane t % 32). The weight values
// enter the integer dot as unsigned bytes u with a fixed offset (Q4_0: w = u - 8, Q5_0: u - 16,
// Q8_0 on avx512: u - 128), so isum = sum(u * a) - offset * asum with asum the block's sum of
// activation values; asum and da are computed once per activation row (ActRow).
#pragma once

#include <algorithm>
#include <cstring>

#include "core/fp16.h"
#include "cpu/simd/isa.h"
#include "cpu/simd/scratch.h"
#include "quant/blocks.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {

/// Per-block facts of one Q8_0 / Q8_1 activation row: qs pointers, asum (exact sum of the 32
/// values) and da (the half scale as f32), both padded with zeros to a multiple of 8 blocks, and
/// `pairs`: for each pair of blocks (2i, 2i + 1), 64 bytes a_2i[0..15], a_2i+1[0..15],
/// a_2i[16..31], a_2i+1[16..31] (the order of the paired 4/5-bit kernels).
struct ActRow {
  const uint8_t* blocks = nullptr;
  size_t block_bytes = 0;  ///< 34 (Q8_0) or 36 (Q8_1)
  size_t qs_offset = 0;    ///< 2 (Q8_0) or 4 (Q8_1)
  const int32_t* asum = nullptr;
  const float* da = nullptr;
  const int8_t* pairs = nullptr;

  const int8_t* qs(int64_t b) const {
    return reinterpret_cast<const int8_t*>(blocks + static_cast<size_t>(b) * block_bytes + qs_offset);
  }
};

/// Bytes of the prepared data of one ActRow of nb blocks (a multiple of 64).
inline size_t act_row_bytes(int64_t nb) {
  const size_t padded = static_cast<size_t>((nb + 7) / 8 * 8);
  return (padded * (4 + 4 + kQK) + 63) / 64 * 64;
}

/// Builds the ActRow of the activation row `a` of nb blocks (Q8_1 when `q8_1`) in `mem`
/// (act_row_bytes(nb) bytes, 64-byte aligned; valid as long as `mem` is).
inline ActRow make_act_row_at(const void* a, int64_t nb, bool q8_1, uint8_t* mem) {
  const size_t padded = static_cast<size_t>((nb + 7) / 8 * 8);
  auto* asum = reinterpret_cast<int32_t*>(mem);
  auto* da = reinterpret_cast<float*>(mem + padded * 4);
  auto* pairs = reinterpret_cast<int8_t*>(mem + padded * 8);
  std::memset(mem, 0, padded * 8);
  ActRow r;
  r.blocks = static_cast<const uint8_t*>(a);
  r.block_bytes = q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
  r.qs_offset = q8_1 ? 4 : 2;
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = r.blocks + static_cast<size_t>(b) * r.block_bytes;
    const __m256i q = loadu256(blk + r.qs_offset);
    // 1 * a + 1 * a stays within int16 for any bytes.
    asum[b] = hsum_i32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16));
    da[b] = _cvtsh_ss(load_u16(blk));
    int8_t* pr = pairs + static_cast<size_t>(b / 2) * 64 + (b % 2) * 16;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(pr), _mm256_castsi256_si128(q));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(pr + 32), _mm256_extracti128_si256(q, 1));
  }
  r.asum = asum;
  r.da = da;
  r.pairs = pairs;
  return r;
}

/// make_act_row_at in the thread's ScratchSlot::kActRow buffer (valid until the next
/// make_act_row on this thread).
inline ActRow make_act_row(const void* a, int64_t nb, bool q8_1) {
  return make_act_row_at(a, nb, q8_1, static_cast<uint8_t*>(scratch(ScratchSlot::kActRow, act_row_bytes(nb))));
}

/// Low / high nibbles of 16 packed bytes as 32 bytes in element order (elements j and j + 16
/// share byte j: ggml-common.h block_q4_0).
inline __m256i nibbles_32(const uint8_t* qs) {
  const __m128i x = loadu128(qs);
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

/// Adds 16 to byte j of u where bit j of `bits` is set (the Q5 high bit).
inline __m256i add_high_bits(__m256i u, uint32_t bits) {
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

/// Adds 16 to element j where bit j of the Q5 high-bit word qh is set (blocks.h q5_high_bits).
inline __m256i add_q5_high(__m256i u, const uint8_t qh[4]) { return add_high_bits(u, q5_high_bits(qh)); }

/// 4- and 5-bit blocks (ggml-common.h block_q4_0 .. block_q5_1): one block against its 32
/// activations (8 partials), or blocks b, b + 1 against their 64 paired activations (4 + 4).
/// avx2 pair bound: u <= 31 and |a| <= 128 gives |pair| <= 7936.
template <class B, int kShiftBits, bool kMinTerm, bool kFive>
struct LegacyNibbles {
  using Block = B;
  static constexpr int kShift = kShiftBits;
  static constexpr bool kMin = kMinTerm;
  static constexpr bool kPaired = true;
  static __m256i partial(const Block& b, const int8_t* a) {
    __m256i u = nibbles_32(b.qs);
    if constexpr (kFive) u = add_q5_high(u, b.qh);
    return dot4(_mm256_setzero_si256(), u, loadu256(a));
  }
  static __m256i pair_partial(const Block& b0, const Block& b1, const int8_t* a64) {
    const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(b0.qs)), loadu128(b1.qs), 1);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i lo = _mm256_and_si256(x, m4);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
    if constexpr (kFive) {
      const uint32_t h0 = q5_high_bits(b0.qh), h1 = q5_high_bits(b1.qh);
      lo = add_high_bits(lo, (h0 & 0xFFFFu) | h1 << 16);
      hi = add_high_bits(hi, h0 >> 16 | (h1 & 0xFFFF0000u));
    }
    return dot4(dot4(_mm256_setzero_si256(), lo, loadu256(a64)), hi, loadu256(a64 + 32));
  }
};
using LegacyQ4_0 = LegacyNibbles<block_q4_0, 3, false, false>;  // w = u - 8
using LegacyQ5_0 = LegacyNibbles<block_q5_0, 4, false, true>;   // w = u - 16
using LegacyQ4_1 = LegacyNibbles<block_q4_1, 0, true, false>;
using LegacyQ5_1 = LegacyNibbles<block_q5_1, 0, true, true>;

struct LegacyQ8_0 {
  using Block = block_q8_0;
#if MINFER_SIMD_AVX512
  static constexpr int kShift = 7;  // u = w + 128 (w ^ 0x80)
#else
  static constexpr int kShift = 0;  // sign trick: |w| * (a * sign(w)); |pair| <= 2 * 128 * 127
#endif
  static constexpr bool kMin = false;
  static constexpr bool kPaired = false;
  static __m256i partial(const Block& b, const int8_t* a) {
    const __m256i w = loadu256(b.qs);
#if MINFER_SIMD_AVX512
    return dot4(_mm256_setzero_si256(), _mm256_xor_si256(w, _mm256_set1_epi8(-128)), loadu256(a));
#else
    return dot4(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(loadu256(a), w));
#endif
  }
  static __m256i pair_partial(const Block&, const Block&, const int8_t*) { return _mm256_setzero_si256(); }
};

/// A block of zeros: the partner of the last block of an odd count in the paired kernels.
template <class Block>
inline const Block& zero_block() {
  static const Block z{};
  return z;
}

/// Terms of blocks b0 .. b0 + count - 1 (count <= 8), in lanes 0 .. count - 1; the other lanes
/// are +0.0 terms, which leave a contract lane unchanged.
template <class K, bool kFull>
inline __m256 legacy_terms(const typename K::Block* w, const ActRow& a, int64_t b0, int count) {
  using Block = typename K::Block;
  if constexpr (kFull) count = 8;
  __m256i isum;
  if constexpr (K::kPaired) {
    __m256i p[4];
    for (int i = 0; i < 4; ++i) {
      const int b = 2 * i;
      if (kFull || b + 1 < count) p[i] = K::pair_partial(w[b0 + b], w[b0 + b + 1], a.pairs + (b0 + b) * kQK);
      else if (b < count) p[i] = K::pair_partial(w[b0 + b], zero_block<Block>(), a.pairs + (b0 + b) * kQK);
      else p[i] = _mm256_setzero_si256();
    }
    isum = reduce_pairs4(p);
  } else {
    __m256i p[8];
    for (int i = 0; i < 8; ++i)
      p[i] = (kFull || i < count) ? K::partial(w[b0 + i], a.qs(b0 + i)) : _mm256_setzero_si256();
    isum = reduce8(p);
  }
  const __m256 dw = halves_to_f32_strided(reinterpret_cast<const uint8_t*>(&w[b0].d), sizeof(Block), count);
  const __m256i asum = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.asum + b0));
  if constexpr (K::kShift > 0) isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(asum, K::kShift));
  const __m256 da = _mm256_loadu_ps(a.da + b0);
  __m256 term = _mm256_mul_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(isum));
  if constexpr (K::kMin) {
    const __m256 mw = halves_to_f32_strided(reinterpret_cast<const uint8_t*>(&w[b0].m), sizeof(Block), count);
    term = _mm256_add_ps(term, _mm256_mul_ps(_mm256_mul_ps(mw, da), _mm256_cvtepi32_ps(asum)));
  }
  return term;
}

/// The contract's dot product of one weight row (nb blocks) with one prepared activation row:
/// blocks 8g .. 8g + 7 go to lane register g % 4.
template <class K>
float legacy_dot_row(int64_t nb, const void* w, const ActRow& a) {
  const auto* wb = static_cast<const typename K::Block*>(w);
  __m256 l0 = _mm256_setzero_ps(), l1 = l0, l2 = l0, l3 = l0;
  int64_t b0 = 0;
  for (; b0 + 32 <= nb; b0 += 32) {
    l0 = _mm256_add_ps(l0, legacy_terms<K, true>(wb, a, b0, 8));
    l1 = _mm256_add_ps(l1, legacy_terms<K, true>(wb, a, b0 + 8, 8));
    l2 = _mm256_add_ps(l2, legacy_terms<K, true>(wb, a, b0 + 16, 8));
    l3 = _mm256_add_ps(l3, legacy_terms<K, true>(wb, a, b0 + 24, 8));
  }
  // Fewer than 32 blocks left: up to three full groups, then a partial one.
  __m256* regs[4] = {&l0, &l1, &l2, &l3};
  int reg = 0;
  for (; b0 + 8 <= nb; b0 += 8, ++reg) *regs[reg] = _mm256_add_ps(*regs[reg], legacy_terms<K, true>(wb, a, b0, 8));
  if (b0 < nb) *regs[reg] = _mm256_add_ps(*regs[reg], legacy_terms<K, false>(wb, a, b0, static_cast<int>(nb - b0)));
  Lanes32 lanes;
  lanes.r[0] = l0;
  lanes.r[1] = l1;
  lanes.r[2] = l2;
  lanes.r[3] = l3;
  return lanes.fold();
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
