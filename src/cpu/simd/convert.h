// Activation quantizers (Q8_0, Q8_1, Q8_K, F16, BF16) and bulk float helpers for the SIMD
// levels. Included only from *_avx2.cpp / *_avx512.cpp files (isa.h).
//
// The quantizers reproduce the reference bytes (quant_ref.h): the same f32 operations in the
// same order (d = amax / 127, id = 1 / d, q = round(x * id), ...), each a single rounded vector
// operation (no fused multiply-add; these files are compiled with -ffp-contract=off). A row the
// reference would reject (a NaN / infinite element, a half scale that would overflow) is handed
// to the reference quantizer, which throws its error.
#pragma once

#include <cmath>
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "cpu/simd/exp_ref.h"
#include "cpu/simd/isa.h"
#include "cpu/simd/levels.h"
#include "quant/blocks.h"
#include "quant/quant_ref.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {

/// True when one of the 8 floats is NaN or infinite (exponent all ones).
inline bool any_nonfinite(__m256 x) {
  const __m256i e = _mm256_set1_epi32(0x7F800000);
  const __m256i v = _mm256_and_si256(_mm256_castps_si256(x), e);
  return _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(v, e))) != 0;
}

inline __m256 abs_ps(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

inline float hmax_ps(__m256 x) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

/// NaN lanes to +0 (the reference rounding helpers map NaN to 0 before clamping).
inline __m256 nan_to_zero(__m256 v) { return _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q)); }

/// Round half away from zero (C roundf), clamped to [-127, 127], as int32: quant_detail
/// round_away_clamped(v, -127, 127).
inline __m256i round_away_127(__m256 v) {
  v = nan_to_zero(v);
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = abs_ps(_mm256_sub_ps(v, t));  // exact: |v| < 2^23
  const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
  const __m256 up = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one);
  return _mm256_cvttps_epi32(_mm256_add_ps(t, up));
}

/// Round half to even, clamped to [-128, 127], as int32: quant_detail round_even_clamped.
inline __m256i round_even_128(__m256 v) {
  v = nan_to_zero(v);
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f));
  return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/// Packs 32 int32 (4 registers, each in [-128, 127]) to 32 int8 in order.
inline __m256i pack_i32x32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);  // lanes: a0-3 b0-3 | a4-7 b4-7
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i abcd = _mm256_packs_epi16(ab, cd);  // a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7
  return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/// Q8_0 / Q8_1 rows (ref::quantize_row_q8_0 / q8_1).
template <bool kQ8_1>
void quantize_q8_legacy(const float* x, void* dst, int64_t k) {
  const int64_t nb = k / kQK;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQK;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    bool bad = false;
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(xb + 8 * j);
      bad |= any_nonfinite(v[j]);
      amax = _mm256_max_ps(amax, abs_ps(v[j]));
    }
    const float am = hmax_ps(amax);
    const float d = am / 127.0f;
    const uint16_t dh = fp32_to_fp16(d);
    if (bad || (dh & 0x7C00u) == 0x7C00u) {  // the reference names the element or the block
      if constexpr (kQ8_1) ref::quantize_row_q8_1(x, dst, k);
      else ref::quantize_row_q8_0(x, dst, k);
      return;
    }
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int j = 0; j < 4; ++j) q[j] = round_away_127(_mm256_mul_ps(v[j], idv));
    const __m256i q8 = pack_i32x32_to_i8(q[0], q[1], q[2], q[3]);
    if constexpr (kQ8_1) {
      auto* b = static_cast<block_q8_1*>(dst) + i;
      b->d = dh;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b->qs), q8);
      const int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
      b->s = fp32_to_fp16(static_cast<float>(sum) * d);
    } else {
      auto* b = static_cast<block_q8_0*>(dst) + i;
      b->d = dh;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b->qs), q8);
    }
  }
}

