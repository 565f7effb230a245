// Token sampling from logits. The chain follows what llama.cpp users know: repetition /
// presence / frequency penalties over the last `penalty_last_n` tokens, then top-k, top-p,
// min-p, temperature, and a seeded draw. temp <= 0 is greedy (argmax, ties to the lowest id).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace minfer {

struct SamplerParams {
  float temp = 0.8f;             ///< <= 0: greedy
  int32_t top_k = 40;            ///< <= 0: off
  float top_p = 0.95f;           ///< >= 1: off
  float min_p = 0.05f;           ///< <= 0: off; keeps tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;   ///< 1: off; divides positive logits / multiplies negative ones
  float presence_penalty = 0.0f; ///< subtracted once per distinct token in the window
  float frequency_penalty = 0.0f;///< subtracted per occurrence in the window
  int32_t penalty_last_n = 64;   ///< window of recent tokens the penalties look at (0: off)
  uint64_t seed = 0;             ///< draw seed (the CLI picks a random one when not given)
};

/// Throws minfer::Error naming the parameter when a value is out of range (negative
/// temperature is allowed and means greedy; top_p and min_p must be in [0, 1]; penalties finite).
void validate(const SamplerParams& p);

/// Index of the largest logit, lowest index on ties. n > 0.
int32_t argmax(std::span<const float> logits);

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);

  /// Picks the next token from `logits` (n_vocab values, not modified). `history` is the
  /// tokens generated/seen so far in this sequence (for penalties).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

  const SamplerParams& params() const { return p_; }

 private:
  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  ///< scratch (logit/prob, id)
};

}  // namespace minfer
