// Parity of the CPU engine with llama.cpp's reference logits on the tiny fixture models (Qwen2,
// Qwen3, and the llama architecture: Llama-3 and Mistral shapes)
// (../shared/fixtures/models/README.md): top-1 agreement where the reference margin is clear,
// top-20 logits and the last-position logits within the "ggml-mimicking" tolerance class (we
// quantize activations the way ggml-cpu does), and all 32 steps of the greedy continuation
// (teacher-forced; free-running greedy up to the first near-tie).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "models/model.h"
#include "sampling/sampler.h"
#include "test_util.h"

namespace minfer {
namespace {

using nlohmann::json;

// Tolerance class "ggml-mimicking" (fixture README): top-1 must agree where the reference
// top-1/top-2 margin exceeds 0.5; top-20 max |d| <= 0.5; last-position RMS <= 0.15.
// These bounds were measured on the Qwen fixtures, whose logits have a std of about 6 (the
// README's "logit std of about 6"); a rounding flip of one activation block moves a logit by a
// share of that spread, so for a fixture with wider logits (the llama ones: std ~17, embeddings
// drawn with std 2) both bounds scale by reference std / kFixtureLogitStd, never below 1x.
constexpr double kMarginThreshold = 0.5;
constexpr double kTop20MaxAbs = 0.5;
constexpr double kLastRms = 0.15;
constexpr double kFixtureLogitStd = 6.1;  // qwen2-tiny-Q8_0 english, last position

json load_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  return json::parse(f);
}

struct Case {
  std::string model;   // e.g. qwen2-tiny-Q8_0
  std::string prompt;  // english / chatml / mixed
};

class FixtureParity : public ::testing::TestWithParam<Case> {};

std::shared_ptr<Model> load_fixture_model(const std::string& name) {
  return Model::load(test::shared_path("fixtures/models/" + name + ".gguf").string());
}

TEST_P(FixtureParity, TeacherForcedLogitsMatchLlamaCpp) {
  const Case c = GetParam();
  MINFER_REQUIRE_SHARED("fixtures/models/" + c.model + ".gguf");
  const json ref = load_json(test::shared_path("fixtures/models/refs/" + c.model + "." + c.prompt + ".json"));
  auto model = load_fixture_model(c.model);
  EngineConfig cfg;
  cfg.n_threads = 2;
  cfg.n_ctx = 256;
  cfg.kv_type = TensorType::F32;
  Engine engine(model, cfg);

  std::vector<int32_t> prompt = ref["prompt_tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> greedy = ref["greedy"]["tokens"].get<std::vector<int32_t>>();
  std::vector<int32_t> forced = prompt;
  forced.insert(forced.end(), greedy.begin(), greedy.end() - 1);
  const auto logits = engine.decode(forced, /*all_logits=*/true);
  const size_t n_vocab = static_cast<size_t>(engine.n_vocab());
  ASSERT_EQ(logits.size(), forced.size() * n_vocab);
  const auto row = [&](size_t i) { return std::span<const float>(logits.data() + i * n_vocab, n_vocab); };

  double max_top20 = 0.0;
  int checked = 0;
  for (const json& p : ref["positions"]) {
    const size_t i = p["pos"].get<size_t>();
    const auto r = row(i);
    for (const json& pair : p["top"]) {
      const double d = std::abs(r[pair[0].get<size_t>()] - pair[1].get<double>());
      max_top20 = std::max(max_top20, d);
    }
    if (p["margin_top1_top2"].get<double>() > kMarginThreshold) {
      EXPECT_EQ(argmax(r), p["argmax"].get<int32_t>()) << "prompt position " << i;
      ++checked;
    }
  }
  // The reference's logit spread (last position) sets the scale of the two logit bounds.
  const auto last = test::read_f32(test::shared_path("fixtures/models/refs/" + ref["last_logits_file"].get<std::string>()));
  ASSERT_EQ(last.size(), n_vocab);
  double mean = 0.0, var = 0.0;
  for (float v : last) mean += v;
  mean /= static_cast<double>(n_vocab);
  for (float v : last) var += (v - mean) * (v - mean);
  const double scale = std::max(1.0, std::sqrt(var / static_cast<double>(n_vocab)) / kFixtureLogitStd);
  EXPECT_LE(max_top20, kTop20MaxAbs * scale);
  EXPECT_GT(checked, 0);
  // Greedy steps, teacher-forced: step s uses the logits after prompt + s generated tokens.
  const auto& steps = ref["greedy"]["steps"];
  for (size_t s = 0; s < steps.size(); ++s) {
    if (steps[s]["margin_top1_top2"].get<double>() <= kMarginThreshold) continue;
    EXPECT_EQ(argmax(row(prompt.size() - 1 + s)), steps[s]["token"].get<int32_t>()) << "greedy step " << s;
  }
  // Full last-position logits.
  const auto r = row(prompt.size() - 1);
  double ss = 0.0, mx = 0.0;
  for (size_t v = 0; v < n_vocab; ++v) {
    const double d = r[v] - last[v];
    ss += d * d;
    mx = std::max(mx, std::abs(d));
  }
  const double rms = std::sqrt(ss / static_cast<double>(n_vocab));
  EXPECT_LE(rms, kLastRms * scale) << "max |d| " << mx;
  RecordProperty("top20_max_abs", std::to_string(max_top20));
  RecordProperty("last_rms", std::to_string(rms));
  std::printf("[ parity ] %s/%s: top-20 max |d| %.4f, last-position max |d| %.4f, RMS %.4f (bounds x%.2f)\n",
              c.model.c_str(), c.prompt.c_str(), max_top20, mx, rms, scale);
}

TEST_P(FixtureParity, GreedyMatchesUpToTheFirstNearTieAndEveryStepMatchesTeacherForced) {
  // One decode call per token, as generation runs (the test above decodes the whole sequence in
  // one call). Every one of the reference's 32 steps is checked: the step's input is the
  // reference's token (teacher forcing), so a near-tie that flips cannot end the comparison.
  // At each step: the reference's top-5 logits within kTop20MaxAbs, and our argmax equal to the
  // reference token where its margin exceeds kMarginThreshold. Up to the first near-tie the
  // argmax is also what greedy generation would feed back, so that prefix is free-running greedy.
  const Case c = GetParam();
  MINFER_REQUIRE_SHARED("fixtures/models/" + c.model + ".gguf");
  const json ref = load_json(test::shared_path("fixtures/models/refs/" + c.model + "." + c.prompt + ".json"));
  auto model = load_fixture_model(c.model);
  EngineConfig cfg;
  cfg.n_threads = 2;
  cfg.n_ctx = 256;
  cfg.kv_type = TensorType::F32;
  Engine engine(model, cfg);
  const std::vector<int32_t> prompt = ref["prompt_tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> want = ref["greedy"]["tokens"].get<std::vector<int32_t>>();
  const auto& steps = ref["greedy"]["steps"];
  ASSERT_EQ(want.size(), 32u);  // the fixture README's n_gen
  ASSERT_EQ(steps.size(), want.size());
  std::vector<float> logits = engine.decode(prompt);
  size_t steps_checked = 0, top1_checked = 0, greedy_prefix = 0;
  bool tied = false;
  double max_top5 = 0.0;
  for (size_t s = 0; s < want.size(); ++s) {
    const json& step = steps[s];
    ASSERT_EQ(step["token"].get<int32_t>(), want[s]);
    for (const json& pair : step["top5"])
      max_top5 = std::max(max_top5, std::abs(logits[pair[0].get<size_t>()] - pair[1].get<double>()));
    const int32_t got = argmax(logits);
    if (step["margin_top1_top2"].get<double>() > kMarginThreshold) {
      EXPECT_EQ(got, want[s]) << "step " << s;
      ++top1_checked;
    } else {
      tied = true;  // from here on a free-running greedy run may legitimately diverge
    }
    if (!tied && got == want[s]) ++greedy_prefix;
    ++steps_checked;
    const int32_t one[1] = {want[s]};  // teacher forcing: the reference's token, not ours
    logits = engine.decode(one);
  }
  EXPECT_EQ(steps_checked, 32u);
  EXPECT_LE(max_top5, kTop20MaxAbs);
  // Steps with a clear margin: every step but the fixture's near-ties (at most 9 of 32 here).
  EXPECT_GE(top1_checked, 23u);
  std::printf("[ parity ] %s/%s: 32 steps teacher-forced, top-5 max |d| %.4f, top-1 checked at %zu, "
              "greedy identical for the first %zu steps (up to the first near-tie)\n",
              c.model.c_str(), c.prompt.c_str(), max_top5, top1_checked, greedy_prefix);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureParity,
                         ::testing::Values(Case{"qwen2-tiny-Q8_0", "english"}, Case{"qwen2-tiny-Q8_0", "chatml"},
                                           Case{"qwen2-tiny-Q8_0", "mixed"}, Case{"qwen3-tiny-Q4_0", "english"},
                                           Case{"qwen3-tiny-Q4_0", "chatml"}, Case{"qwen3-tiny-Q4_0", "mixed"},
                                           // architecture llama: normal RoPE layout, rope_freqs, tied
                                           // output (llama3); SentencePiece vocab, untied (mistral)
                                           Case{"llama3-tiny-Q8_0", "english"}, Case{"llama3-tiny-Q8_0", "chat"},
                                           Case{"llama3-tiny-Q8_0", "mixed"}, Case{"mistral-tiny-Q8_0", "english"},
                                           Case{"mistral-tiny-Q8_0", "chat"}, Case{"mistral-tiny-Q8_0", "mixed"}),
                         [](const auto& param_info) {
                           std::string s = param_info.param.model + "_" + param_info.param.prompt;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace minfer
