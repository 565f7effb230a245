// Speculative decoding with the target on the CUDA backend: the k-token forwards a verify runs
// (at most Engine::exact_step_tokens = 8 tokens each) give each token the logits of its one-token
// step bit for bit, and greedy output with a draft model (every draft length 1..16) or prompt
// lookup is the target's own greedy output, token for token, on five code prompts x 128 tokens.
//
// Models: the trained pair of ../shared/models (target minfer-demo-py, draft minfer-draft-py,
// Q8_0). $MINFER_SPEC_TARGET and $MINFER_SPEC_DRAFT name other files of the same pair (the
// device machine gets the repository's Q6_K demo model and a Q4_0 requantized draft, which fit
// its transfer limit). Skips without a device, and without the models outside CI.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "../speculative_test_util.h"
#include "../test_util.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "models/model.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

using test::fixed_draft;
using test::greedy_tokens;
using test::kCodePrompts;
constexpr const char* kTarget = test::kSpecTarget;
constexpr const char* kDraft = test::kSpecDraft;

/// $env when set, else the shared file `rel`.
std::string model_path(const char* env, const char* rel) {
  if (const char* p = std::getenv(env); p && *p) return p;
  return test::shared_path(rel).string();
}

class CudaSpeculative : public ::testing::Test {
 protected:
  void SetUp() override {
    MINFER_REQUIRE_CUDA();
    const std::string t = model_path("MINFER_SPEC_TARGET", kTarget), d = model_path("MINFER_SPEC_DRAFT", kDraft);
    if (!std::filesystem::exists(t) || !std::filesystem::exists(d)) {
      MINFER_REQUIRE_SHARED(kTarget);
      MINFER_REQUIRE_SHARED(kDraft);
    }
    if (!target_model_) {
      target_model_ = Model::load(t);
      draft_model_ = Model::load(d);
    }
    EngineConfig cfg;
    cfg.device = graph::BackendKind::Cuda;
    cfg.n_threads = 2;
    cfg.n_ctx = 512;
    target_ = std::make_unique<Engine>(target_model_, cfg);
    draft_ = std::make_unique<Engine>(draft_model_, cfg);
  }
  static void TearDownTestSuite() {
    target_model_.reset();
    draft_model_.reset();
  }

  std::vector<int32_t> encode(const char* text) const {
    return target_model_->tokenizer()->encode(text, /*add_special=*/true, /*parse_special=*/false);
  }

  static std::shared_ptr<const Model> target_model_, draft_model_;
  std::unique_ptr<Engine> target_, draft_;
};
std::shared_ptr<const Model> CudaSpeculative::target_model_, CudaSpeculative::draft_model_;

// A forward of n tokens (n = 1 .. exact_step_tokens) gives each token the logits of its one-token
// step, bit for bit: what greedy identity rests on. Forwards of more tokens take the prefill
// kernels; their largest difference is printed, not asserted (verification never runs them).
TEST_F(CudaSpeculative, ForwardsUpToTheExactStepEqualOneTokenStepsBitwise) {
  Engine& e = *target_;
  const int64_t exact = e.exact_step_tokens();
  ASSERT_EQ(exact, 8);
  const std::vector<int32_t> prompt = encode(kCodePrompts[0]);
  const std::vector<int32_t> next = {28, 284, 4711, 1124, 262, 470, 5144, 13, 220, 17, 11, 25, 198, 262, 671, 2};
  const auto row = static_cast<size_t>(e.n_vocab());
  e.reset();
  e.decode(prompt);
  std::vector<float> steps;
  for (const int32_t t : next) {
    const int32_t one[1] = {t};
    const std::vector<float> l = e.decode(one);
    steps.insert(steps.end(), l.begin(), l.end());
  }
  for (size_t n = 2; n <= next.size(); ++n) {
    e.truncate(static_cast<int32_t>(prompt.size()));
    const std::vector<float> batched = e.decode(std::span(next).first(n), /*all_logits=*/true);
    ASSERT_EQ(batched.size(), n * row);
    double max_d = 0.0;
    for (size_t i = 0; i < n * row; ++i) max_d = std::max(max_d, std::fabs(double(batched[i]) - double(steps[i])));
    if (static_cast<int64_t>(n) <= exact) {
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(std::memcmp(steps.data() + i * row, batched.data() + i * row, row * sizeof(float)), 0)
            << "logits of token " << i << " of a " << n << "-token forward differ from its one-token step";
    } else {
      std::printf("[ info ] %zu-token forward (prefill kernels): max |logit d| vs one-token steps %.3g\n", n, max_d);
    }
  }
}

