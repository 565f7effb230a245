// exp for softmax numerators: one definition of the arithmetic that every SIMD level follows
// bit for bit (the vector kernels in convert.h run the same IEEE single operations per lane).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace minfer::cpu::simd {

/// Constants of exp_softmax (Cody-Waite reduction t = n ln2 + r with ln2 split so that n * hi is
/// exact, then the degree-6 Taylor polynomial of e^r on |r| <= ln2 / 2).
struct ExpConst {
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693145751953125f;  // 0x3F317200: low 8 mantissa bits zero
  static constexpr float kLn2Lo = 1.42860676533018708e-06f;
  static constexpr float kMin = -87.33654f;  // below: e^t < FLT_MIN, returned as 0
  static constexpr float kMax = 88.0f;       // inputs above are clamped (softmax never has t > 0)
  static constexpr float kC2 = 1.0f / 2, kC3 = 1.0f / 6, kC4 = 1.0f / 24, kC5 = 1.0f / 120,
                         kC6 = 1.0f / 720;
};

/// e^t for softmax: relative error <= 2^-21 (kExpTol) for t in [-87.3, 88]; 0 for t < -87.33654
/// (including -inf, the masked cells) and for NaN. Not std::exp: a fixed sequence of single
/// roundings (multiply, round-to-nearest-even, fused multiply-adds) so the vector kernels of
/// every level give the same bits as this scalar one.
inline float exp_softmax(float t) {
  using C = ExpConst;
  if (!(t >= C::kMin)) return 0.0f;
  if (t > C::kMax) t = C::kMax;
  const float n = std::nearbyint(t * C::kLog2e);
  float r = std::fma(n, -C::kLn2Hi, t);
  r = std::fma(n, -C::kLn2Lo, r);
  float p = std::fma(C::kC6, r, C::kC5);
  p = std::fma(p, r, C::kC4);
  p = std::fma(p, r, C::kC3);
  p = std::fma(p, r, C::kC2);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  return p * scale;
}

/// Relative error bound of exp_softmax against the exact e^t (checked by the tests).
inline constexpr double kExpTol = 1.0 / (1 << 21);

}  // namespace minfer::cpu::simd
