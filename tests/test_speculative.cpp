// Speculative decoding (engine/speculative.h): greedy output equals the target's own greedy output
// token for token on the demo/draft pair, the sampling rule keeps the target's distribution,
// mismatched vocabularies are refused, a context that fills mid-speculation ends cleanly, and
// the run/chat options parse.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "convert/synth_vocab.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "models/model.h"
#include "synth_model.h"
#include "test_util.h"
#include "speculative_test_util.h"
#include "tokenizer_test_util.h"

namespace minfer {
namespace {

using test::fixed_draft;
using test::greedy_tokens;
using test::kCodePrompts;
constexpr const char* kTarget = test::kSpecTarget;
constexpr const char* kDraft = test::kSpecDraft;

/// The demo target and its draft on the CPU, loaded once for the suite. One thread: ctest runs two
/// tests at a time on the 2-core CI machine, and two-thread engines sharing the cores with another
/// test ran 9x slower than alone (their threads wait on each other): the every-draft-length test
/// took 12.7 s alone with 2 threads, 110 s under ctest -j2, 21.9 s with 1 thread beside a 2-job build.
class SpeculativeCpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(test::shared_path(kTarget)) || !std::filesystem::exists(test::shared_path(kDraft)))
      return;
    target_model_ = Model::load(test::shared_path(kTarget).string());
    draft_model_ = Model::load(test::shared_path(kDraft).string());
    EngineConfig cfg;
    cfg.n_threads = 1;
    cfg.n_ctx = 512;
    target_ = std::make_unique<Engine>(target_model_, cfg);
    draft_ = std::make_unique<Engine>(draft_model_, cfg);
  }
  static void TearDownTestSuite() {
    target_.reset();
    draft_.reset();
    target_model_.reset();
    draft_model_.reset();
  }
  void SetUp() override {
    MINFER_REQUIRE_SHARED(kTarget);
    MINFER_REQUIRE_SHARED(kDraft);
  }

  static std::vector<int32_t> encode(const char* text) {
    return target_model_->tokenizer()->encode(text, /*add_special=*/true, /*parse_special=*/false);
  }

  static std::shared_ptr<const Model> target_model_, draft_model_;
  static std::unique_ptr<Engine> target_, draft_;
};
std::shared_ptr<const Model> SpeculativeCpu::target_model_, SpeculativeCpu::draft_model_;
std::unique_ptr<Engine> SpeculativeCpu::target_, SpeculativeCpu::draft_;

// Verification reads k tokens' logits from one batched forward where plain decoding reads them
// from k one-token forwards: greedy identity needs the two to agree. On the CPU they are equal
// bit for bit (each output row's dot products run over the same weights in the same order
// whatever the number of tokens, and attention over a token's visible cells is per token).
TEST_F(SpeculativeCpu, BatchedForwardLogitsEqualOneTokenSteps) {
  Engine& e = *target_;
  const std::vector<int32_t> prompt = encode(kCodePrompts[0]);
  const std::vector<int32_t> next = {28, 284, 4711, 1124, 262, 470, 5144, 13, 220, 17, 11, 25};  // any ids
  const auto row = static_cast<size_t>(e.n_vocab());
  e.reset();
  e.decode(prompt);
  std::vector<float> steps;
  for (const int32_t t : next) {
    const int32_t one[1] = {t};
    const std::vector<float> l = e.decode(one);
    steps.insert(steps.end(), l.begin(), l.end());
  }
  e.truncate(static_cast<int32_t>(prompt.size()));
  const std::vector<float> batched = e.decode(next, /*all_logits=*/true);
  ASSERT_EQ(batched.size(), next.size() * row);
  for (size_t i = 0; i < next.size(); ++i)
    ASSERT_EQ(std::memcmp(steps.data() + i * row, batched.data() + i * row, row * sizeof(float)), 0)
        << "logits of token " << i << " of a " << next.size() << "-token batch differ from its one-token step";
}

