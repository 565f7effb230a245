// The demo model (../shared/models, a trained 45M Qwen2) against its HF-transformers float32
// references: prompt top-20 logits, the greedy continuation up to its first near-tie, and the
// perplexity of the held-out text computed the llama-perplexity way. Our file is Q8_0 and we
// quantize activations like ggml, so the class is "Q8_0 vs f32": top-20 |d logit| <= 0.35,
// running perplexity within 1%.
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

constexpr double kTop20MaxAbs = 0.35;   // measured 2026-11-30: see the test output
constexpr double kPplRelTol = 0.01;
constexpr double kGreedyMargin = 0.1;   // HF margins below this may flip under Q8_0

struct Demo {
  std::shared_ptr<Model> model;
  nlohmann::json ref;
};

Demo load_demo() {
  Demo d;
  d.model = Model::load(test::shared_path("models/minfer-demo-py-q8_0.gguf").string());
  std::ifstream f(test::shared_path("models/reference/hf-demo.json"));
  d.ref = nlohmann::json::parse(f);
  return d;
}

EngineConfig config() {
  EngineConfig c;
  c.n_threads = 2;
  c.n_ctx = 512;
  c.kv_type = TensorType::F32;
  return c;
}

TEST(DemoModel, PromptTop20LogitsAndGreedyMatchHfReference) {
  MINFER_REQUIRE_SHARED("models/minfer-demo-py-q8_0.gguf");
  MINFER_REQUIRE_SHARED("models/reference/hf-demo.json");
  Demo d = load_demo();
  const size_t nv = static_cast<size_t>(d.model->hparams().n_vocab);
  for (const auto& p : d.ref["prompts"]) {
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    // Our tokenizer gives the reference ids.
    EXPECT_EQ(d.model->tokenizer()->encode(p["text"].get<std::string>(), true, false), ids);
    Engine e(d.model, config());
    const auto logits = e.decode(ids, true);
    double max_abs = 0.0;
    for (size_t i = 0; i < ids.size(); ++i)
      for (const auto& pair : p["top20"][i])
        max_abs = std::max(max_abs, std::abs(logits[i * nv + pair[0].get<size_t>()] - pair[1].get<double>()));
    EXPECT_LE(max_abs, kTop20MaxAbs) << p["text"];
    // The greedy continuation, teacher-forced: at every step whose HF top-1/top-2 margin is at
    // least kGreedyMargin our argmax must be HF's token (near-ties may flip under Q8_0).
    const auto want = p["greedy_ids"].get<std::vector<int32_t>>();
    std::vector<float> last(logits.end() - static_cast<std::ptrdiff_t>(nv), logits.end());
    size_t checked = 0;
    for (size_t s = 0; s < want.size(); ++s) {
      const auto& top5 = p["greedy_top5"][s];
      if (top5[0][1].get<double>() - top5[1][1].get<double>() >= kGreedyMargin) {
        EXPECT_EQ(argmax(last), want[s]) << p["text"] << " step " << s;
        ++checked;
      }
      const int32_t one[1] = {want[s]};
      last = e.decode(one);
    }
    EXPECT_GT(checked, want.size() / 2);
    std::printf("[ demo ] %-45s top-20 max |d| %.4f, greedy argmax checked at %zu of %zu steps (margin >= 0.1)\n",
                p["text"].dump().substr(0, 45).c_str(), max_abs, checked, want.size());
  }
}

TEST(DemoModel, PerplexityOfTheHeldOutTextMatchesHfWithinOnePercent) {
  MINFER_REQUIRE_SHARED("models/minfer-demo-py-q8_0.gguf");
  MINFER_REQUIRE_SHARED("models/reference/val.txt");
  Demo d = load_demo();
  const auto bytes = test::read_bytes(test::shared_path("models/reference/val.txt"));
  const auto ids = d.model->tokenizer()->encode(std::string(bytes.begin(), bytes.end()), true, false);
  EXPECT_EQ(static_cast<int64_t>(ids.size()), d.ref["perplexity"]["n_tokens"].get<int64_t>());
  Engine e(d.model, config());
  const int64_t chunks = 3;
  const PerplexityResult r = perplexity(e, ids, 512, chunks);
  const auto& hf = d.ref["perplexity"]["running_ppl"];
  for (int64_t c = 0; c < chunks; ++c) {
    const double want = hf[static_cast<size_t>(c)].get<double>();
    EXPECT_NEAR(r.running_ppl[static_cast<size_t>(c)], want, kPplRelTol * want) << "chunk " << c + 1;
  }
  std::printf("[ demo ] running PPL after %lld chunks: %.4f (HF %.4f)\n", static_cast<long long>(chunks), r.ppl,
              hf[static_cast<size_t>(chunks - 1)].get<double>());
}

}  // namespace
}  // namespace minfer
