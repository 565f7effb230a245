// The synthetic-model helper (synth_model.h) writes files the loader accepts for every weight
// type and architecture, and the models they hold produce spread-out logits on the CPU (the
// device identity tests in tests/cuda/ rely on both).
#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine.h"
#include "models/model.h"
#include "synth_model.h"
#include "test_util.h"

namespace minfer {
namespace {

struct SynthCase {
  const char* arch;
  TensorType type;
};

class SynthModel : public ::testing::TestWithParam<SynthCase> {};

TEST_P(SynthModel, LoadsAndGivesSpreadOutLogitsOnTheCpu) {
  test::SynthSpec spec;
  spec.arch = GetParam().arch;
  spec.type = GetParam().type;
  const auto path = test::write_synth_model(spec, test::temp_dir());
  const auto model = Model::load(path.string());
  const HParams& h = model->hparams();
  EXPECT_EQ(h.n_embd, spec.n_embd);
  EXPECT_EQ(h.n_layer, spec.n_layer);
  EXPECT_EQ(h.n_vocab, spec.n_vocab);
  EXPECT_EQ(h.head_dim, spec.head_dim);
  EXPECT_EQ(h.has_qkv_bias, spec.arch == "qwen2");
  EXPECT_EQ(h.has_qk_norm, spec.arch == "qwen3");
  EXPECT_EQ(model->weight("blk.1.ffn_down.weight").type, spec.type);
  EXPECT_EQ(model->weight("blk.1.ffn_norm.weight").type, TensorType::F32);

  EngineConfig cfg;
  cfg.n_threads = 2;
  cfg.n_ctx = 64;
  Engine engine(model, cfg);
  const std::vector<int32_t> prompt = {1, 17, 300, 42, 511, 0, 77};
  const std::vector<float> logits = engine.decode(prompt);
  ASSERT_EQ(logits.size(), static_cast<size_t>(spec.n_vocab));
  double sum = 0.0, sq = 0.0;
  for (float v : logits) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  const double mean = sum / static_cast<double>(logits.size());
  const double sd = std::sqrt(sq / static_cast<double>(logits.size()) - mean * mean);
  EXPECT_GT(sd, 1.0) << "logits are nearly flat";
  EXPECT_LT(sd, 50.0) << "logits blew up";
}

INSTANTIATE_TEST_SUITE_P(
    Types, SynthModel,
    ::testing::Values(SynthCase{"qwen2", TensorType::F32}, SynthCase{"qwen2", TensorType::F16},
                      SynthCase{"qwen2", TensorType::BF16}, SynthCase{"qwen2", TensorType::Q4_0},
                      SynthCase{"qwen2", TensorType::Q4_1}, SynthCase{"qwen2", TensorType::Q5_0},
                      SynthCase{"qwen2", TensorType::Q5_1}, SynthCase{"qwen2", TensorType::Q8_0},
                      SynthCase{"qwen2", TensorType::Q4_K}, SynthCase{"qwen2", TensorType::Q5_K},
                      SynthCase{"qwen2", TensorType::Q6_K}, SynthCase{"qwen3", TensorType::Q8_0},
                      SynthCase{"qwen3", TensorType::Q4_K}),
    [](const auto& param_info) {
      return std::string(param_info.param.arch) + "_" + std::string(type_name(param_info.param.type));
    });

}  // namespace
}  // namespace minfer