// Every draft length 1..16 (fixed, p-min off) on one prompt x 24 tokens (the five-prompt test
// below covers 128 tokens on a few lengths: a fixed long draft of a weak pair costs ~k target
// tokens per round on the CPU, and the CI has 2 cores).
TEST_F(SpeculativeCpu, GreedyDraftEqualsTargetGreedyForEveryDraftLength) {
  const auto t0 = std::chrono::steady_clock::now();
  Session session(*target_, *target_model_->tokenizer());
  for (int pi = 0; pi < 1; ++pi) {
    const std::vector<int32_t> prompt = encode(kCodePrompts[pi]);
    const std::vector<int32_t> want = greedy_tokens(session, prompt, 24, nullptr);
    ASSERT_EQ(want.size(), 24u);
    for (int32_t k = 1; k <= 16; ++k) {
      Speculator spec(*draft_, draft_model_->tokenizer()->n_vocab(), fixed_draft(k), SamplerParams{}, 0.5);
      GenerateStats st;
      EXPECT_EQ(greedy_tokens(session, prompt, 24, &spec, &st), want) << "prompt " << pi << ", draft length " << k;
      EXPECT_GT(st.drafted, 0);
      EXPECT_LE(st.accepted, st.drafted);
      EXPECT_EQ(st.generated_tokens, 24);
    }
  }
  std::printf("[ timing ] 1 prompt x 24 tokens x 16 draft lengths: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// Verification cut into forwards of 3 tokens (what the CUDA target does at 8): greedy output is
// still the target's, draft and lookup, and a round that drafts 7 runs up to 3 forwards.
TEST_F(SpeculativeCpu, VerifyInPiecesKeepsGreedyIdentity) {
  Session session(*target_, *target_model_->tokenizer());
  const std::vector<int32_t> prompt = encode(kCodePrompts[3]);
  const std::vector<int32_t> want = greedy_tokens(session, prompt, 32, nullptr);
  for (const int32_t k : {2, 7, 16}) {
    SpeculativeParams p = fixed_draft(k);
    p.verify_max = 3;
    Speculator spec(*draft_, draft_model_->tokenizer()->n_vocab(), p, SamplerParams{}, 0.5);
    GenerateStats st;
    EXPECT_EQ(greedy_tokens(session, prompt, 32, &spec, &st), want) << "draft length " << k;
    EXPECT_GT(st.drafted, 0);
    EXPECT_EQ(static_cast<size_t>(target_->n_past()), session.tokens().size());
  }
  SpeculativeParams p = fixed_draft(6);
  p.lookup_n = 2;
  p.verify_max = 2;
  Speculator spec(p, SamplerParams{});
  GenerateStats st;
  EXPECT_EQ(greedy_tokens(session, prompt, 32, &spec, &st), want) << "lookup";
}

// Five code prompts x 128 tokens: draft length 2, the adaptive default, and lookup (fixed 4 and
// adaptive).
TEST_F(SpeculativeCpu, GreedyDraftAndLookupEqualTargetGreedyOnFivePrompts) {
  const auto t0 = std::chrono::steady_clock::now();
  Session session(*target_, *target_model_->tokenizer());
  int64_t drafted = 0, accepted = 0, lookup_drafted = 0;
  for (const char* text : kCodePrompts) {
    const std::vector<int32_t> prompt = encode(text);
    const std::vector<int32_t> want = greedy_tokens(session, prompt, 128, nullptr);
    ASSERT_EQ(want.size(), 128u);
    for (const int32_t k : {2, 0}) {
      SpeculativeParams p = k > 0 ? fixed_draft(k) : SpeculativeParams{};
      Speculator spec(*draft_, draft_model_->tokenizer()->n_vocab(), p, SamplerParams{}, 0.5);
      GenerateStats st;
      EXPECT_EQ(greedy_tokens(session, prompt, 128, &spec, &st), want) << text << "draft length " << k << " (0: adaptive)";
      drafted += st.drafted;
      accepted += st.accepted;
    }
    for (const bool adaptive : {false, true}) {
      SpeculativeParams p = fixed_draft(4);
      p.lookup_n = 2;
      p.adaptive = adaptive;
      Speculator spec(p, SamplerParams{});
      GenerateStats st;
      EXPECT_EQ(greedy_tokens(session, prompt, 128, &spec, &st), want) << text << "lookup, adaptive " << adaptive;
      lookup_drafted += st.drafted;
    }
  }
  EXPECT_GT(accepted, 0) << "the draft never agreed with the target: the pair is not being exercised";
  EXPECT_LT(accepted, drafted);
  EXPECT_GT(lookup_drafted, 0);
  std::printf("[ timing ] 5 prompts x 128 tokens x 4 configurations: %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// A context that fills during speculation: verify batches are capped to the free cells and the
// generation stops with "context" (no shift) or shifts and goes on; nothing throws.
TEST_F(SpeculativeCpu, ContextFillingDuringSpeculationEndsCleanly) {
  EngineConfig cfg;
  cfg.n_threads = 1;
  cfg.n_ctx = 48;
  Engine target(target_model_, cfg);
  Engine draft(draft_model_, cfg);
  const std::vector<int32_t> prompt = encode(kCodePrompts[2]);
  Session plain(target, *target_model_->tokenizer());
  const std::vector<int32_t> want = greedy_tokens(plain, prompt, -1, nullptr);
  for (const int32_t k : {16, 5}) {
    Session session(target, *target_model_->tokenizer());
    Speculator spec(draft, draft_model_->tokenizer()->n_vocab(), fixed_draft(k), SamplerParams{}, 0.5);
    GenerateStats st;
    const std::vector<int32_t> got = greedy_tokens(session, prompt, -1, &spec, &st);
    EXPECT_EQ(st.stop_reason, "context");
    EXPECT_EQ(got, want) << "draft length " << k;
    EXPECT_LT(target.n_past(), target.n_ctx());
    EXPECT_EQ(static_cast<size_t>(target.n_past()), session.tokens().size());
  }
  // With context shift: 100 tokens through a 48-cell context.
  Session session(target, *target_model_->tokenizer());
  session.set_context_shift(4);
  Speculator spec(draft, draft_model_->tokenizer()->n_vocab(), fixed_draft(16), SamplerParams{}, 0.5);
  GenerateStats st;
  EXPECT_EQ(greedy_tokens(session, prompt, 100, &spec, &st).size(), 100u);
  EXPECT_EQ(st.stop_reason, "length");
  EXPECT_GT(session.shifts(), 0);
  EXPECT_EQ(static_cast<size_t>(target.n_past()), session.tokens().size());
}

// Sampling with the same model as target and draft: q = p, so every drafted token is accepted
// (min(1, p/q) = 1), whatever the temperature.
TEST_F(SpeculativeCpu, SampledDraftEqualToTargetAcceptsEverything) {
  SamplerParams sp;
  sp.temp = 0.9f;
  sp.seed = 5;
  Sampler sampler(sp);
  Session session(*target_, *target_model_->tokenizer());
  // The draft: a second engine of the target's model.
  EngineConfig cfg;
  cfg.n_threads = 1;
  cfg.n_ctx = 512;
  Engine same(target_model_, cfg);
  Speculator self(same, target_model_->tokenizer()->n_vocab(), fixed_draft(4), sp, 1.0);
  GenerateOptions opt;
  opt.max_tokens = 48;
  opt.stop_at_eog = false;
  opt.speculator = &self;
  GenerateStats st;
  session.generate(encode(kCodePrompts[1]), sampler, opt, {}, &st);
  EXPECT_EQ(st.generated_tokens, 48);
  EXPECT_GT(st.drafted, 0);
  EXPECT_EQ(st.accepted, st.drafted);
}

// ---- the sampling rule on toy distributions ----

/// Chi-square statistic of `counts` against probabilities `p` over `n` draws.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
  double x = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * static_cast<double>(n);
    x += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
  }
  return x;
}

// 200,000 rounds of "draw x from q, then speculative_accept" on a 5-token toy pair; the tokens
// come out distributed as p. Bound: the chi-square critical value for 4 degrees of freedom at
// significance 0.001 is 18.467 (any statistics table); a seeded run, so the test is stable.
TEST(SpeculativeRule, AcceptOrResampleGivesTargetDistribution) {
  const std::vector<double> p = {0.40, 0.25, 0.20, 0.10, 0.05};
  const std::vector<double> q = {0.10, 0.30, 0.05, 0.35, 0.20};  // a poor draft
  TokenDistribution pd, qd;
  for (int32_t i = 0; i < 5; ++i) {
    pd.emplace_back(i, p[static_cast<size_t>(i)]);
    qd.emplace_back(i, q[static_cast<size_t>(i)]);
  }
  SamplerParams sp;
  sp.seed = 12345;
  Sampler target(sp);
  sp.seed = 678;
  Sampler draft(sp);
  constexpr int64_t kN = 200000;
  std::vector<int64_t> counts(5, 0), plain(5, 0);
  int64_t accepted = 0;
  for (int64_t r = 0; r < kN; ++r) {
    const int32_t x = draft.draw(qd);
    bool ok = false;
    counts[static_cast<size_t>(speculative_accept(pd, &qd, x, target, &ok))]++;
    accepted += ok;
    // Point-mass draft (prompt lookup): propose token 3 always.
    plain[static_cast<size_t>(speculative_accept(pd, nullptr, 3, target, &ok))]++;
  }
  EXPECT_LT(chi_square(counts, p, kN), 18.467);
  EXPECT_LT(chi_square(plain, p, kN), 18.467);
  // Acceptance rate is sum_x min(p(x), q(x)) = 0.10 + 0.25 + 0.05 + 0.10 + 0.05 = 0.55;
  // binomial standard deviation sqrt(0.55 * 0.45 / 2e5) = 0.0011: 5 sigma is 0.0056.
  EXPECT_NEAR(static_cast<double>(accepted) / kN, 0.55, 0.0056);
  // And the rule is not vacuous: the draft's own distribution fails the same test.
  std::vector<int64_t> q_counts(5, 0);
  for (int64_t r = 0; r < kN; ++r) q_counts[static_cast<size_t>(draft.draw(qd))]++;
  EXPECT_GT(chi_square(q_counts, p, kN), 18.467);
}

// ---- vocabularies ----

/// A tiny model whose tokenizer has the 256 bytes and then `added` (the last one special).
std::string model_with_vocab(const std::filesystem::path& dir, const std::vector<std::string>& added, uint32_t seed) {
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, bool>> a;
  for (size_t i = 0; i < added.size(); ++i) a.emplace_back(added[i], i + 1 == added.size());
  const auto json = dir / "tokenizer.json";
  test::write_tokenizer_json(test::tiny_vocab({}, a), json, /*pair_merges=*/false);
  test::SynthSpec spec;
  spec.n_vocab = 256 + static_cast<int64_t>(added.size());
  spec.n_embd = 64;
  spec.n_head = 2;
  spec.n_head_kv = 1;
  spec.head_dim = 32;
  spec.n_ff = 128;
  spec.n_layer = 1;
  spec.seed = seed;
  const int64_t n = spec.n_vocab;
  spec.extra_metadata = [json, n](gguf::GgufWriter& w) { convert::add_vocab_metadata(w, json.string(), n); };
  return test::write_synth_model(spec, dir).string();
}

TEST(SpeculativeVocab, MismatchedVocabulariesAreRefusedNamingTheToken) {
  const auto dir = test::temp_dir();
  const std::string a = model_with_vocab(dir / "a", {"<x>", "<y>", "<|endoftext|>"}, 1);
  const std::string b = model_with_vocab(dir / "b", {"<x>", "<z>", "<|endoftext|>"}, 2);
  const std::string c = model_with_vocab(dir / "c", {"<x>", "<y>", "<w>", "<|endoftext|>"}, 3);
  const std::string a2 = model_with_vocab(dir / "a2", {"<x>", "<y>", "<|endoftext|>"}, 4);
  const auto ma = Model::load(a), mb = Model::load(b), mc = Model::load(c), ma2 = Model::load(a2);
  EXPECT_NO_THROW(check_vocab_compatible(*ma->tokenizer(), *ma2->tokenizer(), a, a2));
  try {
    check_vocab_compatible(*ma->tokenizer(), *mb->tokenizer(), a, b);
    ADD_FAILURE() << "different token 257 accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("token 257 is '<y>' in the target and '<z>' in the draft"), std::string::npos) << m;
    EXPECT_NE(m.find(b), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  try {
    check_vocab_compatible(*ma->tokenizer(), *mc->tokenizer(), a, c);
    ADD_FAILURE() << "different token 258 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 258 is '<|endoftext|>' in the target and '<w>' in the draft"),
              std::string::npos) << e.what();
  }
  // Same texts, one more token: the first id only one of them has.
  const std::string d = model_with_vocab(dir / "d", {"<x>", "<y>", "<|endoftext|>", "<v>"}, 5);
  const auto md = Model::load(d);
  try {
    check_vocab_compatible(*ma->tokenizer(), *md->tokenizer(), a, d);
    ADD_FAILURE() << "a longer draft vocabulary accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 259 is '<v>' in the draft and absent from the target"),
              std::string::npos) << e.what();
  }
  // The command refuses it in one line, exit status 1.
  const test::CommandResult r =
      test::run_shell(test::minfer_bin() + " run -m " + a + " -md " + b + " -p hi -n 4 -t 1 -c 64");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("minfer: error: draft model"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("token 257"), std::string::npos) << r.out;
}

