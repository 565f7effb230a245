// IEEE half (binary16) and bfloat16 conversions, bit-exact and portable (no F16C needed).
// fp16 -> f32 is exact; f32 -> fp16 rounds to nearest even with IEEE overflow to inf and
// subnormal handling; bf16 <-> f32 rounds to nearest even and keeps NaN quiet (ADR: bf16 is a
// round-to-nearest-even cast). These are the reference conversions; SIMD kernels must agree.
#pragma once

#include <bit>
#include <cstdint>

namespace minfer {

/// Half precision -> float, exact for every input (NaN payloads kept).
inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3FFu) << 13;
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | mant << 13;
  } else {
    bits = sign | (exp + (127 - 15)) << 23 | mant << 13;
  }
  return std::bit_cast<float>(bits);
}

/// Float -> half, round to nearest even; overflow gives +-inf; NaN stays NaN (quiet).
inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x1FFu));
  if (abs >= 0x477FF000u) {  // >= 65520 rounds to inf (and inf itself)
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // in [14, 24]
    uint32_t half = m >> (shift - 1 + 0);
    // half now has one extra bit for rounding at position 0.
    const uint32_t rem_mask = (1u << (shift - 1)) - 1u;
    const bool sticky = (m & rem_mask) != 0;
    const uint32_t round_bit = half & 1u;
    half >>= 1;
    if (round_bit && (sticky || (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  // normal
  uint32_t h = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: fine
  return static_cast<uint16_t>(sign | h);
}

/// bfloat16 -> float, exact.
inline float bf16_to_fp32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

/// Float -> bfloat16, round to nearest even; NaN becomes a quiet NaN with the same sign.
inline uint16_t fp32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace minfer
