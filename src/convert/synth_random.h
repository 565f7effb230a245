// The counter-based generator of `minfer synth`: element i of a tensor is a pure function of
// (seed, tensor name, i), so any row can be made by any thread in any order and the file's
// bytes depend only on the seed. The mixing function is SplitMix64's output function (Steele,
// Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014; constants as
// published there and in Vigna's public-domain splitmix64.c).
#pragma once

#include <cstdint>
#include <string_view>

namespace minfer::convert {

/// SplitMix64's golden-ratio increment.
inline constexpr uint64_t kSplitMixGamma = 0x9E3779B97F4A7C15ull;

/// SplitMix64's output mixing function (a bijection of 64-bit values).
constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The i-th output (i >= 0) of a SplitMix64 stream whose state starts at `key`.
constexpr uint64_t counter_hash(uint64_t key, uint64_t i) {
  return splitmix64_mix(key + (i + 1) * kSplitMixGamma);
}

/// The stream key of one tensor: FNV-1a (64-bit) of its name, mixed with the seed.
constexpr uint64_t tensor_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;  // FNV prime
  }
  return splitmix64_mix(splitmix64_mix(seed) ^ h);
}

/// A value with mean 0 and standard deviation 1, close to normal: the sum of the four 16-bit
/// parts of `h` (an Irwin-Hall(4) variable: bounded by +-3.46, excess kurtosis -0.3), centred
/// and scaled. Each 16-bit part has variance (65536^2 - 1) / 12, so the sum has standard
/// deviation 65536 / sqrt(3) up to 1e-9 relative.
inline float normal_like(uint64_t h) {
  const uint32_t s = static_cast<uint32_t>(h & 0xffff) + static_cast<uint32_t>((h >> 16) & 0xffff) +
                     static_cast<uint32_t>((h >> 32) & 0xffff) + static_cast<uint32_t>(h >> 48);
  constexpr float kMean = 2.0f * 65535.0f;             // 4 * 65535 / 2
  constexpr float kInvStd = 1.7320508075688772f / 65536.0f;  // sqrt(3) / 65536
  return (static_cast<float>(s) - kMean) * kInvStd;
}

}  // namespace minfer::convert
