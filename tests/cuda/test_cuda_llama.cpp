// The llama architecture on the CUDA backend: the Rope op in the normal layout, with Llama-3.1
// frequency factors, linear and YaRN scaling, against the CPU within the "rope" class; and the
// llama fixture models (llama3-tiny, mistral-tiny) against llama.cpp's references
// (../shared/fixtures/models/README.md): top-1 at every position and greedy step whose reference
// margin exceeds 0.5, and the greedy continuation up to the first near tie. CPU vs CUDA greedy
// identity of the fixtures and of synth llama models of every weight type is in
// test_cuda_engine.cpp. Skips without a device.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../test_util.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "models/model.h"
#include "sampling/sampler.h"

namespace minfer {
namespace {

using graph::InputKind;
using graph::NodeId;

constexpr double kMarginThreshold = 0.5;  // the fixture README's threshold for ggml-mimicking engines

TEST(CudaLlama, RopeOfEveryLayoutAndScalingMatchesTheCpuWithinTheRopeClass) {
  MINFER_REQUIRE_CUDA();
  const int64_t hd = 64, n_head = 3;
  const std::vector<int32_t> pos = {0, 1, 17, 255, 4095, 30000, 131071};
  std::vector<float> ff(32);
  for (size_t i = 0; i < ff.size(); ++i) ff[i] = 1.0f + static_cast<float>(i % 8);  // 1..8, as Llama-3.1's
  graph::WeightTensor ffw;
  ffw.name = "test.rope_freqs";
  ffw.ne = {32, 1, 1, 1};
  ffw.data = reinterpret_cast<const uint8_t*>(ff.data());
  ffw.nbytes = ff.size() * sizeof(float);
  struct Case {
    const char* what;
    graph::RopeLayout layout;
    bool freqs;
    float freq_scale, ext_factor;
  };
  for (const Case c : {Case{"normal", graph::RopeLayout::Normal, false, 1.0f, 0.0f},
                       Case{"normal + freq factors", graph::RopeLayout::Normal, true, 1.0f, 0.0f},
                       Case{"normal + linear 4", graph::RopeLayout::Normal, false, 0.25f, 0.0f},
                       Case{"neox + yarn 4", graph::RopeLayout::Neox, false, 0.25f, 1.0f},
                       Case{"normal + yarn 8 + freq factors", graph::RopeLayout::Normal, true, 0.125f, 1.0f}}) {
    graph::RopeConfig cfg;
    cfg.layout = c.layout;
    cfg.freq_scale = c.freq_scale;
    cfg.ext_factor = c.ext_factor;
    if (c.ext_factor > 0.0f) {
      cfg.mscale = 1.0f + 0.1f * std::log(1.0f / c.freq_scale);
      graph::rope_yarn_corr_dims(hd, 4096, 10000.0f, 32.0f, 1.0f, &cfg.corr_low, &cfg.corr_high);
    }
    const auto x = test::random_floats(static_cast<size_t>(hd * n_head) * pos.size(), 52);
    const auto make = [&] {
      test::TestGraph t;
      const NodeId xn = t.g.input(InputKind::Other, TensorType::F32, {hd * n_head, static_cast<int64_t>(pos.size()), 1, 1}, "x");
      t.inputs.emplace_back(xn, test::as_bytes(x));
      const NodeId p = t.g.input(InputKind::Other, TensorType::I32, {static_cast<int64_t>(pos.size()), 1, 1, 1}, "pos");
      t.inputs.emplace_back(p, test::as_bytes(pos));
      NodeId f = graph::kNoNode;
      if (c.freqs) {
        f = t.g.weight(ffw);
        t.weights.push_back(&ffw);
      }
      const NodeId y = t.g.rope(xn, p, static_cast<int32_t>(hd), static_cast<int32_t>(hd), 10000.0f, "rope", cfg, f);
      t.g.mark_output(y);
      t.outputs.push_back(y);
      return t;
    };
    const auto r = test::run_both(make);
    const auto got = test::as_floats(r.cuda.outputs[0]), want = test::as_floats(r.cpu.outputs[0]);
    // Rope class (test_cuda_ops.cpp): the angles are bitwise the CPU's; cos/sin may differ from
    // glibc's by 1 ulp, so a rotated value may differ by about 1.2e-7 * mscale * (|x0| + |x1|).
    size_t bad = 0, exact = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const size_t row = i / hd * hd, dim = i % hd;
      const size_t pair = c.layout == graph::RopeLayout::Neox ? (dim < 32 ? dim + 32 : dim - 32) : (dim ^ 1u);
      const double bound = 4e-7 * cfg.mscale * (std::abs(x[i]) + std::abs(x[row + pair]));
      exact += got[i] == want[i];
      if (std::abs(static_cast<double>(got[i]) - want[i]) > bound && bad++ == 0)
        ADD_FAILURE() << c.what << ": first mismatch at " << i << ": got " << got[i] << ", want " << want[i];
    }
    EXPECT_EQ(bad, 0u) << c.what;
    std::printf("[ rope ] %s: %zu of %zu bit-exact\n", c.what, exact, got.size());
  }
}

struct Fixture {
  const char* model;
  const char* prompt;
};

class CudaLlamaFixture : public ::testing::TestWithParam<Fixture> {};

TEST_P(CudaLlamaFixture, TeacherForcedTop1AndGreedyMatchLlamaCpp) {
  MINFER_REQUIRE_CUDA();
  const Fixture c = GetParam();
  const std::string name = c.model;
  MINFER_REQUIRE_SHARED("fixtures/models/" + name + ".gguf");
  std::ifstream f(test::shared_path("fixtures/models/refs/" + name + "." + c.prompt + ".json"));
  const auto ref = nlohmann::json::parse(f);
  const auto model = Model::load(test::shared_path("fixtures/models/" + name + ".gguf").string());
  EngineConfig cfg;
  cfg.device = graph::BackendKind::Cuda;
  cfg.n_threads = 2;
  cfg.n_ctx = 256;
  cfg.kv_type = TensorType::F32;
  const auto prompt = ref["prompt_tokens"].get<std::vector<int32_t>>();
  const auto greedy = ref["greedy"]["tokens"].get<std::vector<int32_t>>();
  const auto& steps = ref["greedy"]["steps"];
  {
    Engine engine(model, cfg);
    std::vector<int32_t> forced = prompt;
    forced.insert(forced.end(), greedy.begin(), greedy.end() - 1);
    const auto logits = engine.decode(forced, /*all_logits=*/true);
    const size_t nv = static_cast<size_t>(engine.n_vocab());
    const auto row = [&](size_t i) { return std::span<const float>(logits.data() + i * nv, nv); };
    int checked = 0;
    for (const auto& p : ref["positions"]) {
      if (p["margin_top1_top2"].get<double>() <= kMarginThreshold) continue;
      EXPECT_EQ(argmax(row(p["pos"].get<size_t>())), p["argmax"].get<int32_t>()) << "position " << p["pos"];
      ++checked;
    }
    for (size_t s = 0; s < steps.size(); ++s) {
      if (steps[s]["margin_top1_top2"].get<double>() <= kMarginThreshold) continue;
      EXPECT_EQ(argmax(row(prompt.size() - 1 + s)), steps[s]["token"].get<int32_t>()) << "greedy step " << s;
      ++checked;
    }
    EXPECT_GT(checked, 8);
  }
  Engine engine(model, cfg);
  std::vector<float> logits = engine.decode(prompt);
  for (size_t s = 0; s < greedy.size(); ++s) {
    if (steps[s]["margin_top1_top2"].get<double>() <= kMarginThreshold) break;  // may diverge after a near tie
    const int32_t got = argmax(logits);
    ASSERT_EQ(got, greedy[s]) << "greedy step " << s;
    logits = engine.decode(std::vector<int32_t>{got});
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaLlamaFixture,
                         ::testing::Values(Fixture{"llama3-tiny-Q8_0", "english"}, Fixture{"llama3-tiny-Q8_0", "chat"},
                                           Fixture{"llama3-tiny-Q8_0", "mixed"}, Fixture{"mistral-tiny-Q8_0", "english"},
                                           Fixture{"mistral-tiny-Q8_0", "chat"}, Fixture{"mistral-tiny-Q8_0", "mixed"}),
                         [](const auto& param_info) {
                           std::string s = std::string(param_info.param.model) + "_" + param_info.param.prompt;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
