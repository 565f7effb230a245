// Float -> integer conversions used by the reference quantizers, each with the exact rounding
// rule of ggml's reference quantizer for the type that uses it (ggml-quants.c), and each defined
// for every float input: a NaN or out-of-range value is clamped instead of being cast (a cast of
// NaN or of an out-of-range float to an integer is undefined behaviour in C++).
// Internal to src/quant.
#pragma once

#include <bit>
#include <cstdint>

namespace minfer::quant_detail {

/// Truncation toward zero of `t`, clamped to [lo, hi] first; NaN gives `lo`.
/// (ggml's legacy quantizers write `(int8_t)(x + 8.5f)`: the float sum, then truncation.)
inline int trunc_clamped(float t, int lo, int hi) {
  if (!(t > static_cast<float>(lo))) return lo;  // also NaN
  if (t >= static_cast<float>(hi)) return hi;
  return static_cast<int>(t);
}

/// Round to nearest, ties away from zero (C `roundf`), clamped to [lo, hi]; NaN gives 0 clamped.
/// Used by Q8_0 / Q8_1 (ggml quantize_row_q8_0_ref uses roundf).
inline int round_away_clamped(float t, int lo, int hi) {
  if (t != t) t = 0.0f;
  if (t <= static_cast<float>(lo)) return lo;
  if (t >= static_cast<float>(hi)) return hi;
  const float a = t < 0.0f ? -t : t;
  int i = static_cast<int>(a);                   // |t| < 2^31 here
  if (a - static_cast<float>(i) >= 0.5f) ++i;    // a - i is exact: i <= a < i + 1, a < 2^24
  return t < 0.0f ? -i : i;
}

/// Round to nearest, ties to even (ggml nearest_int: adding 1.5 * 2^23 and reading the
/// mantissa), clamped to [lo, hi]; NaN gives 0 clamped. Used by Q8_K and the K-quant searches.
inline int round_even_clamped(float t, int lo, int hi) {
  if (t != t) t = 0.0f;
  if (t <= static_cast<float>(lo)) return lo;
  if (t >= static_cast<float>(hi)) return hi;
  // |t| < 2^22 here: adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits.
  const float shifted = t + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(shifted) & 0x7FFFFFu) - 0x400000;
}

}  // namespace minfer::quant_detail
