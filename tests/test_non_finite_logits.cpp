// Logits that hold a NaN or an infinity (a model file with broken weights) are an error naming
// the step and the position, never sampled from or scored: `run` and `perplexity` exit 1 with
// one line instead of printing garbage or "nan". The models are the tiny synthetic ones with a
// value planted in one tensor (f32 weights, so the value reaches the arithmetic unchanged).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/perplexity.h"
#include "gguf_test_util.h"
#include "models/model.h"
#include "sampling/sampler.h"
#include "test_util.h"
#include "tokenized_model.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// qwen3 (an output matrix of its own, so token_embd only feeds the input), f32 weights.
test::SynthSpec f32_spec() {
  test::SynthSpec spec;
  spec.arch = "qwen3";
  spec.type = TensorType::F32;
  spec.n_embd = 128;
  spec.n_ff = 256;
  spec.n_head = 2;
  spec.n_head_kv = 1;
  return spec;
}

// Sets value `v` at element `col` of row `row` of tensor `name` (rows of n_embd values).
test::SynthSpec planted(test::SynthSpec spec, std::string name, int64_t row, int64_t col, float v) {
  const int64_t k = spec.n_embd;
  spec.edit_values = [name, row, col, k, v](const std::string& n, std::vector<float>& values) {
    if (n == name) values[static_cast<size_t>(row * k + col)] = v;
  };
  return spec;
}

EngineConfig small_config() {
  EngineConfig cfg;
  cfg.n_threads = 1;
  cfg.n_ctx = 64;
  cfg.kv_type = TensorType::F32;
  return cfg;
}

// The error message `generate` throws on `model_path` for `prompt` (greedy, `n` tokens).
std::string generate_error(const std::filesystem::path& model_path, const std::vector<int32_t>& prompt, int n) {
  const auto model = Model::load(model_path.string());
  Engine engine(model, small_config());
  Session session(engine, *model->tokenizer());
  SamplerParams sp;
  sp.temp = 0.0f;
  Sampler sampler(sp);
  GenerateOptions opt;
  opt.max_tokens = n;
  opt.stop_at_eog = false;
  return test::error_of([&] { session.generate(prompt, sampler, opt, nullptr, nullptr); });
}

// The first token greedy decoding picks after `prompt` on the clean model.
int32_t first_greedy_token(const std::filesystem::path& model_path, const std::vector<int32_t>& prompt) {
  const auto model = Model::load(model_path.string());
  Engine engine(model, small_config());
  Session session(engine, *model->tokenizer());
  return argmax(session.prefill(prompt, nullptr));
}

TEST(NonFiniteLogits, first_non_finite_finds_nan_and_both_infinities_at_any_offset) {
  std::vector<float> v(1000, 1.0f);
  v[3] = std::numeric_limits<float>::max();
  v[4] = -std::numeric_limits<float>::max();
  v[5] = std::numeric_limits<float>::denorm_min();
  v[6] = -0.0f;
  EXPECT_EQ(first_non_finite(v), -1);
  EXPECT_EQ(first_non_finite({}), -1);
  // Any offset: vector lanes, the scalar tail, a later non-finite value that is not the first.
  for (size_t at : {size_t{0}, size_t{63}, size_t{64}, size_t{500}, size_t{959}, size_t{960}, size_t{999}}) {
    for (float bad : {kNaN, -kNaN, kInf, -kInf}) {
      std::vector<float> w = v;
      w[at] = bad;
      if (at + 7 < w.size()) w[at + 7] = kNaN;
      EXPECT_EQ(first_non_finite(w), static_cast<int64_t>(at)) << at << " " << bad;
    }
  }
}

TEST(NonFiniteLogits, a_nan_weight_fails_the_prompt_prefill_naming_step_and_position) {
  const auto dir = test::temp_dir();
  const auto path = test::write_tokenized_model(planted(f32_spec(), "output_norm.weight", 0, 0, kNaN), dir, 300);
  EXPECT_EQ(generate_error(path, {1, 2, 3}, 4),
            "prompt prefill of 3 tokens (position 2): logits contain NaN (first at vocab id 0); the model's "
            "weights or activations are not finite");
}

TEST(NonFiniteLogits, an_infinite_output_row_is_found_at_its_vocab_id) {
  // One row of the output matrix holds +Inf: only that logit is infinite (or NaN when the hidden
  // state's element is 0, which a random state is not).
  const auto dir = test::temp_dir();
  const auto path = test::write_tokenized_model(planted(f32_spec(), "output.weight", 77, 5, kInf), dir, 300);
  const std::string err = generate_error(path, {1, 2, 3}, 4);
  EXPECT_CONTAINS(err, "prompt prefill of 3 tokens (position 2): logits contain ");
  EXPECT_CONTAINS(err, "Inf (first at vocab id 77)");
}

TEST(NonFiniteLogits, a_nan_embedding_row_fails_the_decode_step_that_feeds_it) {
  // The prompt is clean; the token greedy decoding picks first has a NaN embedding row, so the
  // first decode step (at the position after the prompt) is the one that goes wrong.
  const auto dir = test::temp_dir();
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  const int32_t g = first_greedy_token(test::write_tokenized_model(f32_spec(), dir, 300), prompt);
  ASSERT_TRUE(std::find(prompt.begin(), prompt.end(), g) == prompt.end()) << g;
  const auto path = test::write_tokenized_model(planted(f32_spec(), "token_embd.weight", g, 0, kNaN), dir, 300);
  EXPECT_EQ(generate_error(path, prompt, 4),
            "decode step 1 (position 5): logits contain NaN (first at vocab id 0); the model's weights or "
            "activations are not finite");
}