/// Q8_K rows (ref::quantize_row_q8_K).
inline void quantize_q8_K(const float* x, void* dst, int64_t k) {
  const int64_t nb = k / kQKK;
  for (int64_t i = 0; i < nb; ++i) {
    const float* xb = x + i * kQKK;
    auto* b = static_cast<block_q8_K*>(dst) + i;
    __m256 amax = _mm256_setzero_ps();
    bool bad = false;
    for (int j = 0; j < kQKK / 8; ++j) {
      const __m256 v = _mm256_loadu_ps(xb + 8 * j);
      bad |= any_nonfinite(v);
      amax = _mm256_max_ps(amax, abs_ps(v));
    }
    if (bad) {
      ref::quantize_row_q8_K(x, dst, k);
      return;
    }
    const float am = hmax_ps(amax);
    if (am == 0.0f) {
      b->d = 0.0f;
      std::memset(b->qs, 0, sizeof(b->qs));
      std::memset(b->bsums, 0, sizeof(b->bsums));
      continue;
    }
    // The first element whose magnitude is am.
    float xm = 0.0f;
    const __m256 amv = _mm256_set1_ps(am);
    for (int j = 0; j < kQKK / 8; ++j) {
      const int m = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(xb + 8 * j)), amv, _CMP_EQ_OQ));
      if (m != 0) {
        xm = xb[8 * j + __builtin_ctz(static_cast<unsigned>(m))];
        break;
      }
    }
    const float iscale = -127.0f / xm;
    const __m256 isv = _mm256_set1_ps(iscale);
    for (int j = 0; j < kQKK / 32; ++j) {
      __m256i q[4];
      for (int r = 0; r < 4; ++r) q[r] = round_even_128(_mm256_mul_ps(isv, _mm256_loadu_ps(xb + 32 * j + 8 * r)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b->qs + 32 * j), pack_i32x32_to_i8(q[0], q[1], q[2], q[3]));
      b->bsums[2 * j] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[0], q[1])));
      b->bsums[2 * j + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q[2], q[3])));
    }
    b->d = 1.0f / iscale;
  }
}

// ---- half / bfloat16 rows ------------------------------------------------------------------

/// f16 -> f32 with F16C, exact for every finite and infinite half; groups of 8 holding a NaN
/// go through fp16_to_fp32, which keeps signalling NaNs signalling (F16C quiets them).
inline void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = loadu128(src + i);
    const __m128i mag = _mm_and_si128(h, _mm_set1_epi16(0x7FFF));
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(mag, _mm_set1_epi16(0x7C00))) != 0) {
      for (int l = 0; l < 8; ++l) dst[i + l] = fp16_to_fp32(src[i + l]);
    } else {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
  }
  for (; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

/// f32 -> f16 with round to nearest even (VCVTPS2PH imm 0); NaN lanes go through fp32_to_fp16
/// so their payload bits match the reference.
inline void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (int l = 0; l < 8; ++l) dst[i + l] = fp32_to_fp16(src[i + l]);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
    }
  }
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

inline __m256 bf16x8_to_f32(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(p)), 16));
}

inline void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, bf16x8_to_f32(src + i));
  for (; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}

/// core/fp16.h fp32_to_bf16 on 8 lanes: x + 0x7FFF + ((x >> 16) & 1), NaN -> (x >> 16) | 0x40.
inline void f32_to_bf16_row(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  const __m256i one = _mm256_set1_epi32(1);
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)),
                         _mm256_and_si256(_mm256_srli_epi32(x, 16), one)),
        16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)),
                                              _mm256_set1_epi32(0x7F800000));
    const __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
    // 8 x u32 (each < 2^16) -> 8 x u16.
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}

inline void quantize_f16(const float* x, void* dst, int64_t k) {
  f32_to_f16_row(x, static_cast<uint16_t*>(dst), k);
}
inline void quantize_bf16(const float* x, void* dst, int64_t k) {
  f32_to_bf16_row(x, static_cast<uint16_t*>(dst), k);
}
inline void quantize_f32(const float* x, void* dst, int64_t k) {
  std::memcpy(dst, x, static_cast<size_t>(k) * sizeof(float));
}

// ---- attention decode (a few query rows against an f16 KV cache) -----------------------------

/// Folds 32 contract lanes held in four registers (lanes 0-7, 8-15, 16-23, 24-31) by halving,
/// step 3 of quant_ref.h's accumulation contract: lane[k] += lane[k + w] for w = 16, 8, 4, 2, 1.
inline float fold_lanes32(__m256 l0, __m256 l1, __m256 l2, __m256 l3) {
  l0 = _mm256_add_ps(l0, l2);  // w = 16
  l1 = _mm256_add_ps(l1, l3);
  l0 = _mm256_add_ps(l0, l1);  // w = 8
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(l0), _mm256_extractf128_ps(l0, 1));  // w = 4
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));                                          // w = 2
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));                                      // w = 1
  return _mm_cvtss_f32(x);
}

