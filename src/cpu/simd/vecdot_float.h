// Dot products of the float weight types (F32 x F32, F16 x F16, BF16 x BF16) for the SIMD
// levels, in the contract's order (quant_ref.h): term t = float(w[t]) * float(a[t]), one
// rounded multiply, added to lane t % 32 (elements 32c + 8r .. 32c + 8r + 7 sit in register r),
// then the halving fold. Included only from *_avx2.cpp / *_avx512.cpp files (isa.h).
#pragma once

#include "core/fp16.h"
#include "cpu/simd/convert.h"
#include "cpu/simd/isa.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {

/// Load8(p, i) gives elements i .. i + 7 of a row as f32; Scalar(p, i) gives element i.
template <class T, class Load8, class Scalar>
float float_dot_row(int64_t n, const T* w, const T* a, Load8 load8, Scalar scalar) {
  Lanes32 lanes;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int r = 0; r < 4; ++r)
      lanes.r[r] = _mm256_add_ps(lanes.r[r], _mm256_mul_ps(load8(w, i + 8 * r), load8(a, i + 8 * r)));
  if (i < n) {
    alignas(32) float l[32];
    lanes.store(l);
    for (int t = 0; i < n; ++i, ++t) l[t] += scalar(w, i) * scalar(a, i);
    lanes.load(l);
  }
  return lanes.fold();
}

inline float dot_row_f32(int64_t n, const void* w, const void* a) {
  return float_dot_row(
      n, static_cast<const float*>(w), static_cast<const float*>(a),
      [](const float* p, int64_t i) { return _mm256_loadu_ps(p + i); },
      [](const float* p, int64_t i) { return p[i]; });
}
inline float dot_row_f16(int64_t n, const void* w, const void* a) {
  return float_dot_row(
      n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a),
      [](const uint16_t* p, int64_t i) { return _mm256_cvtph_ps(loadu128(p + i)); },
      [](const uint16_t* p, int64_t i) { return fp16_to_fp32(p[i]); });
}
inline float dot_row_bf16(int64_t n, const void* w, const void* a) {
  return float_dot_row(
      n, static_cast<const uint16_t*>(w), static_cast<const uint16_t*>(a),
      [](const uint16_t* p, int64_t i) { return bf16x8_to_f32(p + i); },
      [](const uint16_t* p, int64_t i) { return bf16_to_fp32(p[i]); });
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