TEST(NonFiniteLogits, engine_forward_refuses_a_non_finite_row_of_any_caller) {
  const auto dir = test::temp_dir();
  const auto model = Model::load(
      test::write_tokenized_model(planted(f32_spec(), "output_norm.weight", 0, 0, kNaN), dir, 300).string());
  Engine engine(model, small_config());
  Batch b = Batch::sequence(std::vector<int32_t>{7, 8}, 0, 3, false);
  EXPECT_EQ(test::error_of([&] { (void)engine.forward(b); }),
            "batch of 2 tokens (position 1, sequence 3): logits contain NaN (first at vocab id 0); the model's "
            "weights or activations are not finite");
}

// A step of many rows (scanned on the CPU backend's threads) names the first non-finite row in
// batch order: token 9's embedding holds a NaN, so the rows of sequences 2 and 3 (which start
// with it) are NaN, while the rows of sequences 0 and 1 before them in the batch are finite.
TEST(NonFiniteLogits, a_many_row_step_names_the_first_bad_row_in_batch_order) {
  const auto dir = test::temp_dir();
  const auto model =
      Model::load(test::write_tokenized_model(planted(f32_spec(), "token_embd.weight", 9, 3, kNaN), dir, 300).string());
  EngineConfig cfg = small_config();
  cfg.n_threads = 2;
  Engine engine(model, cfg);
  Batch b;
  const auto add = [&](int32_t seq, std::vector<int32_t> toks) {
    for (size_t i = 0; i < toks.size(); ++i) {
      b.tokens.push_back(toks[i]);
      b.positions.push_back(static_cast<int32_t>(i));
      b.seq_ids.push_back(seq);
      b.logits.push_back(1);
    }
  };
  add(0, {5, 6, 7});
  add(1, {4, 4});
  add(2, {9, 12, 13});
  add(3, {9, 10});
  EXPECT_EQ(test::error_of([&] { (void)engine.forward(b); }),
            "batch of 10 tokens (position 0, sequence 2): logits contain NaN (first at vocab id 0); the model's "
            "weights or activations are not finite");
}

TEST(NonFiniteLogits, perplexity_of_a_nan_model_is_an_error_not_nan) {
  const auto dir = test::temp_dir();
  const auto model = Model::load(
      test::write_tokenized_model(planted(f32_spec(), "output_norm.weight", 0, 0, kNaN), dir, 300).string());
  Engine engine(model, small_config());
  std::vector<int32_t> tokens(64);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7 % 256);
  // Chunks of 16 score positions 8..14 of each.
  EXPECT_EQ(test::error_of([&] { (void)perplexity(engine, tokens, 16, -1); }),
            "perplexity chunk 1 of 4 (position 8): logits contain NaN (first at vocab id 0); the model's weights "
            "or activations are not finite");
}

// The last line of `out` (without its newline).
std::string last_line(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  const size_t nl = s.rfind('\n');
  return nl == std::string::npos ? s : s.substr(nl + 1);
}

TEST(NonFiniteLogits, run_and_perplexity_exit_1_with_one_line_naming_the_step) {
  const auto dir = test::temp_dir();
  const auto clean = dir / "clean";
  const auto bad = dir / "bad";
  std::filesystem::create_directories(clean);
  std::filesystem::create_directories(bad);
  // run: the prompt "hi" is clean, the first greedy token's embedding is NaN.
  const auto clean_path = test::write_tokenized_model(f32_spec(), clean, 300);
  const auto tk_model = Model::load(clean_path.string());
  const std::vector<int32_t> prompt = tk_model->tokenizer()->encode("hi", true, true);
  const int32_t g = first_greedy_token(clean_path, prompt);
  ASSERT_TRUE(std::find(prompt.begin(), prompt.end(), g) == prompt.end()) << g;
  const auto path = test::write_tokenized_model(planted(f32_spec(), "token_embd.weight", g, 0, kNaN), bad, 300);
  const std::string bin = "timeout 120 " + test::minfer_bin();
  const test::CommandResult r =
      test::run_shell(bin + " run -m " + path.string() + " -p hi -n 4 --temp 0 -c 64 -t 1 --no-display-prompt");
  EXPECT_EQ(r.status, 1) << r.out;
  // The last line: the token sampled before the failing step (printed as it came), then the error.
  EXPECT_CONTAINS(last_line(r.out), fmt::format("minfer: error: decode step 1 (position {}): logits contain NaN "
                                                "(first at vocab id 0); the model's weights or activations are "
                                                "not finite",
                                                prompt.size()));

  // perplexity: every row is NaN; no "nan" estimate is printed.
  const auto nan_path =
      test::write_tokenized_model(planted(f32_spec(), "output_norm.weight", 0, 0, kNaN), bad, 300);
  const auto text = dir / "text.txt";
  std::ofstream(text) << std::string(400, 'a') << "\n";
  const test::CommandResult p = test::run_shell(bin + " perplexity -m " + nan_path.string() + " -f " +
                                                text.string() + " -c 16 -t 1");
  EXPECT_EQ(p.status, 1) << p.out;
  EXPECT_CONTAINS(last_line(p.out), "minfer: error: perplexity chunk 1 of ");
  EXPECT_CONTAINS(last_line(p.out), " (position 8): logits contain NaN (first at vocab id 0)");
  EXPECT_EQ(p.out.find("nan"), std::string::npos) << p.out;
}

}  // namespace
}  // namespace minfer
