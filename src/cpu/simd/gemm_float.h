// Register-blocked tiles of the float weight types (F32 x F32, F16 x F16, BF16 x BF16) for the
// avx512 level: 4 weight rows x 2 tokens per tile, each (row, token) pair keeping the 32 lanes of
// the contract (quant_ref.h) in two ZMM registers (elements 32c .. 32c + 15 in the first, 32c + 16
// .. 32c + 31 in the second), so every load of a weight row is used for 2 tokens and every load of
// a token for 4 rows. Term = w * a (one rounded multiply, then a rounded add: no FMA). Elements
// past the last multiple of 32 are added in scalar code, then the halving fold. Included only from
// *_avx512.cpp files.
#pragma once

#include <algorithm>
#include <cstring>

#include "core/fp16.h"
#include "cpu/simd/isa.h"

#if MINFER_SIMD_AVX512

namespace minfer::cpu::simd::MINFER_SIMD_NS {

struct F16Row {
  using T = uint16_t;
  static __m512 load16(const T* p) { return _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xFFFF), loadu256(p)); }
  static float at(const T* p, int64_t i) { return fp16_to_fp32(p[i]); }
};
struct BF16Row {
  using T = uint16_t;
  // Widening and shift as GCC vector operations (GCC 12's _mm512_cvtepu16_epi32 and
  // _mm512_slli_epi32 trip -Wmaybe-uninitialized).
  static __m512 load16(const T* p) {
    __v16hu h;
    std::memcpy(&h, p, sizeof(h));
    return reinterpret_cast<__m512>(__builtin_convertvector(h, __v16su) << 16);
  }
  static float at(const T* p, int64_t i) { return bf16_to_fp32(p[i]); }
};
struct F32Row {
  using T = float;
  static __m512 load16(const T* p) { return _mm512_loadu_ps(p); }
  static float at(const T* p, int64_t i) { return p[i]; }
};

/// The contract's fold of 32 lanes held as (lo = lanes 0..15, hi = lanes 16..31).
inline float fold32(__m512 lo, __m512 hi) {
  const __m512 s16 = _mm512_add_ps(lo, hi);  // w = 16
  // The two 8-lane halves by plain shuffles (GCC 12's _mm512_castps512_ps256 and
  // _mm512_extract* trip -Wuninitialized).
  const __m256 lo8 = __builtin_shufflevector(s16, s16, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 hi8 = __builtin_shufflevector(s16, s16, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m256 s8 = _mm256_add_ps(lo8, hi8);  // w = 8
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // w = 4
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));                                          // w = 2
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));                                      // w = 1
  return _mm_cvtss_f32(x);
}

/// out[j + t * out_stride] for rows w[0 .. R), tokens a[0 .. S) (R <= 4, S <= 2), k elements.
template <class L, int R, int S>
void float_tile(int64_t k, const typename L::T* const* w, const typename L::T* const* a, float* out, int64_t out_stride) {
  __m512 acc[R][S][2];
  for (int r = 0; r < R; ++r)
    for (int s = 0; s < S; ++s) acc[r][s][0] = acc[r][s][1] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m512 av[S];
#pragma GCC unroll 2
      for (int s = 0; s < S; ++s) av[s] = L::load16(a[s] + i + 16 * h);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 wv = L::load16(w[r] + i + 16 * h);
#pragma GCC unroll 2
        for (int s = 0; s < S; ++s) acc[r][s][h] = _mm512_add_ps(acc[r][s][h], _mm512_mul_ps(wv, av[s]));
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int s = 0; s < S; ++s) {
      __m512 lo = acc[r][s][0], hi = acc[r][s][1];
      if (i < k) {
        alignas(64) float lane[32];
        _mm512_store_ps(lane, lo);
        _mm512_store_ps(lane + 16, hi);
        for (int64_t e = i; e < k; ++e) lane[e - i] += L::at(w[r], e) * L::at(a[s], e);
        lo = _mm512_load_ps(lane);
        hi = _mm512_load_ps(lane + 16);
      }
      out[r + s * out_stride] = fold32(lo, hi);
    }
}

/// Whole gemm for a float type (arguments of GemmTileFn, checked): tiles of 4 rows x 2 tokens.
template <class L>
void float_gemm(int64_t k, const void* w, size_t w_row_bytes, int64_t nr, const void* a, size_t a_row_bytes,
                int64_t nc, float* out, int64_t out_stride) {
  using T = typename L::T;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  auto wrow = [&](int64_t j) { return reinterpret_cast<const T*>(wb + static_cast<size_t>(j) * w_row_bytes); };
  auto arow = [&](int64_t t) { return reinterpret_cast<const T*>(ab + static_cast<size_t>(t) * a_row_bytes); };
  for (int64_t t = 0; t < nc; t += 2) {
    const int s = nc - t >= 2 ? 2 : 1;
    const T* ap[2] = {arow(t), arow(t + s - 1)};
    for (int64_t j = 0; j < nr; j += 4) {
      const int r = static_cast<int>(std::min<int64_t>(4, nr - j));
      const T* wp[4] = {wrow(j), wrow(j + std::min(1, r - 1)), wrow(j + std::min(2, r - 1)), wrow(j + std::min(3, r - 1))};
      float* o = out + j + t * out_stride;
      if (s == 2) {
        switch (r) {
          case 4: float_tile<L, 4, 2>(k, wp, ap, o, out_stride); break;
          case 3: float_tile<L, 3, 2>(k, wp, ap, o, out_stride); break;
          case 2: float_tile<L, 2, 2>(k, wp, ap, o, out_stride); break;
          default: float_tile<L, 1, 2>(k, wp, ap, o, out_stride); break;
        }
      } else {
        switch (r) {
          case 4: float_tile<L, 4, 1>(k, wp, ap, o, out_stride); break;
          case 3: float_tile<L, 3, 1>(k, wp, ap, o, out_stride); break;
          case 2: float_tile<L, 2, 1>(k, wp, ap, o, out_stride); break;
          default: float_tile<L, 1, 1>(k, wp, ap, o, out_stride); break;
        }
      }
    }
  }
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS

#endif  // MINFER_SIMD_AVX512