// Every draft length 1..16 (fixed, p-min off) and prompt lookup on five prompts x 128 tokens.
TEST_F(CudaSpeculative, GreedyDraftAndLookupEqualTargetGreedyForEveryDraftLength) {
  const auto t0 = std::chrono::steady_clock::now();
  Session session(*target_, *target_model_->tokenizer());
  int64_t drafted = 0, accepted = 0, lookup_drafted = 0;
  for (const char* text : kCodePrompts) {
    const std::vector<int32_t> prompt = encode(text);
    GenerateStats plain;
    const std::vector<int32_t> want = greedy_tokens(session, prompt, 128, nullptr, &plain);
    ASSERT_EQ(want.size(), 128u);
    for (int32_t k = 0; k <= 16; ++k) {  // 0: the adaptive default
      SpeculativeParams p = k > 0 ? fixed_draft(k) : SpeculativeParams{};
      Speculator spec(*draft_, draft_model_->tokenizer()->n_vocab(), p, SamplerParams{}, 0.5);
      GenerateStats st;
      EXPECT_EQ(greedy_tokens(session, prompt, 128, &spec, &st), want) << text << "draft length " << k << " (0: adaptive)";
      EXPECT_EQ(st.generated_tokens, 128);
      drafted += st.drafted;
      accepted += st.accepted;
    }
    for (const int32_t k : {4, 16}) {
      SpeculativeParams p = fixed_draft(k);
      p.lookup_n = 2;
      Speculator spec(p, SamplerParams{});
      GenerateStats st;
      EXPECT_EQ(greedy_tokens(session, prompt, 128, &spec, &st), want) << text << "lookup, draft length " << k;
      lookup_drafted += st.drafted;
    }
  }
  EXPECT_GT(accepted, 0) << "the draft never agreed with the target: the pair is not being exercised";
  EXPECT_LT(accepted, drafted);
  EXPECT_GT(lookup_drafted, 0);
  std::printf("[ info ] drafted %lld, accepted %lld (%.1f%%); 5 prompts x 128 tokens x 19 configurations: %.1f s\n",
              static_cast<long long>(drafted), static_cast<long long>(accepted),
              100.0 * static_cast<double>(accepted) / static_cast<double>(std::max<int64_t>(drafted, 1)),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// The draft on the CPU and the target on CUDA (--device-draft cpu): the same greedy output.
TEST_F(CudaSpeculative, DraftOnTheCpuTargetOnCudaKeepsGreedyIdentity) {
  EngineConfig cfg;
  cfg.n_threads = 2;
  cfg.n_ctx = 512;
  Engine cpu_draft(draft_model_, cfg);
  Session session(*target_, *target_model_->tokenizer());
  const std::vector<int32_t> prompt = encode(kCodePrompts[1]);
  GenerateStats plain;
  const std::vector<int32_t> want = greedy_tokens(session, prompt, 128, nullptr, &plain);
  for (const int32_t k : {3, 12}) {
    Speculator spec(cpu_draft, draft_model_->tokenizer()->n_vocab(), fixed_draft(k), SamplerParams{}, 0.5);
    GenerateStats st;
    EXPECT_EQ(greedy_tokens(session, prompt, 128, &spec, &st), want) << "draft length " << k;
  }
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
