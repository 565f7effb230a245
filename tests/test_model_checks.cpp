// Load-time checks of a model file against what minfer implements: embedding rows versus the
// tokenizer's vocabulary, and hyper-parameters that would change the maths (RoPE scaling,
// experts, sliding-window attention) which must be refused rather than ignored.
#include <gtest/gtest.h>

#include <functional>

#include "engine/engine.h"
#include "engine/generate.h"
#include "gguf_test_util.h"
#include "models/model.h"
#include "sampling/sampler.h"
#include "test_util.h"
#include "tokenized_model.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

TEST(ModelChecks, fewer_embedding_rows_than_tokens_is_a_load_error_naming_both_counts) {
  test::SynthSpec spec;
  spec.n_vocab = 512;
  const auto path = test::write_tokenized_model(spec, test::temp_dir(), 600);
  const std::string err = test::error_of([&] { (void)Model::load(path.string()); });
  EXPECT_CONTAINS(err, path.string() + ": tensor token_embd.weight has 512 rows, fewer than the 600 tokens");
}

TEST(ModelChecks, padded_embedding_rows_are_never_sampled) {
  // 512 rows, 260 tokens: with random weights about half of the greedy choices over all rows
  // would be ids the tokenizer cannot decode.
  test::SynthSpec spec;
  spec.n_vocab = 512;
  const auto path = test::write_tokenized_model(spec, test::temp_dir(), 260);
  const auto model = Model::load(path.string());
  ASSERT_NE(model->tokenizer(), nullptr);
  ASSERT_EQ(model->tokenizer()->n_vocab(), 260);
  EngineConfig cfg;
  cfg.n_threads = 1;
  cfg.n_ctx = 256;
  Engine engine(model, cfg);
  Session session(engine, *model->tokenizer());
  SamplerParams sp;
  sp.temp = 0.0f;
  Sampler sampler(sp);
  GenerateOptions opt;
  opt.max_tokens = 64;
  opt.stop_at_eog = false;
  const std::vector<int32_t> prompt = {1, 2, 3, 255};
  GenerateStats st;
  EXPECT_NO_THROW(session.generate(prompt, sampler, opt, nullptr, &st));
  EXPECT_EQ(st.generated_tokens, 64);
  for (int32_t id : session.tokens()) EXPECT_LT(id, 260);
}

struct UnsupportedKey {
  const char* key;
  std::function<void(gguf::GgufWriter&)> set;
  const char* message;
};

TEST(ModelChecks, hyper_parameters_that_change_the_maths_are_refused_naming_key_and_value) {
  const UnsupportedKey cases[] = {
      {"rope.scaling.type longrope",  // yarn and linear are implemented (test_rope_scaling.cpp)
       [](gguf::GgufWriter& w) {
         w.set_string("qwen2.rope.scaling.type", "longrope");
         w.set_f32("qwen2.rope.scaling.factor", 4.0f);
       },
       "metadata qwen2.rope.scaling.type = 'longrope' is unsupported"},
      {"rope.scaling.type bogus", [](gguf::GgufWriter& w) { w.set_string("qwen2.rope.scaling.type", "bogus"); },
       "metadata qwen2.rope.scaling.type = 'bogus' is unsupported"},
      {"expert_count", [](gguf::GgufWriter& w) { w.set_u32("qwen2.expert_count", 8); },
       "metadata qwen2.expert_count = 8 is unsupported"},
      {"sliding_window", [](gguf::GgufWriter& w) { w.set_u32("qwen2.attention.sliding_window", 16); },
       "metadata qwen2.attention.sliding_window = 16 is unsupported"},
  };
  for (const UnsupportedKey& c : cases) {
    test::SynthSpec spec;
    spec.extra_metadata = c.set;
    const auto path = test::write_synth_model(spec, test::temp_dir());
    EXPECT_CONTAINS(test::error_of([&] { (void)Model::load(path.string()); }), path.string() + ": " + c.message)
        << c.key;
  }
}

TEST(ModelChecks, neutral_values_of_those_keys_still_load) {
  test::SynthSpec spec;
  spec.extra_metadata = [](gguf::GgufWriter& w) {
    w.set_string("qwen2.rope.scaling.type", "none");
    w.set_u32("qwen2.expert_count", 0);
    w.set_u32("qwen2.attention.sliding_window", 4096);  // = the training context: no window
  };
  const auto path = test::write_synth_model(spec, test::temp_dir());
  EXPECT_NO_THROW((void)Model::load(path.string()));
}

TEST(ModelChecks, block_count_below_the_layers_present_is_refused_naming_the_unused_layer) {
  // Three layers written, block_count 2: before, the loader ran two layers and ignored the third.
  test::SynthSpec spec;
  spec.n_layer = 3;
  spec.block_count = 2;
  const auto path = test::write_synth_model(spec, test::temp_dir());
  const std::string err = test::error_of([&] { (void)Model::load(path.string()); });
  // qwen2 layers have 12 tensors (norms, q/k/v with biases, output, ffn gate/up/down).
  EXPECT_CONTAINS(err, path.string() + ": 12 tensors are not used: blk.2.");
  EXPECT_CONTAINS(err, "(8 more); the file has tensors of layer 2 but qwen2.block_count = 2");
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
}

TEST(ModelChecks, an_unknown_extra_tensor_is_refused_naming_it) {
  for (const char* arch : {"qwen2", "qwen3"}) {
    test::SynthSpec spec;
    spec.arch = arch;
    spec.extra_tensors = {"blk.0.attn_sinks.weight"};
    const auto path = test::write_synth_model(spec, test::temp_dir());
    EXPECT_CONTAINS(test::error_of([&] { (void)Model::load(path.string()); }),
                    path.string() + ": 1 tensor is not used: blk.0.attn_sinks.weight; minfer's " + arch +
                        " model does not use them")
        << arch;
  }
}

TEST(ModelChecks, every_tensor_of_the_written_models_is_used) {
  // Both architectures, the tied (qwen2) and untied (qwen3) output: nothing is left over.
  for (const char* arch : {"qwen2", "qwen3"}) {
    test::SynthSpec spec;
    spec.arch = arch;
    const auto path = test::write_synth_model(spec, test::temp_dir());
    EXPECT_NO_THROW((void)Model::load(path.string())) << arch;
  }
}

}  // namespace
}  // namespace minfer
