// Load-time checks of a model file against what minfer implements: embedding rows versus the
// tokenizer's vocabulary, and hyper-parameters that would change the maths (RoPE scaling,
// experts, sliding-window attention) which must be refused rather than ignored.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

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
  // The tokenizer is built on its own thread: its errors come from tokenizer(), not load().
  test::SynthSpec spec;
  spec.n_vocab = 512;
  const auto path = test::write_tokenized_model(spec, test::temp_dir(), 600);
  const std::string err = test::error_of([&] { (void)Model::load(path.string())->tokenizer(); });
  EXPECT_CONTAINS(err, path.string() + ": tensor token_embd.weight has 512 rows, fewer than the 600 tokens");
}

TEST(ModelChecks, a_tokenizer_build_error_is_thrown_by_every_tokenizer_call) {
  const auto path = test::write_bad_vocab_model(test::temp_dir());
  // The same one-line error as building the vocabulary directly.
  const std::string direct =
      test::error_of([&] { (void)tok::vocab_from_gguf(*gguf::GgufFile::open(path.string())); });
  EXPECT_CONTAINS(direct, path.string() + ": unknown pre-tokenizer tokenizer.ggml.pre = 'bogus'");
  ASSERT_FALSE(direct.empty());
  std::shared_ptr<Model> model;
  ASSERT_NO_THROW(model = Model::load(path.string()));
  EXPECT_TRUE(model->has_tokenizer());
  for (int call = 0; call < 3; ++call) EXPECT_EQ(test::error_of([&] { (void)model->tokenizer(); }), direct) << call;
  // From several threads at once too: each gets the stored error, none a std::future_error.
  const std::shared_ptr<Model> fresh = Model::load(path.string());
  std::vector<std::string> errors(8);
  std::vector<std::thread> threads;
  for (std::string& e : errors)
    threads.emplace_back([&] {
      try {
        (void)fresh->tokenizer();
        e = "no error";
      } catch (const Error& err) {
        e = err.what();
      } catch (const std::exception& err) {
        e = std::string("another exception: ") + err.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) EXPECT_EQ(e, direct);
}

TEST(ModelChecks, concurrent_tokenizer_calls_return_one_tokenizer) {
  const auto path = test::write_tokenized_model(test::SynthSpec{}, test::temp_dir(), 300);
  for (int round = 0; round < 4; ++round) {
    const std::shared_ptr<Model> model = Model::load(path.string());
    ASSERT_TRUE(model->has_tokenizer());
    std::vector<const tok::Tokenizer*> got(8, nullptr);
    std::vector<std::thread> threads;
    for (const tok::Tokenizer*& g : got) threads.emplace_back([&] { g = model->tokenizer(); });
    for (std::thread& t : threads) t.join();
    ASSERT_NE(got[0], nullptr);
    for (const tok::Tokenizer* g : got) EXPECT_EQ(g, got[0]);
    EXPECT_EQ(model->tokenizer(), got[0]);
    EXPECT_EQ(got[0]->n_vocab(), 300);
  }
}

TEST(ModelChecks, a_model_without_tokenizer_metadata_has_no_tokenizer) {
  const auto path = test::write_synth_model(test::SynthSpec{}, test::temp_dir());
  const auto model = Model::load(path.string());
  EXPECT_FALSE(model->has_tokenizer());
  EXPECT_EQ(model->tokenizer(), nullptr);
  EXPECT_EQ(model->tokenizer(), nullptr);
}

TEST(ModelChecks, a_model_dropped_while_its_tokenizer_builds_waits_for_the_build) {
  // The build reads the model's file; destroying the model right after load() must wait for it
  // (a sanitizer build reports a use after free otherwise).
  const auto path = test::write_tokenized_model(test::SynthSpec{}, test::temp_dir(), 300);
  for (int i = 0; i < 8; ++i) EXPECT_NO_THROW((void)Model::load(path.string()));
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
