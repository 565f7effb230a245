// The sampler's fast selections against their plain definitions: argmax (the first index of the
// largest value, a NaN never winning unless it is at index 0) and the top-k candidates (a partial
// sort of every (logit, id) pair by logit descending, id ascending), on vocabularies with many
// ties, infinities and lengths that are not multiples of the 16-wide blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "sampling/sampler.h"

namespace minfer {
namespace {

int32_t argmax_definition(const std::vector<float>& x) {
  int32_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

/// Logits drawn from `levels` distinct values (ties everywhere), with some infinities.
std::vector<float> tied_logits(size_t n, int levels, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, levels - 1);
  std::vector<float> x(n);
  for (float& v : x) v = 0.25f * static_cast<float>(pick(rng)) - 3.0f;
  if (n > 7) x[7] = -std::numeric_limits<float>::infinity();
  return x;
}

TEST(SamplerSelect, ArgmaxIsTheFirstLargestLikeTheSerialDefinition) {
  for (const size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{1000}, size_t{152064}})
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      std::vector<float> x = tied_logits(n, seed % 2 ? 7 : 400, seed);
      EXPECT_EQ(argmax(x), argmax_definition(x)) << "n " << n << " seed " << seed;
      if (n > 20) {
        x[n / 2] = std::numeric_limits<float>::quiet_NaN();  // never wins
        x[n - 1] = std::numeric_limits<float>::infinity();   // the last index wins
        EXPECT_EQ(argmax(x), argmax_definition(x)) << "n " << n << " seed " << seed;
        EXPECT_EQ(argmax(x), static_cast<int32_t>(n - 1));
        x[0] = std::numeric_limits<float>::quiet_NaN();  // a NaN first stays the answer
        EXPECT_EQ(argmax(x), argmax_definition(x));
        EXPECT_EQ(argmax(x), 0);
      }
    }
  const std::vector<float> all_neg_inf(33, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(argmax(all_neg_inf), 0);
}

TEST(SamplerSelect, TopKCandidatesAreThoseOfAPartialSortOfEveryPair) {
  for (const size_t n : {size_t{50}, size_t{161}, size_t{4099}, size_t{152064}})
    for (const int32_t k : {1, 5, 40, 48})
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        const std::vector<float> x = tied_logits(n, seed == 1 ? 5 : 900, seed + 10 * static_cast<uint32_t>(k));
        SamplerParams p;
        p.temp = 0.7f;
        p.top_k = k;
        p.top_p = 1.0f;
        p.min_p = 0.0f;
        Sampler s(p);
        TokenDistribution got;
        s.distribution(x, {}, got);
        // The definition: sort every pair, keep k, weights exp((l - max) / temp), normalized.
        std::vector<std::pair<float, int32_t>> all;
        for (size_t i = 0; i < n; ++i) all.emplace_back(x[i], static_cast<int32_t>(i));
        std::partial_sort(all.begin(), all.begin() + k, all.end(), [](const auto& a, const auto& b) {
          return a.first > b.first || (a.first == b.first && a.second < b.second);
        });
        ASSERT_EQ(got.size(), static_cast<size_t>(k)) << "n " << n << " k " << k;
        double total = 0.0;
        std::vector<double> w(static_cast<size_t>(k));
        for (int32_t i = 0; i < k; ++i)
          total += w[static_cast<size_t>(i)] =
              std::exp(static_cast<double>(all[static_cast<size_t>(i)].first - all[0].first) / static_cast<double>(p.temp));
        for (int32_t i = 0; i < k; ++i) {
          EXPECT_EQ(got[static_cast<size_t>(i)].first, all[static_cast<size_t>(i)].second) << "n " << n << " k " << k << " rank " << i;
          EXPECT_EQ(got[static_cast<size_t>(i)].second, w[static_cast<size_t>(i)] / total) << "n " << n << " k " << k << " rank " << i;
        }
      }
}

// With penalties the blocks cannot be skipped by their raw logits: the penalized top k is still
// the definition's (here a repeated token's positive logit is divided by the penalty).
TEST(SamplerSelect, TopKWithPenaltiesUsesThePenalizedLogits) {
  std::vector<float> x = tied_logits(3000, 900, 77);
  x[100] = 1000.0f;  // the largest, then penalized (to 10) below the others
  SamplerParams p;
  p.temp = 1.0f;
  p.top_k = 3;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 100.0f;
  Sampler s(p);
  TokenDistribution got;
  const std::vector<int32_t> history = {100};
  s.distribution(x, history, got);
  ASSERT_EQ(got.size(), 3u);
  for (const auto& [id, prob] : got) EXPECT_NE(id, 100);
  p.repeat_penalty = 1.0f;
  Sampler plain(p);
  plain.distribution(x, history, got);
  EXPECT_EQ(got.front().first, 100);
}

}  // namespace
}  // namespace minfer