/// CpuKernels::attn_scores_f16 (kernels.h). F16C converts a half exactly, so each term is the
/// reference's float(k) * q; terms of 8 elements go to the register of lanes (t / 8) % 4.
inline void attn_scores_f16(int64_t hd, const uint16_t* k, int64_t k_stride, int64_t n, const float* q,
                            float* s) {
  if (hd % 8 != 0) {
    detail::attn_scores_f16_ref(hd, k, k_stride, n, q, s);
    return;
  }
  const int64_t full = hd / 32 * 32;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t* kr = k + i * k_stride;
    __m256 l0 = _mm256_setzero_ps(), l1 = l0, l2 = l0, l3 = l0;
    const auto term = [&](int64_t t) {
      return _mm256_mul_ps(_mm256_cvtph_ps(loadu128(kr + t)), _mm256_loadu_ps(q + t));
    };
    int64_t t = 0;
    for (; t < full; t += 32) {
      l0 = _mm256_add_ps(l0, term(t));
      l1 = _mm256_add_ps(l1, term(t + 8));
      l2 = _mm256_add_ps(l2, term(t + 16));
      l3 = _mm256_add_ps(l3, term(t + 24));
    }
    if (t < hd) l0 = _mm256_add_ps(l0, term(t));
    if (t + 8 < hd) l1 = _mm256_add_ps(l1, term(t + 8));
    if (t + 16 < hd) l2 = _mm256_add_ps(l2, term(t + 16));
    s[i] = fold_lanes32(l0, l1, l2, l3);
  }
}

/// CpuKernels::attn_pv_f16 (kernels.h): 32 accumulator rows of hd floats (lane = cell % 32),
/// each cell's row of V times its weight added to its lane's row, then the rows folded by halving.
inline void attn_pv_f16(int64_t hd, const uint16_t* v, int64_t v_stride, int64_t n, const float* p,
                        const uint8_t* use, float* o) {
  if (hd % 8 != 0) {
    detail::attn_pv_f16_ref(hd, v, v_stride, n, p, use, o);
    return;
  }
  thread_local std::vector<float> acc_buf;
  acc_buf.assign(static_cast<size_t>(32 * hd), 0.0f);
  float* acc = acc_buf.data();
  for (int64_t i = 0; i < n; ++i) {
    if (use != nullptr && use[i] == 0) continue;
    const uint16_t* vr = v + i * v_stride;
    float* a = acc + (i % 32) * hd;
    const __m256 pv = _mm256_set1_ps(p[i]);
    for (int64_t d = 0; d < hd; d += 8)
      _mm256_storeu_ps(a + d, _mm256_add_ps(_mm256_loadu_ps(a + d),
                                            _mm256_mul_ps(_mm256_cvtph_ps(loadu128(vr + d)), pv)));
  }
  for (int64_t w = 16; w >= 1; w /= 2)
    for (int64_t l = 0; l < w; ++l) {
      float* dst = acc + l * hd;
      const float* src = acc + (l + w) * hd;
      for (int64_t d = 0; d < hd; d += 8)
        _mm256_storeu_ps(dst + d, _mm256_add_ps(_mm256_loadu_ps(dst + d), _mm256_loadu_ps(src + d)));
    }
  std::memcpy(o, acc, static_cast<size_t>(hd) * sizeof(float));
}

/// exp_softmax (exp_ref.h) on 8 lanes: the same single-rounded operations in the same order.
inline __m256 exp_softmax_ps(__m256 t) {
  using C = ExpConst;
  const __m256 valid = _mm256_cmp_ps(t, _mm256_set1_ps(C::kMin), _CMP_GE_OQ);
  t = _mm256_min_ps(_mm256_max_ps(t, _mm256_set1_ps(C::kMin)), _mm256_set1_ps(C::kMax));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(t, _mm256_set1_ps(C::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-C::kLn2Hi), t);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-C::kLn2Lo), r);
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(C::kC6), r, _mm256_set1_ps(C::kC5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(C::kC4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(C::kC3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(C::kC2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), valid);
}

/// x[i] = exp_softmax(x[i] - shift) for i < n (the tail through a padded vector, so every
/// element takes the vector path).
inline void exp_shift(int64_t n, float* x, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, exp_softmax_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), s)));
  if (i < n) {
    float tail[8];
    for (int l = 0; l < 8; ++l) tail[l] = i + l < n ? x[i + l] : shift;
    _mm256_storeu_ps(tail, exp_softmax_ps(_mm256_sub_ps(_mm256_loadu_ps(tail), s)));
    for (int64_t l = 0; i + l < n; ++l) x[i + l] = tail[l];
  }
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
