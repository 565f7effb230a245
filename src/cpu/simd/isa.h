// Helpers shared by the SIMD kernels. Included only from files compiled with the AVX2 flags
// (*_avx2.cpp) or the AVX-512 flags (*_avx512.cpp); everything is placed in the namespace
// MINFER_SIMD_NS (avx2 or avx512), so the two compilations never share a symbol (no ODR clash
// between code built for different instruction sets).
//
// Integer dot helpers take an unsigned 8-bit operand `u` and a signed 8-bit operand `s` (the
// VPDPBUSD / VPMADDUBSW convention). On the avx512 level they are exact for every input; on the
// avx2 level they go through VPMADDUBSW, whose 16-bit pair sums saturate, so each caller states
// why its operands cannot reach that (|u0*s0 + u1*s1| <= 32767).
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "cpu/simd/isa.h is only for files compiled with the AVX2 (or AVX-512) flags"
#endif

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512VNNI__)
#define MINFER_SIMD_AVX512 1
#define MINFER_SIMD_NS avx512
#else
#define MINFER_SIMD_AVX512 0
#define MINFER_SIMD_NS avx2
#endif

namespace minfer::cpu::simd::MINFER_SIMD_NS {

/// 4 bytes at `p` as an int32 (unaligned, no aliasing issue).
inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint16_t load_u16(const void* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

/// acc + sum of the 4 products u*s in each 32-bit lane (u unsigned, s signed bytes).
/// avx2: exact while no adjacent pair u0*s0 + u1*s1 leaves int16 (caller's precondition).
inline __m256i dot4(__m256i acc, __m256i u, __m256i s) {
#if MINFER_SIMD_AVX512
  return _mm256_dpbusd_epi32(acc, u, s);
#else
  const __m256i pairs = _mm256_maddubs_epi16(u, s);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}

/// acc + sum of the 2 products x*y of 16-bit lanes in each 32-bit lane (exact: VPMADDWD only
/// overflows for x0 = y0 = x1 = y1 = -32768, which no caller passes).
inline __m256i dot2_i16(__m256i acc, __m256i x, __m256i y) {
#if MINFER_SIMD_AVX512
  return _mm256_dpwssd_epi32(acc, x, y);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(x, y));
#endif
}

/// Sum of the 8 int32 lanes (exact, wrapping like int32 addition).
inline int32_t hsum_i32(__m256i v) {
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4E));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xB1));
  return _mm_cvtsi128_si32(x);
}

/// Lane i of the result is the sum of the 8 lanes of p[i] (exact int32, wrapping).
inline __m256i reduce8(const __m256i p[8]) {
  // Each 128-bit half: pair sums, then sums of four; the halves are joined at the end.
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]);
  const __m256i h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]);
  const __m256i h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i q0 = _mm256_hadd_epi32(h01, h23);  // (p0..p3 low-half sums | p0..p3 high-half sums)
  const __m256i q1 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20),
                          _mm256_permute2x128_si256(q0, q1, 0x31));
}

/// p[i] holds 4 partial sums of block 2i in its low 128 bits and 4 of block 2i+1 in its high
/// 128 bits; lane b of the result is the sum of block b's partials (exact int32, wrapping).
inline __m256i reduce_pairs4(const __m256i p[4]) {
  const __m256i h1 = _mm256_hadd_epi32(p[0], p[1]);  // b0 b0 b2 b2 | b1 b1 b3 b3
  const __m256i h2 = _mm256_hadd_epi32(p[2], p[3]);  // b4 b4 b6 b6 | b5 b5 b7 b7
  const __m256i h = _mm256_hadd_epi32(h1, h2);       // b0 b2 b4 b6 | b1 b3 b5 b7
  return _mm256_permutevar8x32_epi32(h, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/// The 32 f32 lanes of the accumulation contract (quant_ref.h) held in 4 registers, lane l in
/// register l / 8; fold() is the contract's halving fold.
struct Lanes32 {
  __m256 r[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};

  float fold() const {
    // w = 16: lane k += lane k + 16; w = 8: lane k += lane k + 8.
    const __m256 a = _mm256_add_ps(_mm256_add_ps(r[0], r[2]), _mm256_add_ps(r[1], r[3]));
    // w = 4, 2, 1 within one register.
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
  }
  /// Adds 32 scalar lanes stored in memory (tail handling) into this set, lane by lane.
  void store(float out[32]) const {
    for (int i = 0; i < 4; ++i) _mm256_storeu_ps(out + 8 * i, r[i]);
  }
  void load(const float in[32]) {
    for (int i = 0; i < 4; ++i) r[i] = _mm256_loadu_ps(in + 8 * i);
  }
};

/// The first `count` (<= 8) of 8 halves (uint16 bit patterns) at `p`, `stride` bytes apart,
/// converted to f32; lanes from `count` on are +0.0. Assembled in general-purpose registers
/// (cheaper than a gather on the CPUs measured).
inline __m256 halves_to_f32_strided(const uint8_t* p, size_t stride, int count = 8) {
  uint64_t q[2] = {0, 0};
  for (int i = 0; i < 8; ++i)
    if (i < count) q[i / 4] |= static_cast<uint64_t>(load_u16(p + static_cast<size_t>(i) * stride)) << (16 * (i % 4));
  return _mm256_cvtph_ps(_mm_set_epi64x(static_cast<int64_t>(q[1]), static_cast<int64_t>(q[0])));
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
