// The demo model (a trained 45M Qwen2, ../shared/models/README.md) against its HF-transformers
// float32 references (hf-demo.json, in tests/data/shared): prompt top-20 logits, the greedy
// continuation teacher-forced, and the perplexity of the held-out text computed the
// llama-perplexity way. Two files: the training run's Q8_0 (../shared) and the Q6_K requantized
// from it that ships in the repository (models/), so the comparison runs on any clone. We
// quantize activations like ggml, so the classes are "Q8_0 vs f32" and "Q6_K vs f32".
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/perplexity.h"
#include "models/model.h"
#include "sampling/sampler.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

struct DemoFile {
  const char* name;        ///< test parameter name
  const char* shared_rel;  ///< path under ../shared, or nullptr for the repository's file
  double top20_max_abs;    ///< max |d logit| over the HF top-20 at every prompt position
  double greedy_margin;    ///< HF top-1/top-2 margin from which our argmax must be HF's token
  double ppl_rel_tol;      ///< running perplexity after each chunk, relative to HF
};

// Q8_0 (the training run's file):
// - top-20 bound: measured 2026-11-30 (0.25 now); no independent reference gives this model's
//   logits under Q8_0 (llama.cpp's would: dump llama.cpp 80fb11ac's top-20 for the 4 prompts).
// - greedy margin: llama.cpp's Q8_0 run of this file leaves HF's greedy text only at HF margins
//   of 0.023-0.040 (../shared/models/README.md); 0.1 is 2.5x the largest.
// - perplexity: llama.cpp 80fb11ac's llama-perplexity on the same Q8_0 file follows HF's running
//   perplexity within 0.3% at every chunk (../shared/models/README.md, "Reference files"); an
//   engine doing the same Q8_0 arithmetic (activations quantized like ggml) is held to that.
constexpr DemoFile kQ8_0{"Q8_0", "models/minfer-demo-py-q8_0.gguf", 0.35, 0.1, 0.003};
// Q6_K (models/, requantized from the Q8_0 file, models/README.md), so its weights carry both
// roundings. A weight's rounding error is at most half a step: Q8_0 amax32/254, Q6_K amax16/62
// (6-bit levels -32..31, ggml-common.h block_q6_K), at most 254/62 = 4.1 times Q8_0's, so the
// Q6_K file's weight error is at most 1 + 4.1 = 5.1 times the Q8_0 file's. Logit errors are
// first-order linear in the weight error: the top-20 bound and the greedy margin (a difference of
// two logits) are 5.1 x Q8_0's: 0.35 x 5.1 = 1.79, 0.1 x 5.1 = 0.51. Perplexity: no independent
// Q6_K reference; the 1% this test held the Q8_0 file to before.
constexpr DemoFile kQ6_K{"Q6_K", nullptr, 1.79, 0.51, 0.01};

class DemoModel : public ::testing::TestWithParam<DemoFile> {
 protected:
  void SetUp() override {
    const DemoFile& f = GetParam();
    if (f.shared_rel) MINFER_REQUIRE_SHARED(f.shared_rel);
    model_ = Model::load(f.shared_rel ? test::shared_path(f.shared_rel).string() : test::repo_demo_model());
    std::ifstream in(test::shared_path("models/reference/hf-demo.json"));
    ASSERT_TRUE(in) << "cannot read hf-demo.json";
    ref_ = nlohmann::json::parse(in);
  }
  std::shared_ptr<Model> model_;
  nlohmann::json ref_;
};

EngineConfig config() {
  EngineConfig c;
  c.n_threads = 2;
  c.n_ctx = 512;
  c.kv_type = TensorType::F32;
  return c;
}

TEST_P(DemoModel, PromptTop20LogitsAndGreedyMatchHfReference) {
  const DemoFile& f = GetParam();
  const size_t nv = static_cast<size_t>(model_->hparams().n_vocab);
  for (const auto& p : ref_["prompts"]) {
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    // Our tokenizer gives the reference ids.
    EXPECT_EQ(model_->tokenizer()->encode(p["text"].get<std::string>(), true, false), ids);
    Engine e(model_, config());
    const auto logits = e.decode(ids, true);
    double max_abs = 0.0;
    for (size_t i = 0; i < ids.size(); ++i)
      for (const auto& pair : p["top20"][i])
        max_abs = std::max(max_abs, std::abs(logits[i * nv + pair[0].get<size_t>()] - pair[1].get<double>()));
    EXPECT_LE(max_abs, f.top20_max_abs) << p["text"];
    // The greedy continuation, teacher-forced: at every step whose HF top-1/top-2 margin is at
    // least f.greedy_margin our argmax must be HF's token (near-ties may flip under quantization).
    const auto want = p["greedy_ids"].get<std::vector<int32_t>>();
    std::vector<float> last(logits.end() - static_cast<std::ptrdiff_t>(nv), logits.end());
    size_t checked = 0;
    for (size_t s = 0; s < want.size(); ++s) {
      const auto& top5 = p["greedy_top5"][s];
      if (top5[0][1].get<double>() - top5[1][1].get<double>() >= f.greedy_margin) {
        EXPECT_EQ(argmax(last), want[s]) << p["text"] << " step " << s;
        ++checked;
      }
      const int32_t one[1] = {want[s]};
      last = e.decode(one);
    }
    EXPECT_GT(checked, want.size() / 2);
    std::printf("[ demo %s ] %-45s top-20 max |d| %.4f, greedy argmax checked at %zu of %zu steps (margin >= %.2f)\n",
                f.name, p["text"].dump().substr(0, 45).c_str(), max_abs, checked, want.size(), f.greedy_margin);
  }
}

TEST_P(DemoModel, PerplexityOfTheHeldOutTextMatchesHfWithinItsClass) {
  const DemoFile& f = GetParam();
  const auto bytes = test::read_bytes(test::shared_path("models/reference/val.txt"));
  const auto ids = model_->tokenizer()->encode(std::string(bytes.begin(), bytes.end()), true, false);
  EXPECT_EQ(static_cast<int64_t>(ids.size()), ref_["perplexity"]["n_tokens"].get<int64_t>());
  Engine e(model_, config());
  const int64_t chunks = 3;
  const PerplexityResult r = perplexity(e, ids, 512, chunks);
  double worst = 0;
  const auto& hf = ref_["perplexity"]["running_ppl"];
  for (int64_t c = 0; c < chunks; ++c) {
    const double want = hf[static_cast<size_t>(c)].get<double>();
    EXPECT_NEAR(r.running_ppl[static_cast<size_t>(c)], want, f.ppl_rel_tol * want) << "chunk " << c + 1;
    worst = std::max(worst, std::abs(r.running_ppl[static_cast<size_t>(c)] / want - 1));
  }
  std::printf("[ demo %s ] running PPL after %lld chunks: %.4f (HF %.4f), worst chunk %.3f%% off\n", f.name,
              static_cast<long long>(chunks), r.ppl, hf[static_cast<size_t>(chunks - 1)].get<double>(), 100 * worst);
}

INSTANTIATE_TEST_SUITE_P(Files, DemoModel, ::testing::Values(kQ8_0, kQ6_K),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace minfer