// ---- the command-line options ----

TEST(SpeculativeCli, OptionsParseInBothSpellingsAndBadValuesAreOneLineErrors) {
  const std::string bin = test::minfer_bin();
  const std::string model = test::repo_demo_model();
  const std::string base = bin + " run -m " + model + " -p 'def add(a, b):\n' -n 24 --temp 0 -t 1 -c 256";
  // The generated text: from the echoed prompt to the summary (the "loaded" lines differ).
  const auto text = [](const std::string& out) {
    const size_t at = std::min(out.find("def add("), out.size());
    return out.substr(at, out.find("minfer: prompt") - std::min(at, out.find("minfer: prompt")));
  };
  const test::CommandResult plain = test::run_shell(base + " 2>/dev/null");
  ASSERT_EQ(plain.status, 0) << plain.out;
  // The model as its own draft: greedy, every draft is accepted.
  for (const std::string& flags : {" -md " + model + " --spec-draft-n-max 4 --spec-draft-n-min 1 --spec-draft-p-min 0",
                                  " --model-draft " + model + " --draft-max 4 --draft-min 1 --draft-p-min 0"}) {
    const test::CommandResult r = test::run_shell(base + flags);
    ASSERT_EQ(r.status, 0) << flags << "\n" << r.out;
    EXPECT_NE(r.out.find("speculative (draft model): drafted"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(100.0%)"), std::string::npos) << r.out;
    EXPECT_EQ(text(test::run_shell(base + flags + " 2>/dev/null").out), text(plain.out)) << flags;
  }
  for (const std::string& flags : {std::string(" --lookup 2"), std::string(" --spec-type ngram-simple"),
                                    std::string(" --spec-type NGRAM-Simple")}) {
    const test::CommandResult r = test::run_shell(base + flags);
    ASSERT_EQ(r.status, 0) << flags << "\n" << r.out;
    EXPECT_NE(r.out.find("speculative (prompt lookup): drafted"), std::string::npos) << r.out;
    EXPECT_EQ(text(test::run_shell(base + flags + " 2>/dev/null").out), text(plain.out)) << flags;
  }
  struct Bad {
    std::string flags, says;
  };
  const Bad bad[] = {
      {" -md /nonexistent/draft.gguf", "/nonexistent/draft.gguf"},
      {" -md " + model + " --spec-draft-n-max 0", "--spec-draft-n-max 0 is out of range"},
      {" -md " + model + " --draft-max abc", "--spec-draft-n-max 'abc' is not a whole number"},
      {" -md " + model + " --draft-min 9 --draft-max 4", "--spec-draft-n-min 9 is not in [0, --spec-draft-n-max 4]"},
      {" -md " + model + " --draft-p-min 1.5", "--spec-draft-p-min '1.5' is not a probability"},
      {" --lookup 0", "--lookup 0 is out of range"},
      {" --spec-type medusa", "--spec-type 'medusa' is not known"},
      {" -md " + model + " --lookup 3", "exclude each other"},
      {" --lookup 3 --spec-type none", "--spec-type none turns speculation off, which contradicts --lookup 3"},
      {" --spec-type NONE -md " + model, "--spec-type none turns speculation off, which contradicts -md/--model-draft"},
      {" -md " + model + " --device-draft tpu", "device 'tpu' is not known"},
  };
  for (const Bad& b : bad) {
    const test::CommandResult r = test::run_shell(base + b.flags);
    EXPECT_EQ(r.status, 1) << b.flags << "\n" << r.out;
    EXPECT_NE(r.out.find(b.says), std::string::npos) << b.flags << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << b.flags << "\n" << r.out;
  }
  // chat takes the same options.
  const test::CommandResult c = test::run_shell("printf 'hi\\n' | " + bin + " chat -m " + model + " -md " + model +
                                                " --draft-max 3 -n 8 --temp 0 -t 1 -c 256 --chat-template chatml");
  EXPECT_EQ(c.status, 0) << c.out;
}

// serve takes prompt lookup and a draft model (docs/server.md); a draft file that cannot be
// opened, both at once and bad values are one-line errors before the port is bound.
TEST(SpeculativeCli, ServeRefusesBadDraftAndLookupValuesInOneLine) {
  const std::string bin = test::minfer_bin();
  const std::string model = test::repo_demo_model();
  const std::filesystem::path fifo = test::temp_dir() / "draft.fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  if (test::run_shell(bin + " serve -m /nonexistent.gguf --port 0 2>&1").out.find("built without the server") !=
      std::string::npos)
    GTEST_SKIP() << "minfer was built without the server";
  struct Bad {
    std::string flags, says;
  };
  const Bad bad[] = {
      {" -md /nonexistent-draft.gguf", "/nonexistent-draft.gguf: cannot open the draft model (-md)"},
      {" -md " + fifo.string(), fifo.string() + ": the draft model (-md) is not a regular file"},  // never waited on
      {" -md " + model + " --lookup 3", "-md/--model-draft and prompt lookup (--lookup, --spec-type ngram-simple) exclude each other"},
      {" -md " + model + " --spec-draft-p-min 2", "--spec-draft-p-min '2' is not a probability"},
      {" --lookup 0", "--lookup 0 is out of range"},
      {" --lookup 2 --spec-draft-n-max 0", "--spec-draft-n-max 0 is out of range"},
      {" --lookup 2 --draft-min 9 --draft-max 4", "--spec-draft-n-min 9 is not in [0, --spec-draft-n-max 4]"},
      {" --spec-type medusa", "--spec-type 'medusa' is not known"},
      {" --spec-type none --lookup 5", "--spec-type none turns speculation off, which contradicts --lookup 5"},
  };
  for (const Bad& b : bad) {
    const test::CommandResult r = test::run_shell("timeout -s KILL 30 " + bin + " serve -m " + model +
                                                  " --host 127.0.0.1 --port 0" + b.flags + " 2>&1");
    EXPECT_EQ(r.status, 1) << b.flags << "\n" << r.out;
    EXPECT_NE(r.out.find(b.says), std::string::npos) << b.flags << "\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << b.flags << "\n" << r.out;
  }
}

}  // namespace
}  // namespace minfer
