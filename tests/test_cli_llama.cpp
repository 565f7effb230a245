// The commands on the llama fixture models (../shared/fixtures/models): run, chat, bench,
// perplexity and quantize work on the llama architecture as on Qwen, and perplexity puts BOS
// first in every chunk for a vocabulary that adds one (llama-perplexity's rule).
#include <gtest/gtest.h>

#include <fstream>

#include "cli_test_util.h"
#include "engine/engine.h"
#include "engine/perplexity.h"
#include "models/model.h"
#include "test_util.h"

namespace minfer {
namespace {

constexpr const char* kMistral = "fixtures/models/mistral-tiny-Q8_0.gguf";
constexpr const char* kLlama3 = "fixtures/models/llama3-tiny-Q8_0.gguf";

std::string cli(const std::string& args) { return test::minfer_bin() + " " + args; }

TEST(CliLlama, RunChatAndBenchWorkOnTheLlamaFixtures) {
  MINFER_REQUIRE_SHARED(kMistral);
  MINFER_REQUIRE_SHARED(kLlama3);
  const std::string mistral = test::shared_path(kMistral).string(), llama3 = test::shared_path(kLlama3).string();
  auto r = test::run_shell(cli("run -m " + mistral + " -p 'The capital of France is' -n 8 --temp 0 -t 2"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("generated"), std::string::npos) << r.out;
  const std::string tdir = std::string(MINFER_SOURCE_DIR) + "/tests/data/chat_templates/";
  r = test::run_shell("printf 'Hi\\nAnd then?\\n/exit\\n' | " +
                      cli("chat -m " + mistral + " -n 4 --temp 0 -t 2 --chat-template " + tdir + "mistral-instruct.jinja"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("reused"), std::string::npos) << r.out;
  r = test::run_shell("printf 'Hi\\n/exit\\n' | " +
                      cli("chat -m " + llama3 + " -n 4 --temp 0 -t 2 --chat-template " + tdir + "llama3.jinja"));
  EXPECT_EQ(r.status, 0) << r.out;
  r = test::run_shell(cli("bench -m " + llama3 + " -p 16 -n 4 -r 1 -t 2 -o csv"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("llama"), std::string::npos) << r.out;
}

TEST(CliLlama, QuantizedLlamaKeepsItsFrequencyFactorsAndRuns) {
  MINFER_REQUIRE_SHARED(kLlama3);
  const auto out = (test::temp_dir() / "llama3-q4_0.gguf").string();
  auto r = test::run_shell(cli("quantize " + test::shared_path(kLlama3).string() + " " + out + " --type q4_0"));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto m = Model::load(out);
  EXPECT_EQ(m->weight("rope_freqs.weight").type, TensorType::F32);
  EXPECT_TRUE(m->hparams().has_rope_freqs);
  r = test::run_shell(cli("run -m " + out + " -p 'Hello' -n 4 --temp 0 -t 2"));
  EXPECT_EQ(r.status, 0) << r.out;
}

TEST(CliLlama, PerplexityPutsBosFirstInEveryChunk) {
  MINFER_REQUIRE_SHARED(kMistral);
  const auto model = Model::load(test::shared_path(kMistral).string());
  EngineConfig cfg;
  cfg.n_threads = 2;
  cfg.n_ctx = 32;
  cfg.kv_type = TensorType::F32;
  Engine e(model, cfg);
  std::vector<int32_t> ids;
  for (int i = 0; i < 64; ++i) ids.push_back(300 + (i * 37) % 500);
  std::vector<int32_t> with_bos = ids;
  with_bos[0] = with_bos[32] = 1;
  const PerplexityResult a = perplexity(e, ids, 32, -1, {}, 1);
  const PerplexityResult b = perplexity(e, with_bos, 32, -1, {}, -1);
  const PerplexityResult c = perplexity(e, ids, 32, -1, {}, -1);
  EXPECT_EQ(a.ppl, b.ppl);
  EXPECT_NE(a.ppl, c.ppl);  // the second chunk's first token matters
  // And the command passes the vocabulary's BOS: a text of two chunks runs.
  const auto text = (test::temp_dir() / "t.txt").string();
  std::ofstream(text) << "The quick brown fox jumps over the lazy dog while the sun sets behind the hills. "
                         "A second sentence makes the text long enough for two chunks of thirty-two tokens each.";
  const auto r = test::run_shell(cli("perplexity -m " + test::shared_path(kMistral).string() + " -f " + text + " -c 32 -t 2"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("Final estimate"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace minfer
