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

/// A processed next-token distribution: (token id, probability) pairs with probabilities > 0
/// summing to 1, most likely first (ties: lowest id first). Ids not listed have probability 0.
using TokenDistribution = std::vector<std::pair<int32_t, double>>;

class Sampler {
 public:
  explicit Sampler(const SamplerParams& params);

  /// Picks the next token from `logits` (n_vocab values, not modified). `history` is the
  /// tokens generated/seen so far in this sequence (for penalties).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);

  /// The distribution sample() draws from, after penalties, top-k, top-p, min-p and
  /// temperature: for temp <= 0 the one token sample() picks with probability 1. Speculative
  /// sampling compares these of target and draft (engine/speculative.h). Draws nothing.
  void distribution(std::span<const float> logits, std::span<const int32_t> history, TokenDistribution& out);
  /// One token drawn from `dist` (weights need not sum to 1; each must be >= 0) with this
  /// sampler's generator. Throws minfer::Error for an empty `dist`.
  int32_t draw(const TokenDistribution& dist);
  /// A uniform draw in [0, 1) from this sampler's generator.
  double uniform();
  /// True when sample() is an argmax (temp <= 0).
  bool greedy() const { return p_.temp <= 0.0f; }

  const SamplerParams& params() const { return p_; }

 private:
  /// Fills cand_[0..n) with the surviving candidates (most likely first) and w_[0..n) with their
  /// unnormalized weights at the temperature; returns n (>= 1). Greedy: n = 1, the argmax.
  size_t prepare(std::span<const float> logits, std::span<const int32_t> history);

  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  ///< scratch (logit/prob, id)
  std::vector<double> w_;                        ///< scratch: weights of cand_'s first n
};

}  // namespace minfer
