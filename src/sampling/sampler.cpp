#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
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
  // The first index of the largest value: the largest value first, over 16 independent lanes
  // (vectorizable; a serial compare-and-index loop took ~0.5 ms for a 152k vocabulary, and a
  // server samples one row per slot every step), then its first occurrence. The same answer as
  // "keep i while logits[i] > logits[best]": NaNs never win, and a NaN at 0 stays the answer.
  const size_t n = logits.size();
  const float* x = logits.data();
  if (std::isnan(x[0])) return 0;
  constexpr size_t kLanes = 16;
  float lane[kLanes];
  for (float& v : lane) v = x[0];
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  float best = x[0];
  for (const float v : lane) best = v > best ? v : best;
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  for (size_t k = 0; k < n; ++k)
    if (x[k] == best) return static_cast<int32_t>(k);
  return 0;
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

  const auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t n = logits.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    // The top k through a bounded heap whose front is its worst member (by_logit order): the
    // same k candidates in the same order as a partial sort of all of them, without building
    // and sorting a pair per vocabulary entry (~0.3 ms a row at 152k). Ids arrive in increasing
    // order, so an equal logit never displaces a member: the lower id wins ties, as before.
    const auto k = static_cast<size_t>(p_.top_k);
    cand_.clear();
    cand_.reserve(k);
    float floor = -std::numeric_limits<float>::infinity();  // the full heap's worst logit
    const auto offer = [&](size_t i) {
      const float l = penalize ? penalized(static_cast<int32_t>(i), logits[i]) : logits[i];
      if (cand_.size() == k && !(l > floor)) return;  // an equal logit of a higher id never enters
      const std::pair<float, int32_t> c{l, static_cast<int32_t>(i)};
      if (cand_.size() < k) {
        cand_.push_back(c);
        std::push_heap(cand_.begin(), cand_.end(), by_logit);
      } else {
        std::pop_heap(cand_.begin(), cand_.end(), by_logit);
        cand_.back() = c;
        std::push_heap(cand_.begin(), cand_.end(), by_logit);
      }
      if (cand_.size() == k) floor = cand_.front().first;
    };
    // Blocks of 16 whose largest logit does not beat the floor are skipped whole (the largest
    // found with a vectorizable loop); penalties change logits one by one, so then no skipping.
    constexpr size_t kBlock = 16;
    size_t i = 0;
    for (; i + kBlock <= n; i += kBlock) {
      if (!penalize && cand_.size() == k) {
        float bm = logits[i];
        for (size_t j = 1; j < kBlock; ++j) bm = logits[i + j] > bm ? logits[i + j] : bm;
        if (!(bm > floor) && !std::isnan(bm)) continue;
      }
      for (size_t j = 0; j < kBlock; ++j) offer(i + j);
    }
    for (; i < n; ++i) offer(i);
    std::sort_heap(cand_.begin(), cand_.end(), by_logit);
    n = k;
  } else {
    cand_.resize(n);
    for (size_t i = 0; i < n; ++i) cand_[i] = {penalized(static_cast<int32_t>(i), logits[i]), static_cast<int32_t>(i)};
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
