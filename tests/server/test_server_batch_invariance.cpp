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

INSTANTIATE_TEST_SUITE_P(KvTypes, ServerBatchInvariance,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::Q8_0),
                         [](const auto& param_info) { return std::string(type_name(param_info.param)); });

}  // namespace
}  // namespace minfer::server
