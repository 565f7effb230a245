// Batch invariance of the server on the CPU: a greedy request's logits are bitwise the same
// whether it runs alone or beside other requests (their decode tokens and prefill chunks in the
// same ubatch, in other slots), and equal to the plain single-sequence Engine path.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/engine.h"
#include "models/model.h"
#include "server/scheduler.h"
#include "../synth_model.h"
#include "../test_util.h"

namespace minfer::server {
namespace {

constexpr int32_t kSlots = 4;
constexpr int32_t kSlotCtx = 96;  // a multiple of 32, not of the 256-cell attention window granule

struct Trace {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  ///< the row each token was sampled from
  bool done = false;
};

std::shared_ptr<Request> traced(std::vector<int32_t> prompt, int32_t max_tokens, std::shared_ptr<Trace> t) {
  auto r = std::make_shared<Request>();
  r->prompt = std::move(prompt);
  r->sampling.temp = 0.0f;
  r->max_tokens = max_tokens;
  r->on_token = [t](int32_t tok, std::span<const float> row) {
    t->tokens.push_back(tok);
    t->logits.emplace_back(row.begin(), row.end());
    return TokenAction::Continue;
  };
  r->on_done = [t](const FinishInfo&) { t->done = true; };
  return r;
}

EngineConfig config(TensorType kv) {
  EngineConfig c;
  c.n_threads = 2;
  c.n_ctx = kSlots * kSlotCtx;
  c.kv_type = kv;
  return c;
}

void run(Scheduler& s) {
  for (int i = 0; i < 2000 && !s.idle(); ++i) s.step();
  ASSERT_TRUE(s.idle());
}

class ServerBatchInvariance : public ::testing::TestWithParam<TensorType> {};

TEST_P(ServerBatchInvariance, GreedyLogitsAreBitwiseEqualAloneAndBesideOtherRequests) {
  test::SynthSpec spec;
  spec.arch = "qwen3";
  spec.type = TensorType::Q4_K;
  auto model = Model::load(test::write_synth_model(spec, test::temp_dir()).string());
  const std::vector<int32_t> prompt = {11, 200, 37, 5, 480, 99, 123, 7, 310, 42, 1, 77, 256, 8, 9, 300, 17};
  constexpr int32_t kGen = 24;

  // Alone: the only request, slot 0.
  Engine e1(model, config(GetParam()));
  EngineStepModel m1(e1, kSlots, kSlotCtx);
  Scheduler s1(m1, SchedulerConfig{kSlots, kSlotCtx, 5, 16});
  auto alone = std::make_shared<Trace>();
  ASSERT_TRUE(s1.submit(traced(prompt, kGen, alone)));
  run(s1);
  ASSERT_EQ(alone->tokens.size(), static_cast<size_t>(kGen));

  // Beside others: two requests start first (slots 0 and 1), ours lands in slot 2 while they
  // decode, a fourth arrives mid-way and prefills in chunks beside our decode steps.
  Engine e2(model, config(GetParam()));
  EngineStepModel m2(e2, kSlots, kSlotCtx);
  Scheduler s2(m2, SchedulerConfig{kSlots, kSlotCtx, 5, 16});
  auto o1 = std::make_shared<Trace>(), o2 = std::make_shared<Trace>(), o3 = std::make_shared<Trace>();
  auto busy = std::make_shared<Trace>();
  ASSERT_TRUE(s2.submit(traced({3, 4, 5, 6, 7, 8, 9}, 40, o1)));
  ASSERT_TRUE(s2.submit(traced({400, 401, 402}, 6, o2)));
  for (int i = 0; i < 4; ++i) s2.step();
  ASSERT_TRUE(s2.submit(traced(prompt, kGen, busy)));
  for (int i = 0; i < 6; ++i) s2.step();
  ASSERT_TRUE(s2.submit(traced(std::vector<int32_t>(30, 21), 10, o3)));
  run(s2);
  ASSERT_EQ(busy->tokens, alone->tokens);
  const size_t nv = static_cast<size_t>(e1.n_vocab());
  for (size_t i = 0; i < alone->logits.size(); ++i)
    ASSERT_EQ(0, std::memcmp(alone->logits[i].data(), busy->logits[i].data(), nv * sizeof(float)))
        << "logits of generated token " << i << " differ beside other requests";

  // The plain single-sequence path (what `minfer run` does) gives the same logits.
  Engine e3(model, config(GetParam()));
  std::vector<float> l = e3.decode(prompt);
  for (size_t i = 0; i < alone->logits.size(); ++i) {
    ASSERT_EQ(0, std::memcmp(alone->logits[i].data(), l.data(), nv * sizeof(float))) << "token " << i;
    const int32_t one[1] = {alone->tokens[i]};
    l = e3.decode(one);
  }
}

// Prompt lookup: drafted tokens verified in the slot's forward give every token the logits of
// decoding without drafts, bitwise, with other requests in the same steps.
TEST_P(ServerBatchInvariance, LookupDraftsKeepGreedyLogitsBitwise) {
  test::SynthSpec spec;
  spec.arch = "qwen3";
  spec.type = TensorType::Q4_K;
  auto model = Model::load(test::write_synth_model(spec, test::temp_dir()).string());
  // A prompt that repeats: its own 2-grams give drafts from the first decode step on.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 3; ++i)
    for (int32_t t : {11, 200, 37, 5, 480, 99, 123, 7}) prompt.push_back(t);
  constexpr int32_t kGen = 40;
  const auto generate = [&](int32_t lookup_n, std::shared_ptr<Trace> mine, std::shared_ptr<Trace> other,
                            int* drafted) {
    Engine e(model, config(GetParam()));
    EngineStepModel m(e, kSlots, kSlotCtx);
    SchedulerConfig sc{kSlots, kSlotCtx, 16, 16};
    sc.lookup_n = lookup_n;
    sc.draft_max = 6;
    Scheduler s(m, sc);
    ASSERT_TRUE(s.submit(traced({3, 4, 5, 6, 7, 8, 9, 3, 4, 5, 6}, 30, other)));
    s.step();
    ASSERT_TRUE(s.submit(traced(prompt, kGen, mine)));
    for (int i = 0; i < 2000 && !s.idle(); ++i) {
      StepReport rep;
      s.step(&rep);
      *drafted += rep.draft_tokens;
    }
    ASSERT_TRUE(s.idle());
  };
  auto plain = std::make_shared<Trace>(), spec_t = std::make_shared<Trace>();
  auto plain_o = std::make_shared<Trace>(), spec_o = std::make_shared<Trace>();
  int plain_drafted = 0, drafted = 0;
  generate(0, plain, plain_o, &plain_drafted);
  generate(2, spec_t, spec_o, &drafted);
  EXPECT_EQ(plain_drafted, 0);
  EXPECT_GT(drafted, 0);
  ASSERT_EQ(plain->tokens.size(), static_cast<size_t>(kGen));
  ASSERT_EQ(spec_t->tokens, plain->tokens);
  ASSERT_EQ(spec_o->tokens, plain_o->tokens);
  const size_t nv = plain->logits.front().size();
  for (size_t i = 0; i < plain->logits.size(); ++i)
    ASSERT_EQ(0, std::memcmp(plain->logits[i].data(), spec_t->logits[i].data(), nv * sizeof(float)))
        << "logits of generated token " << i << " differ with lookup drafts";
  for (size_t i = 0; i < plain_o->logits.size(); ++i)
    ASSERT_EQ(0, std::memcmp(plain_o->logits[i].data(), spec_o->logits[i].data(), nv * sizeof(float)))
        << "logits of the other request's token " << i << " differ";
}

// A draft model (here a second engine of another synth model with the same vocabulary, and
// one of the target's own file): its drafts, verified in the slot's forward, leave every token's
// logits those of decoding without drafts, bitwise, beside another request; the target's own file
// as the draft is kept at every greedy position.
TEST_P(ServerBatchInvariance, DraftModelKeepsGreedyLogitsBitwise) {
  test::SynthSpec spec;
  spec.arch = "qwen3";
  spec.type = TensorType::Q4_K;
  const std::string target_path = test::write_synth_model(spec, test::temp_dir()).string();
  auto model = Model::load(target_path);
  test::SynthSpec other = spec;
  other.seed = spec.seed + 17;
  other.type = TensorType::Q8_0;
  auto other_model = Model::load(test::write_synth_model(other, test::temp_dir()).string());
  const std::vector<int32_t> prompt = {11, 200, 37, 5, 480, 99, 123, 7, 310, 42};
  constexpr int32_t kGen = 32;
  const auto generate = [&](std::shared_ptr<const Model> draft_model, std::shared_ptr<Trace> mine,
                            std::shared_ptr<Trace> o, int* drafted, int* accepted) {
    Engine e(model, config(GetParam()));
    EngineStepModel m(e, kSlots, kSlotCtx);
    std::unique_ptr<Engine> de;
    std::unique_ptr<EngineStepModel> dm;
    if (draft_model) {
      de = std::make_unique<Engine>(draft_model, config(GetParam()));
      dm = std::make_unique<EngineStepModel>(*de, kSlots, kSlotCtx);
    }
    SchedulerConfig sc{kSlots, kSlotCtx, 16, 16};
    sc.draft_max = 5;
    sc.draft_p_min = 0.0f;  // a synth model's rows are flat: draft at every position
    Scheduler s(m, sc, dm.get());
    ASSERT_TRUE(s.submit(traced({3, 4, 5, 6, 7, 8, 9, 3, 4, 5, 6}, 20, o)));
    s.step();
    ASSERT_TRUE(s.submit(traced(prompt, kGen, mine)));
    for (int i = 0; i < 2000 && !s.idle(); ++i) {
      StepReport rep;
      s.step(&rep);
      *drafted += rep.draft_tokens;
      *accepted += rep.draft_accepted;
    }
    ASSERT_TRUE(s.idle());
  };
  auto plain = std::make_shared<Trace>(), plain_o = std::make_shared<Trace>();
  int n0 = 0, a0 = 0;
  generate(nullptr, plain, plain_o, &n0, &a0);
  ASSERT_EQ(plain->tokens.size(), static_cast<size_t>(kGen));
  EXPECT_EQ(n0, 0);
  const size_t nv = plain->logits.front().size();
  for (const auto& [name, dmodel] : {std::pair{"the target's own file", model}, std::pair{"another model", other_model}}) {
    auto t = std::make_shared<Trace>(), o = std::make_shared<Trace>();
    int drafted = 0, accepted = 0;
    generate(dmodel, t, o, &drafted, &accepted);
    EXPECT_GT(drafted, 0) << name;
    ASSERT_EQ(t->tokens, plain->tokens) << name;
    ASSERT_EQ(o->tokens, plain_o->tokens) << name;
    for (size_t i = 0; i < plain->logits.size(); ++i)
      ASSERT_EQ(0, std::memcmp(plain->logits[i].data(), t->logits[i].data(), nv * sizeof(float)))
          << name << ": logits of generated token " << i << " differ with drafts";
    for (size_t i = 0; i < plain_o->logits.size(); ++i)
      ASSERT_EQ(0, std::memcmp(plain_o->logits[i].data(), o->logits[i].data(), nv * sizeof(float)))
          << name << ": logits of the other request's token " << i << " differ";
    if (dmodel == model) {
      EXPECT_EQ(accepted, drafted) << name;  // greedy drafts of the target itself
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KvTypes, ServerBatchInvariance,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::Q8_0),
                         [](const auto& param_info) { return std::string(type_name(param_info.param)); });

}  // namespace
}  // namespace minfer::server
