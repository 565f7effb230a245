#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "core/error.h"

namespace minfer {

void validate(const SamplerParams& p) {
  if (!std::isfinite(p.temp)) fail("sampling: temperature {} is not finite", p.temp);
  if (!(p.top_p >= 0.0f && p.top_p <= 1.0f)) fail("sampling: top-p {} is not in [0, 1]", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) fail("sampling: min-p {} is not in [0, 1]", p.min_p);
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
    fail("sampling: repeat penalty {} must be positive", p.repeat_penalty);
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty))
    fail("sampling: presence/frequency penalties must be finite");
  if (p.penalty_last_n < 0) fail("sampling: penalty window {} is negative", p.penalty_last_n);
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

Sampler::Sampler(const SamplerParams& params) : p_(params), rng_(params.seed) { validate(p_); }

size_t Sampler::prepare(std::span<const float> logits, std::span<const int32_t> history) {
  if (logits.empty()) fail("sampling: no logits");
  const bool penalize = p_.penalty_last_n > 0 &&
                        (p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f);
  std::unordered_map<int32_t, int> counts;
  if (penalize) {
    const size_t n = std::min(history.size(), static_cast<size_t>(p_.penalty_last_n));
    for (size_t i = history.size() - n; i < history.size(); ++i) counts[history[i]]++;
  }
  const auto penalized = [&](int32_t id, float l) {
    if (!penalize) return l;
    auto it = counts.find(id);
    if (it == counts.end()) return l;
    l = l > 0.0f ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    return l - static_cast<float>(it->second) * p_.frequency_penalty - p_.presence_penalty;
  };

  if (p_.temp <= 0.0f) {
    int32_t best = 0;
    if (!penalize) {
      best = argmax(logits);
    } else {
      float best_l = penalized(0, logits[0]);
      for (size_t i = 1; i < logits.size(); ++i) {
        const float l = penalized(static_cast<int32_t>(i), logits[i]);
        if (l > best_l) {
          best_l = l;
          best = static_cast<int32_t>(i);
        }
      }
    }
    cand_.assign(1, {0.0f, best});
    w_.assign(1, 1.0);
    return 1;
  }

  cand_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cand_[i] = {penalized(static_cast<int32_t>(i), logits[i]), static_cast<int32_t>(i)};
  const auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t n = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    n = static_cast<size_t>(p_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Softmax at temperature 1 for the top-p / min-p filters (llama.cpp applies temperature last).
  const float mx = cand_[0].first;
  std::vector<double> prob(n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp(static_cast<double>(cand_[i].first - mx));
  for (double& q : prob) q /= sum;
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += prob[i];
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = std::max<size_t>(1, keep);
  }
  if (p_.min_p > 0.0f) {
    const double floor = p_.min_p * prob[0];
    size_t keep = 1;
    while (keep < n && prob[keep] >= floor) ++keep;
    n = keep;
  }
  // Temperature.
  w_.resize(n);
  for (size_t i = 0; i < n; ++i) w_[i] = std::exp(static_cast<double>(cand_[i].first - mx) / static_cast<double>(p_.temp));
  return n;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  const size_t n = prepare(logits, history);
  if (p_.temp <= 0.0f) return cand_[0].second;
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += w_[i];
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= w_[i];
    if (r < 0.0) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

void Sampler::distribution(std::span<const float> logits, std::span<const int32_t> history, TokenDistribution& out) {
  const size_t n = prepare(logits, history);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += w_[i];
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = {cand_[i].second, w_[i] / total};
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

int32_t Sampler::draw(const TokenDistribution& dist) {
  if (dist.empty()) fail("sampling: empty distribution");
  double total = 0.0;
  for (const auto& [id, p] : dist) total += p;
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (const auto& [id, p] : dist) {
    r -= p;
    if (r < 0.0) return id;
  }
  return dist.back().first;
}

}  // namespace minfer
