// The server's request scheduler in-process, with a fake model: batch formation, chunked
// prefill, prefix reuse, LRU slot choice, cancellation, the bounded queue, errors, and prompt
// lookup and draft-model speculation.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "core/error.h"
#include "server/scheduler.h"

namespace minfer::server {
namespace {

constexpr int64_t kVocab = 64;

/// A model whose greedy next token is (last input token of the sequence + 1) % kVocab; it
/// records every batch and what each sequence holds, and checks that positions are contiguous.
class FakeModel : public StepModel {
 public:
  std::vector<Batch> batches;
  std::map<int32_t, std::vector<int32_t>> held;  ///< seq -> tokens at positions 0..n-1
  std::vector<std::pair<int32_t, int32_t>> keeps;  ///< keep_prefix calls
  bool fail_next = false;
  /// > 0: the row also gives (token + 2) % kVocab this logit (sampling then has two likely tokens).
  float second = 0.0f;
  int64_t exact = INT32_MAX;  ///< exact_step_tokens()
  /// The greedy next token after `t`; (t + 1) % kVocab when empty (a draft model that agrees
  /// with the target sometimes sets its own).
  std::function<int32_t(int32_t)> rule;

  std::span<const float> forward(const Batch& b) override {
    if (fail_next) {
      fail_next = false;
      fail("fake forward failure");
    }
    batches.push_back(b);
    out_.clear();
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      std::vector<int32_t>& h = held[b.seq_ids[i]];
      EXPECT_EQ(static_cast<size_t>(b.positions[i]), h.size()) << "seq " << b.seq_ids[i];
      h.push_back(b.tokens[i]);
      if (b.logits[i]) {
        std::vector<float> row(kVocab, 0.0f);
        row[static_cast<size_t>(rule ? rule(b.tokens[i]) : (b.tokens[i] + 1) % kVocab)] = 10.0f;
        if (second > 0.0f) row[static_cast<size_t>((b.tokens[i] + 2) % kVocab)] = second;
        out_.insert(out_.end(), row.begin(), row.end());
      }
    }
    return out_;
  }
  void keep_prefix(int32_t seq, int32_t n) override {
    keeps.emplace_back(seq, n);
    std::vector<int32_t>& h = held[seq];
    if (static_cast<int32_t>(h.size()) > n) h.resize(static_cast<size_t>(n));
  }
  int64_t n_vocab() const override { return kVocab; }
  int64_t exact_step_tokens() const override { return exact; }

 private:
  std::vector<float> out_;
};

struct Recorded {
  std::vector<int32_t> tokens;
  bool done = false;
  FinishInfo fin;
};

std::shared_ptr<Request> greedy_request(std::vector<int32_t> prompt, int32_t max_tokens, std::shared_ptr<Recorded> rec) {
  auto r = std::make_shared<Request>();
  r->prompt = std::move(prompt);
  r->sampling.temp = 0.0f;
  r->max_tokens = max_tokens;
  r->on_token = [rec](int32_t t, std::span<const float>) {
    rec->tokens.push_back(t);
    return TokenAction::Continue;
  };
  r->on_done = [rec](const FinishInfo& f) {
    rec->done = true;
    rec->fin = f;
  };
  return r;
}

SchedulerConfig config(int32_t slots, int32_t chunk, int32_t slot_ctx = 64, int32_t max_queue = 8) {
  SchedulerConfig c;
  c.n_slots = slots;
  c.chunk = chunk;
  c.slot_ctx = slot_ctx;
  c.max_queue = max_queue;
  return c;
}

void run_until_idle(Scheduler& s, int max_steps = 1000) {
  for (int i = 0; i < max_steps && !s.idle(); ++i) s.step();
  ASSERT_TRUE(s.idle()) << "scheduler did not finish within " << max_steps << " steps";
}

TEST(ServerScheduler, DecodeTokensOfAllSlotsAndThePrefillBudgetShareAStep) {
  FakeModel m;
  Scheduler s(m, config(3, 4));
  auto a = std::make_shared<Recorded>(), b = std::make_shared<Recorded>(), c = std::make_shared<Recorded>();
  ASSERT_TRUE(s.submit(greedy_request({1, 2}, 5, a)));
  ASSERT_TRUE(s.submit(greedy_request({10, 11, 12, 13, 14, 15, 16, 17, 18, 19}, 5, b)));
  ASSERT_TRUE(s.submit(greedy_request({30}, 5, c)));
  StepReport r;
  // Step 1: a's whole prompt (2 tokens, the oldest), then b's first 2: the budget of 4 is full.
  ASSERT_TRUE(s.step(&r));
  EXPECT_EQ(r.decode_tokens, 0);
  EXPECT_EQ(r.prefill_tokens, 4);
  EXPECT_EQ(r.prefill_slot, 0);
  EXPECT_EQ(r.prefill_slots, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ((std::vector<uint8_t>(m.batches.back().logits.begin(), m.batches.back().logits.end())),
            (std::vector<uint8_t>{0, 1, 0, 0}));
  // Step 2: a decodes first, then b's next chunk of 4.
  ASSERT_TRUE(s.step(&r));
  EXPECT_EQ(r.decode_tokens, 1);
  EXPECT_EQ(r.prefill_tokens, 4);
  EXPECT_EQ(r.prefill_slots, (std::vector<int32_t>{1}));
  const Batch& b2 = m.batches.back();
  ASSERT_EQ(b2.tokens.size(), 5u);
  EXPECT_EQ(b2.tokens[0], 3);  // a's sampled token (2 + 1) first
  EXPECT_EQ(b2.seq_ids[0], 0);
  EXPECT_EQ(b2.positions[0], 2);
  EXPECT_EQ((std::vector<int32_t>(b2.tokens.begin() + 1, b2.tokens.end())), (std::vector<int32_t>{12, 13, 14, 15}));
  EXPECT_EQ((std::vector<uint8_t>(b2.logits.begin(), b2.logits.end())), (std::vector<uint8_t>{1, 0, 0, 0, 0}));
  // Step 3: b's last 4 (the logits flag on its last token) use the whole budget: c waits.
  ASSERT_TRUE(s.step(&r));
  EXPECT_EQ(r.prefill_tokens, 4);
  EXPECT_EQ(r.prefill_slots, (std::vector<int32_t>{1}));
  EXPECT_EQ(m.batches.back().logits.back(), 1);
  // Step 4: a and b decode, c prefills.
  ASSERT_TRUE(s.step(&r));
  EXPECT_EQ(r.decode_tokens, 2);
  EXPECT_EQ(r.prefill_slot, 2);
  run_until_idle(s);
  EXPECT_EQ(a->tokens, (std::vector<int32_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(b->tokens, (std::vector<int32_t>{20, 21, 22, 23, 24}));
  EXPECT_EQ(c->tokens, (std::vector<int32_t>{31, 32, 33, 34, 35}));
  EXPECT_EQ(a->fin.reason, FinishReason::Length);
  EXPECT_EQ(a->fin.completion_tokens, 5);
  EXPECT_EQ(b->fin.prompt_tokens, 10);
  EXPECT_FALSE(s.step()) << "an idle scheduler runs no forward";
}

TEST(ServerScheduler, ShortPromptsAdmittedTogetherArePrefilledInOneStepInAdmissionOrder) {
  FakeModel m;
  Scheduler s(m, config(4, 16));
  std::vector<std::shared_ptr<Recorded>> rec;
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {10, 11}, {20, 21, 22, 23}, {30}};
  for (const auto& p : prompts) {
    rec.push_back(std::make_shared<Recorded>());
    ASSERT_TRUE(s.submit(greedy_request(p, 3, rec.back())));
  }
  StepReport r;
  ASSERT_TRUE(s.step(&r));
  EXPECT_EQ(r.prefill_tokens, 10);
  EXPECT_EQ(r.prefill_slots, (std::vector<int32_t>{0, 1, 2, 3}));
  const Batch& b = m.batches.back();
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{1, 2, 3, 10, 11, 20, 21, 22, 23, 30}));
  EXPECT_EQ(b.seq_ids, (std::vector<int32_t>{0, 0, 0, 1, 1, 2, 2, 2, 2, 3}));
  EXPECT_EQ((std::vector<uint8_t>(b.logits.begin(), b.logits.end())), (std::vector<uint8_t>{0, 0, 1, 0, 1, 0, 0, 0, 1, 1}));
  // Every request has its first token after that one step.
  for (size_t i = 0; i < rec.size(); ++i) {
    ASSERT_EQ(rec[i]->tokens.size(), 1u) << "request " << i;
    EXPECT_EQ(rec[i]->tokens[0], prompts[i].back() + 1) << "request " << i;
  }
  // The next step is decode only: 4 tokens, in slot order.
  ASSERT_TRUE(s.step(&r));
  EXPECT_EQ(r.decode_tokens, 4);
  EXPECT_EQ(r.prefill_tokens, 0);
  run_until_idle(s);
  for (size_t i = 0; i < rec.size(); ++i) {
    const int32_t t = prompts[i].back();
    EXPECT_EQ(rec[i]->tokens, (std::vector<int32_t>{t + 1, t + 2, t + 3})) << "request " << i;
  }
}

TEST(ServerScheduler, LongPromptIsStillChunkedAndShortOnesBehindItTakeTheRestOfTheBudget) {
  FakeModel m;
  Scheduler s(m, config(3, 8));
  auto a = std::make_shared<Recorded>(), b = std::make_shared<Recorded>(), c = std::make_shared<Recorded>();
  std::vector<int32_t> long_prompt(13);
  for (int i = 0; i < 13; ++i) long_prompt[static_cast<size_t>(i)] = 40 + i;
  ASSERT_TRUE(s.submit(greedy_request(long_prompt, 2, a)));
  ASSERT_TRUE(s.submit(greedy_request({5, 6}, 2, b)));
  ASSERT_TRUE(s.submit(greedy_request({7}, 2, c)));
  StepReport r;
  // Step 1: the oldest (long) prompt takes the whole budget of 8.
  ASSERT_TRUE(s.step(&r));
  EXPECT_EQ(r.prefill_tokens, 8);
  EXPECT_EQ(r.prefill_slots, (std::vector<int32_t>{0}));
  // Step 2: its last 5, then b (2) and c (1) fill the budget.
  ASSERT_TRUE(s.step(&r));
  EXPECT_EQ(r.prefill_tokens, 8);
  EXPECT_EQ(r.prefill_slots, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(m.batches.back().tokens, (std::vector<int32_t>{48, 49, 50, 51, 52, 5, 6, 7}));
  run_until_idle(s);
  EXPECT_EQ(m.held[0].size(), 14u);  // 13 prompt tokens + the first generated one
  EXPECT_EQ(a->tokens, (std::vector<int32_t>{53, 54}));
  EXPECT_EQ(b->tokens, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(c->tokens, (std::vector<int32_t>{8, 9}));
}

TEST(ServerScheduler, LongPromptIsPrefilledInChunksWhileAnotherSlotDecodesEveryStep) {
  FakeModel m;
  Scheduler s(m, config(2, 3));
  auto a = std::make_shared<Recorded>(), b = std::make_shared<Recorded>();
  ASSERT_TRUE(s.submit(greedy_request({5}, 20, a)));
  s.step();  // a prefilled, first token sampled
  std::vector<int32_t> long_prompt(20);
  for (int i = 0; i < 20; ++i) long_prompt[static_cast<size_t>(i)] = 40 + i % 10;
  ASSERT_TRUE(s.submit(greedy_request(long_prompt, 2, b)));
  for (int k = 0; k < 7; ++k) {  // ceil(20 / 3) chunks
    StepReport r;
    ASSERT_TRUE(s.step(&r));
    EXPECT_EQ(r.decode_tokens, 1) << "a decodes in every step of b's prefill (step " << k << ")";
    EXPECT_LE(r.prefill_tokens, 3);
  }
  EXPECT_EQ(m.held[1], long_prompt);
  run_until_idle(s);
  EXPECT_EQ(b->tokens, (std::vector<int32_t>{50, 51}));
}

TEST(ServerScheduler, NewRequestReusesTheSlotWithTheLongestSharedPrefix) {
  FakeModel m;
  Scheduler s(m, config(2, 64));
  auto a = std::make_shared<Recorded>(), b = std::make_shared<Recorded>();
  ASSERT_TRUE(s.submit(greedy_request({1, 2, 3, 4, 5, 6}, 2, a)));
  ASSERT_TRUE(s.submit(greedy_request({20, 21, 22}, 2, b)));
  run_until_idle(s);
  // Slot 0 holds 1..6 and the first generated token (7); slot 1 holds 20..22, 23.
  EXPECT_EQ(s.slot_tokens(0), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}));
  auto c = std::make_shared<Recorded>();
  ASSERT_TRUE(s.submit(greedy_request({1, 2, 3, 4, 9, 9}, 1, c)));
  const size_t before = m.batches.size();
  run_until_idle(s);
  // c went to slot 0, kept 4 tokens and prefilled only the 2 new ones.
  EXPECT_EQ(m.keeps.back(), (std::pair<int32_t, int32_t>{0, 4}));
  ASSERT_EQ(m.batches.size(), before + 1);
  EXPECT_EQ(m.batches[before].tokens, (std::vector<int32_t>{9, 9}));
  EXPECT_EQ(m.batches[before].positions, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(c->fin.cached_tokens, 4);
  EXPECT_EQ(c->tokens, (std::vector<int32_t>{10}));
  EXPECT_EQ(m.held[1], (std::vector<int32_t>{20, 21, 22, 23})) << "the other slot's KV is untouched";
  // An identical prompt reuses all but its last token (whose logits are needed).
  auto d = std::make_shared<Recorded>();
  ASSERT_TRUE(s.submit(greedy_request({20, 21, 22}, 1, d)));
  run_until_idle(s);
  EXPECT_EQ(m.keeps.back(), (std::pair<int32_t, int32_t>{1, 2}));
  EXPECT_EQ(d->fin.cached_tokens, 2);
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{23}));
}

TEST(ServerScheduler, WithoutASharedPrefixTheLeastRecentlyUsedSlotIsEvicted) {
  FakeModel m;
  Scheduler s(m, config(2, 64));
  auto a = std::make_shared<Recorded>(), b = std::make_shared<Recorded>(), c = std::make_shared<Recorded>();
  ASSERT_TRUE(s.submit(greedy_request({1, 2, 3}, 1, a)));  // slot 0
  run_until_idle(s);
  ASSERT_TRUE(s.submit(greedy_request({1, 2, 3, 4}, 1, b)));  // shares 3 with slot 0: slot 0 again
  run_until_idle(s);
  ASSERT_TRUE(s.submit(greedy_request({30, 31}, 1, c)));  // no prefix: slot 1 (never used) is LRU
  run_until_idle(s);
  EXPECT_EQ(s.slot_tokens(0), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(s.slot_tokens(1), (std::vector<int32_t>{30, 31}));
  auto d = std::make_shared<Recorded>();
  ASSERT_TRUE(s.submit(greedy_request({50, 51}, 1, d)));  // slot 0 is now the least recently used
  run_until_idle(s);
  EXPECT_EQ(m.keeps.back(), (std::pair<int32_t, int32_t>{0, 0})) << "slot 0's KV is evicted";
  EXPECT_EQ(s.slot_tokens(0), (std::vector<int32_t>{50, 51}));
  EXPECT_EQ(s.slot_tokens(1), (std::vector<int32_t>{30, 31})) << "slot 1's cache survives for reuse";
}

TEST(ServerScheduler, CancelledRequestLeavesAtTheNextStepAndFreesItsSlot) {
  FakeModel m;
  Scheduler s(m, config(1, 64));
  auto a = std::make_shared<Recorded>(), b = std::make_shared<Recorded>();
  auto ra = greedy_request({1, 2}, 100, a);
  ASSERT_TRUE(s.submit(ra));
  ASSERT_TRUE(s.submit(greedy_request({7}, 2, b)));
  s.step();
  s.step();
  EXPECT_EQ(s.stats().running, 1);
  EXPECT_EQ(s.stats().waiting, 1);
  ra->cancelled = true;
  const size_t before = a->tokens.size();
  s.step();
  EXPECT_TRUE(a->done);
  EXPECT_EQ(a->fin.reason, FinishReason::Cancelled);
  EXPECT_EQ(a->tokens.size(), before) << "no token after the cancel";
  run_until_idle(s);
  EXPECT_EQ(b->tokens, (std::vector<int32_t>{8, 9}));
  // A request cancelled while it waits ends without a forward.
  auto c = std::make_shared<Recorded>(), d = std::make_shared<Recorded>();
  ASSERT_TRUE(s.submit(greedy_request({3}, 50, c)));
  auto rd = greedy_request({4}, 5, d);
  ASSERT_TRUE(s.submit(rd));
  s.step();
  rd->cancelled = true;
  s.step();
  EXPECT_TRUE(d->done);
  EXPECT_EQ(d->fin.reason, FinishReason::Cancelled);
  EXPECT_TRUE(d->tokens.empty());
  s.cancel_all();
  run_until_idle(s);
  EXPECT_EQ(c->fin.reason, FinishReason::Cancelled);
  EXPECT_EQ(s.stats().running, 0);
}

TEST(ServerScheduler, FullQueueRefusesAndDrainingRefuses) {
  FakeModel m;
  Scheduler s(m, config(1, 64, 64, 2));
  auto rec = std::make_shared<Recorded>();
  EXPECT_TRUE(s.submit(greedy_request({1}, 1, rec)));
  EXPECT_TRUE(s.submit(greedy_request({1}, 1, rec)));
  EXPECT_FALSE(s.submit(greedy_request({1}, 1, rec))) << "third waiting request with --max-queue 2";
  EXPECT_EQ(s.stats().waiting, 2);
  s.set_draining();
  run_until_idle(s);
  EXPECT_FALSE(s.submit(greedy_request({1}, 1, rec)));
}

TEST(ServerScheduler, PromptThatLeavesNoRoomInASlotIsRefused) {
  FakeModel m;
  Scheduler s(m, config(1, 64, 8));
  auto rec = std::make_shared<Recorded>();
  EXPECT_THROW(s.submit(greedy_request(std::vector<int32_t>(8, 1), 1, rec)), Error);
  EXPECT_THROW(s.submit(greedy_request({}, 1, rec)), Error);
  // 7 tokens fit; generation stops when the slot is full ("length").
  ASSERT_TRUE(s.submit(greedy_request(std::vector<int32_t>(6, 1), -1, rec)));
  run_until_idle(s);
  EXPECT_EQ(rec->fin.reason, FinishReason::Length);
  EXPECT_LE(static_cast<int64_t>(s.slot_tokens(0).size()), 8);
  EXPECT_EQ(rec->tokens.size(), 2u);
}

TEST(ServerScheduler, StopFromTheStreamEndsTheRequestAndForwardFailureEndsTheBatch) {
  FakeModel m;
  Scheduler s(m, config(2, 64));
  auto a = std::make_shared<Recorded>();
  auto ra = greedy_request({1}, 50, a);
  ra->on_token = [a](int32_t t, std::span<const float>) {
    a->tokens.push_back(t);
    return t == 4 ? TokenAction::Stop : TokenAction::Continue;
  };
  ASSERT_TRUE(s.submit(ra));
  run_until_idle(s);
  EXPECT_EQ(a->tokens, (std::vector<int32_t>{2, 3, 4}));
  EXPECT_EQ(a->fin.reason, FinishReason::Stop);
  auto b = std::make_shared<Recorded>(), c = std::make_shared<Recorded>();
  ASSERT_TRUE(s.submit(greedy_request({5}, 10, b)));
  s.step();
  ASSERT_TRUE(s.submit(greedy_request({9}, 10, c)));
  m.fail_next = true;
  s.step();
  EXPECT_EQ(b->fin.reason, FinishReason::Error);
  EXPECT_EQ(c->fin.reason, FinishReason::Error);
  EXPECT_NE(b->fin.error.find("fake forward failure"), std::string::npos);
  EXPECT_TRUE(s.idle());
}

TEST(ServerScheduler, MetricsCountTokensAndDurations) {
  FakeModel m;
  Scheduler s(m, config(2, 64));
  auto a = std::make_shared<Recorded>();
  ASSERT_TRUE(s.submit(greedy_request({1, 2, 3}, 4, a)));
  run_until_idle(s);
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.prompt_tokens, 3u);
  EXPECT_EQ(st.generated_tokens, 4u);
  EXPECT_EQ(st.requests_finished, 1u);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_cells_used, 6);  // 3 prompt + 3 decoded (the 4th sampled token never entered)
  EXPECT_EQ(st.kv_cells_total, 128);
  uint64_t n = 0;
  for (uint64_t c : st.duration_counts) n += c;
  EXPECT_EQ(n, 1u);
}

SchedulerConfig lookup_config(int32_t slots, int32_t slot_ctx, int32_t n_gram, int32_t draft_max = 16) {
  SchedulerConfig c = config(slots, 64, slot_ctx);
  c.lookup_n = n_gram;
  c.draft_max = draft_max;
  return c;
}

// What one request produced and what its slot's KV held at the end, and the steps it took.
struct LookupRun {
  std::vector<int32_t> tokens;
  FinishInfo fin;
  std::vector<int32_t> slot_kv, model_kv;
  int steps = 0;
  int drafted = 0, accepted = 0;
  int max_slot_tokens = 0;  ///< most tokens of one sequence in a batch
  int32_t max_position = -1;
};

LookupRun run_one(FakeModel& m, const SchedulerConfig& cfg, std::shared_ptr<Request> r,
                  const std::shared_ptr<Recorded>& rec, FakeModel* draft = nullptr) {
  Scheduler s(m, cfg, draft);
  EXPECT_TRUE(s.submit(std::move(r)));
  LookupRun out;
  for (int i = 0; i < 1000 && !s.idle(); ++i) {
    StepReport rep;
    s.step(&rep);
    ++out.steps;
    out.drafted += rep.draft_tokens;
    out.accepted += rep.draft_accepted;
  }
  EXPECT_TRUE(s.idle());
  for (const Batch& b : m.batches) {
    std::map<int32_t, int> per_seq;
    for (size_t i = 0; i < b.tokens.size(); ++i) {
      out.max_slot_tokens = std::max(out.max_slot_tokens, ++per_seq[b.seq_ids[i]]);
      out.max_position = std::max(out.max_position, b.positions[i]);
    }
  }
  out.tokens = rec->tokens;
  out.fin = rec->fin;
  out.slot_kv = s.slot_tokens(0);
  out.model_kv = m.held[0];
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.draft_tokens, static_cast<uint64_t>(out.drafted));
  EXPECT_EQ(st.draft_accepted, static_cast<uint64_t>(out.accepted));
  return out;
}

// A prompt that repeats itself: the lookup drafts what followed the last 2-gram earlier, the fake
// model (next = last + 1) keeps the drafts it agrees with, and the output, the finish and the KV
// are those of decoding without drafts, in fewer steps. The KV never keeps a rejected draft.
TEST(ServerScheduler, LookupDraftsKeepTheOutputOfPlainDecodingInFewerSteps) {
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10, 11, 2, 3, 5, 6};
  auto plain_rec = std::make_shared<Recorded>(), spec_rec = std::make_shared<Recorded>();
  FakeModel plain_m, spec_m;
  const LookupRun plain = run_one(plain_m, config(1, 64, 64), greedy_request(prompt, 12, plain_rec), plain_rec);
  const LookupRun spec = run_one(spec_m, lookup_config(1, 64, 2), greedy_request(prompt, 12, spec_rec), spec_rec);
  EXPECT_EQ(plain.tokens, (std::vector<int32_t>{7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}));
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_EQ(spec.fin.reason, FinishReason::Length);
  EXPECT_EQ(spec.fin.completion_tokens, 12);
  EXPECT_EQ(spec.slot_kv, plain.slot_kv);
  EXPECT_EQ(spec.model_kv, plain.model_kv);
  EXPECT_EQ(spec.slot_kv.size(), prompt.size() + 11);  // the 12th token never entered
  // After the prefill samples 7, the tail (6, 7) occurred at 1: drafts 8 9 10 11 2 3 5 6 7 (9, up
  // to the 10 tokens left after this row); the model takes 8 9 10 11 and gives 12 for the 2.
  // Then the tail (11, 12) and later ones never occurred before: no drafts.
  EXPECT_EQ(spec.drafted, 9);
  EXPECT_EQ(spec.accepted, 4);
  EXPECT_EQ(plain.steps, 12);  // the prefill, then one token per step
  EXPECT_EQ(spec.steps, 8);
  EXPECT_EQ(plain.drafted, 0);
}

// Seeded sampling (two likely tokens per row): one draw per emitted token from the same logits,
// so the tokens are those of decoding without drafts, token for token.
TEST(ServerScheduler, LookupKeepsSeededSamplingTokenForToken) {
  std::vector<int32_t> prompt;  // 0 .. 63: wherever the output's last two tokens are t, t + 1, the lookup drafts
  for (int i = 0; i < kVocab; ++i) prompt.push_back(i);
  for (uint64_t seed : {1u, 2u, 3u}) {
    auto plain_rec = std::make_shared<Recorded>(), spec_rec = std::make_shared<Recorded>();
    FakeModel plain_m, spec_m;
    plain_m.second = spec_m.second = 9.0f;  // p(second) = 1 / (1 + e) ~ 0.27
    auto rp = greedy_request(prompt, 40, plain_rec), rs = greedy_request(prompt, 40, spec_rec);
    for (Request* r : {rp.get(), rs.get()}) {
      r->sampling.temp = 1.0f;
      r->sampling.seed = seed;
    }
    const LookupRun plain = run_one(plain_m, config(1, 64, 128), rp, plain_rec);
    const LookupRun spec = run_one(spec_m, lookup_config(1, 128, 2), rs, spec_rec);
    EXPECT_EQ(spec.tokens, plain.tokens) << "seed " << seed;
    EXPECT_EQ(spec.model_kv, plain.model_kv) << "seed " << seed;
    EXPECT_GT(spec.drafted, 0) << "seed " << seed;
    EXPECT_GT(spec.accepted, 0) << "seed " << seed;
    EXPECT_LT(spec.accepted, spec.drafted) << "seed " << seed;  // some drafts were refused
    EXPECT_LT(spec.steps, plain.steps) << "seed " << seed;
  }
}

// Drafts never pass the slot's last cell, max_tokens or the model's exact step; a stop string on
// a kept draft ends the request there and the drafts after it leave the KV.
TEST(ServerScheduler, LookupDraftsStayInsideTheSlotTheBudgetAndTheExactStep) {
  std::vector<int32_t> prompt;  // 1 .. 15, 1 .. 5: after 6, the lookup of (6) drafts 7 .. 15, 1, ...
  for (int i = 1; i <= 15; ++i) prompt.push_back(i);
  for (int i = 1; i <= 5; ++i) prompt.push_back(i);
  {  // the slot's context: 32 cells
    auto plain_rec = std::make_shared<Recorded>(), spec_rec = std::make_shared<Recorded>();
    FakeModel plain_m, spec_m;
    const LookupRun plain = run_one(plain_m, config(1, 64, 32), greedy_request(prompt, -1, plain_rec), plain_rec);
    const LookupRun spec = run_one(spec_m, lookup_config(1, 32, 1), greedy_request(prompt, -1, spec_rec), spec_rec);
    EXPECT_EQ(spec.tokens, plain.tokens);
    EXPECT_EQ(spec.fin.reason, FinishReason::Length);
    EXPECT_LE(spec.max_position, 31);
    EXPECT_EQ(spec.slot_kv, plain.slot_kv);
    EXPECT_GT(spec.drafted, 0);
  }
  {  // max_tokens 3, and an exact step of 3 tokens per sequence
    auto plain_rec = std::make_shared<Recorded>(), spec_rec = std::make_shared<Recorded>();
    FakeModel plain_m, spec_m;
    spec_m.exact = 3;
    const LookupRun plain = run_one(plain_m, config(1, 64, 64), greedy_request({1, 2, 3, 1, 2}, 3, plain_rec), plain_rec);
    const LookupRun spec = run_one(spec_m, lookup_config(1, 64, 1), greedy_request({1, 2, 3, 1, 2}, 3, spec_rec), spec_rec);
    EXPECT_EQ(spec.tokens, plain.tokens);
    EXPECT_EQ(spec.tokens, (std::vector<int32_t>{3, 4, 5}));
    EXPECT_EQ(spec.slot_kv, plain.slot_kv);
    EXPECT_EQ(spec.model_kv, plain.model_kv);
    EXPECT_EQ(spec.drafted, 1);  // after 3: the lookup of (3) finds 1 2 3 1 2 3, one row left
    EXPECT_EQ(spec.accepted, 0);
    FakeModel long_m;
    long_m.exact = 3;
    std::vector<int32_t> rep;  // 0 .. 29, 0 .. 9
    for (int i = 0; i < 30; ++i) rep.push_back(i);
    for (int i = 0; i < 10; ++i) rep.push_back(i);
    auto rec = std::make_shared<Recorded>();
    const LookupRun r = run_one(long_m, lookup_config(1, 64, 2), greedy_request(rep, 20, rec), rec);
    EXPECT_GT(r.drafted, 0);
    // A batch's prefill is one sequence's prompt too: only decode steps are bounded.
    for (const Batch& b : long_m.batches)
      if (b.tokens.size() < rep.size()) {
        EXPECT_LE(b.tokens.size(), 3u);
      }
  }
  {  // an exact step of 4 tokens shared by three decoding slots: drafts fill what is left of it,
     // and a step with prompt tokens gets none
    FakeModel m;
    m.exact = 4;
    Scheduler s(m, lookup_config(3, 64, 1));
    std::vector<std::shared_ptr<Recorded>> recs;
    for (int32_t base : {0, 20, 40}) {
      std::vector<int32_t> p;  // base .. base + 9, base .. base + 4: the output base + 5 .. repeats
      for (int32_t i = 0; i < 10; ++i) p.push_back(base + i);
      for (int32_t i = 0; i < 5; ++i) p.push_back(base + i);
      recs.push_back(std::make_shared<Recorded>());
      ASSERT_TRUE(s.submit(greedy_request(p, 12, recs.back())));
      s.step();  // prefills this prompt (beside the earlier slots' decode steps)
    }
    int drafted = 0;
    for (int i = 0; i < 200 && !s.idle(); ++i) {
      StepReport rep;
      s.step(&rep);
      drafted += rep.draft_tokens;
      EXPECT_LE(rep.decode_tokens + rep.draft_tokens, 4) << "step " << i;
      if (rep.prefill_tokens > 0) {
        EXPECT_EQ(rep.draft_tokens, 0) << "step " << i;
      }
    }
    ASSERT_TRUE(s.idle());
    EXPECT_GT(drafted, 0);
    for (const auto& rec : recs) EXPECT_EQ(rec->tokens.size(), 12u);
    for (const Batch& b : m.batches) {
      std::map<int32_t, int> per_seq;
      for (size_t i = 0; i < b.tokens.size(); ++i) ++per_seq[b.seq_ids[i]];
      if (b.tokens.size() > 4) {  // a step with a prompt chunk: one token of each decoding slot
        for (const auto& [seq, n] : per_seq) EXPECT_TRUE(n == 1 || n == 15) << "seq " << seq << ": " << n;
      }
    }
  }
  {  // stop on a kept draft
    auto rec = std::make_shared<Recorded>();
    FakeModel m;
    auto r = greedy_request({5, 6, 7, 8, 9, 5, 6}, 20, rec);
    r->on_token = [rec](int32_t t, std::span<const float>) {
      rec->tokens.push_back(t);
      return t == 9 ? TokenAction::Stop : TokenAction::Continue;
    };
    const LookupRun spec = run_one(m, lookup_config(1, 64, 2), r, rec);
    EXPECT_EQ(spec.tokens, (std::vector<int32_t>{7, 8, 9}));
    EXPECT_EQ(spec.fin.reason, FinishReason::Stop);
    EXPECT_EQ(spec.accepted, 2);  // 8 and 9 were drafts (after the tail 6 7 from position 1)
    EXPECT_EQ(spec.slot_kv, (std::vector<int32_t>{5, 6, 7, 8, 9, 5, 6, 7, 8}));  // 9 never entered
    EXPECT_EQ(spec.model_kv, spec.slot_kv);
  }
}

TEST(ServerScheduler, LookupSettingsOutOfRangeAreRefused) {
  FakeModel m;
  SchedulerConfig c = lookup_config(1, 64, 65);
  EXPECT_THROW(Scheduler(m, c), Error);
  c = lookup_config(1, 64, 2, 0);
  EXPECT_THROW(Scheduler(m, c), Error);
  c = lookup_config(1, 64, 2, 4);
  c.draft_min = 5;
  EXPECT_THROW(Scheduler(m, c), Error);
}

SchedulerConfig draft_config(int32_t slots, int32_t slot_ctx, int32_t draft_max, int32_t chunk = 64) {
  SchedulerConfig c = config(slots, chunk, slot_ctx);
  c.draft_max = draft_max;
  return c;
}

/// The draft model's KV of sequence `seq` agrees with what the target's slot holds, position by
/// position, where both have a token (the draft may hold a drafted tail the target refused, which
/// its next catch-up removes).
void expect_draft_kv_consistent(const FakeModel& draft, int32_t seq, const std::vector<int32_t>& slot_kv) {
  const auto it = draft.held.find(seq);
  ASSERT_NE(it, draft.held.end());
  const std::vector<int32_t>& d = it->second;
  for (size_t i = 0; i < std::min(d.size(), slot_kv.size()); ++i) ASSERT_EQ(d[i], slot_kv[i]) << "position " << i;
}

// A draft model that agrees with the target: every draft is kept, the output, finish and KV are
// those of plain decoding, in fewer steps; the draft runs one catch-up forward and then one
// forward per drafted position.
TEST(ServerScheduler, DraftModelKeepsTheOutputOfPlainDecodingInFewerSteps) {
  const std::vector<int32_t> prompt = {5, 6, 7};
  auto plain_rec = std::make_shared<Recorded>(), spec_rec = std::make_shared<Recorded>();
  FakeModel plain_m, spec_m, draft_m;
  const LookupRun plain = run_one(plain_m, config(1, 64, 64), greedy_request(prompt, 20, plain_rec), plain_rec);
  const LookupRun spec =
      run_one(spec_m, draft_config(1, 64, 4), greedy_request(prompt, 20, spec_rec), spec_rec, &draft_m);
  EXPECT_EQ(plain.tokens.size(), 20u);
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_EQ(spec.fin.reason, FinishReason::Length);
  EXPECT_EQ(spec.slot_kv, plain.slot_kv);
  EXPECT_EQ(spec.model_kv, plain.model_kv);
  // The prefill samples 8; then each step drafts 4 (all kept) and samples one more: 5 tokens a
  // step, the last capped by max_tokens (19 = 5 + 5 + 5 + 4: 3 drafts in the last step).
  EXPECT_EQ(spec.drafted, 4 + 4 + 4 + 3);
  EXPECT_EQ(spec.accepted, spec.drafted);
  EXPECT_EQ(spec.steps, 5);
  EXPECT_EQ(plain.steps, 20);
  expect_draft_kv_consistent(draft_m, 0, spec.slot_kv);
  // Per step: a catch-up forward (the sampled token, and after a step of kept drafts the last
  // draft the draft never decoded) and 3 (last step 2) one-token forwards.
  ASSERT_EQ(draft_m.batches.size(), 4u * 4u - 1u);
  EXPECT_EQ(draft_m.batches[0].tokens, (std::vector<int32_t>{5, 6, 7, 8}));  // the whole context at first
  EXPECT_EQ(draft_m.batches[4].tokens, (std::vector<int32_t>{12, 13}));
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(draft_m.batches[i].tokens.size(), 1u);
}

// Drafts the target refuses (always, or sometimes), greedy and seeded: the output and the KV are
// those of plain decoding, and the draft's KV drops each refused tail at its next catch-up.
TEST(ServerScheduler, DraftModelThatDisagreesChangesNothingButTheSteps) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  const std::function<int32_t(int32_t)> rules[] = {
      [](int32_t t) { return (t + 2) % kVocab; },                    // never the target's token
      [](int32_t t) { return (t + (t % 4 == 3 ? 2 : 1)) % kVocab; },  // the target's but after 3, 7, ...
  };
  for (int r = 0; r < 2; ++r)
    for (uint64_t seed : {0u, 5u, 9u}) {
      auto plain_rec = std::make_shared<Recorded>(), spec_rec = std::make_shared<Recorded>();
      FakeModel plain_m, spec_m, draft_m;
      draft_m.rule = rules[r];
      auto rp = greedy_request(prompt, 30, plain_rec), rs = greedy_request(prompt, 30, spec_rec);
      if (seed != 0) {
        plain_m.second = spec_m.second = 9.0f;  // two likely tokens per row
        for (Request* q : {rp.get(), rs.get()}) {
          q->sampling.temp = 1.0f;
          q->sampling.seed = seed;
        }
      }
      const LookupRun plain = run_one(plain_m, config(1, 64, 64), rp, plain_rec);
      const LookupRun spec = run_one(spec_m, draft_config(1, 64, 6), rs, spec_rec, &draft_m);
      const std::string what = "rule " + std::to_string(r) + " seed " + std::to_string(seed);
      EXPECT_EQ(spec.tokens, plain.tokens) << what;
      EXPECT_EQ(spec.slot_kv, plain.slot_kv) << what;
      EXPECT_EQ(spec.model_kv, plain.model_kv) << what;
      EXPECT_GT(spec.drafted, 0) << what;
      if (r == 0 && seed == 0) {
        EXPECT_EQ(spec.accepted, 0) << what;
      }
      if (r == 1) {
        EXPECT_GT(spec.accepted, 0) << what;
        EXPECT_LT(spec.accepted, spec.drafted) << what;
      }
      expect_draft_kv_consistent(draft_m, 0, spec.slot_kv);
      EXPECT_FALSE(draft_m.keeps.empty()) << what;  // refused tails left the draft's KV
    }
}

// p_min: a draft whose top probability is 0.5 at every position drafts nothing with the default
// 0.75 and drafts with 0.4; draft_min drops proposals shorter than it.
TEST(ServerScheduler, DraftModelStopsBelowPMinAndDropsShortProposals) {
  const std::vector<int32_t> prompt = {9, 10, 11};
  for (const float p_min : {0.75f, 0.4f}) {
    auto rec = std::make_shared<Recorded>();
    FakeModel m, draft_m;
    draft_m.second = 10.0f;  // two tokens of logit 10: top probability 1 / (2 + 62 e^-10) ~ 0.4999
    SchedulerConfig c = draft_config(1, 64, 4);
    c.draft_p_min = p_min;
    const LookupRun r = run_one(m, c, greedy_request(prompt, 10, rec), rec, &draft_m);
    EXPECT_EQ(r.tokens, (std::vector<int32_t>{12, 13, 14, 15, 16, 17, 18, 19, 20, 21}));
    if (p_min > 0.5f) {
      EXPECT_EQ(r.drafted, 0);
      EXPECT_EQ(r.steps, 10);
    } else {
      EXPECT_GT(r.drafted, 0);
      EXPECT_EQ(r.accepted, r.drafted);  // the argmax (lowest id of the two) is the target's token
    }
  }
  auto rec = std::make_shared<Recorded>();
  FakeModel m, draft_m;
  SchedulerConfig c = draft_config(1, 64, 4);
  c.draft_min = 4;  // max_tokens 6 leaves caps of 4 then 0: the second step's proposals are too short
  const LookupRun r = run_one(m, c, greedy_request(prompt, 6, rec), rec, &draft_m);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(r.drafted, 4);
}

// A long prompt: the draft's catch-up is chunked like the prefill (no draft forward holds more
// than `chunk` tokens), the slot decodes without drafts until its draft KV has caught up, and a
// second slot keeps drafting meanwhile.
TEST(ServerScheduler, DraftCatchUpIsChunkedAndOtherSlotsKeepDrafting) {
  FakeModel m, draft_m;
  Scheduler s(m, draft_config(2, 128, 3, 16), &draft_m);
  auto a = std::make_shared<Recorded>(), b = std::make_shared<Recorded>();
  ASSERT_TRUE(s.submit(greedy_request({40, 41}, 40, a)));
  s.step();
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 70; ++i) long_prompt.push_back(i % 50);
  ASSERT_TRUE(s.submit(greedy_request(long_prompt, 12, b)));
  // Steps in which slot 1 decodes while its draft KV does not yet hold its prompt send no drafts
  // of slot 1 (one token of sequence 1 in the target's batch); once caught up it drafts.
  int steps_without = 0, slot1_drafting_steps = 0;
  for (int i = 0; i < 200 && !s.idle(); ++i) {
    const bool caught_up = draft_m.held[1].size() >= long_prompt.size();
    const size_t batches_before = m.batches.size();
    s.step();
    if (m.batches.size() == batches_before) continue;
    const Batch& bt = m.batches.back();
    int seq1 = 0;
    bool seq1_prompt = false;
    for (size_t j = 0; j < bt.tokens.size(); ++j)
      if (bt.seq_ids[j] == 1) {
        ++seq1;
        seq1_prompt = seq1_prompt || static_cast<size_t>(bt.positions[j]) < long_prompt.size();
      }
    if (seq1 == 0 || seq1_prompt) continue;  // slot 1 not decoding in this step
    if (!caught_up) {
      EXPECT_EQ(seq1, 1) << "step " << i << ": slot 1 drafted before its draft KV caught up";
      ++steps_without;
    } else if (seq1 > 1) {
      ++slot1_drafting_steps;
    }
  }
  ASSERT_TRUE(s.idle());
  EXPECT_GT(slot1_drafting_steps, 0);
  for (const Batch& bt : draft_m.batches) EXPECT_LE(bt.tokens.size(), 16u);
  EXPECT_EQ(a->tokens.size(), 40u);
  EXPECT_EQ(b->tokens.size(), 12u);
  for (size_t i = 0; i < b->tokens.size(); ++i) EXPECT_EQ(b->tokens[i], (long_prompt.back() + 1 + static_cast<int>(i)) % kVocab);
  EXPECT_GT(steps_without, 0);
  expect_draft_kv_consistent(draft_m, 0, s.slot_tokens(0));
  expect_draft_kv_consistent(draft_m, 1, s.slot_tokens(1));
  // Slot 1's draft KV holds its whole prompt: it was caught up in pieces of at most 16.
  ASSERT_GE(draft_m.held[1].size(), long_prompt.size());
}

// The model's exact step bounds decode tokens and drafts together; a draft forward that fails
// turns drafting off and the requests go on to the same output.
TEST(ServerScheduler, DraftsStayInsideTheExactStepAndADraftFailureTurnsThemOff) {
  {
    FakeModel m, draft_m;
    m.exact = 4;
    Scheduler s(m, draft_config(3, 64, 8), &draft_m);
    std::vector<std::shared_ptr<Recorded>> recs;
    for (int32_t base : {0, 20, 40}) {
      recs.push_back(std::make_shared<Recorded>());
      ASSERT_TRUE(s.submit(greedy_request({base, base + 1}, 10, recs.back())));
    }
    int drafted = 0;
    for (int i = 0; i < 200 && !s.idle(); ++i) {
      StepReport rep;
      s.step(&rep);
      drafted += rep.draft_tokens;
      EXPECT_LE(rep.decode_tokens + rep.draft_tokens, 4) << "step " << i;
    }
    ASSERT_TRUE(s.idle());
    EXPECT_GT(drafted, 0);
    for (size_t r = 0; r < recs.size(); ++r) EXPECT_EQ(recs[r]->tokens.size(), 10u) << "request " << r;
  }
  auto plain_rec = std::make_shared<Recorded>(), rec = std::make_shared<Recorded>();
  FakeModel plain_m, m, draft_m;
  const LookupRun plain = run_one(plain_m, config(1, 64, 64), greedy_request({3, 4}, 24, plain_rec), plain_rec);
  Scheduler s(m, draft_config(1, 64, 2), &draft_m);
  ASSERT_TRUE(s.submit(greedy_request({3, 4}, 24, rec)));
  int drafted_before = 0, drafted_after = 0;
  for (int i = 0; i < 200 && !s.idle(); ++i) {
    if (i == 4) draft_m.fail_next = true;
    StepReport rep;
    s.step(&rep);
    (i < 4 ? drafted_before : drafted_after) += rep.draft_tokens;
  }
  ASSERT_TRUE(s.idle());
  EXPECT_EQ(rec->tokens, plain.tokens);
  EXPECT_EQ(rec->fin.reason, FinishReason::Length);
  EXPECT_GT(drafted_before, 0);
  EXPECT_EQ(drafted_after, 0);
  EXPECT_EQ(s.slot_tokens(0), plain.slot_kv);
}

// A request's own settings (llama-server's "speculative.*" fields) win over the server's: n_max 0
// drafts nothing, a smaller n_max drafts less, a lower p_min lets a flat draft propose; the
// output never changes.
TEST(ServerScheduler, RequestSpeculationSettingsOverrideTheServers) {
  const std::vector<int32_t> prompt = {9, 10, 11};
  const auto with = [&](int32_t n_max, float p_min, bool flat) {
    auto rec = std::make_shared<Recorded>();
    FakeModel m, draft_m;
    if (flat) draft_m.second = 10.0f;  // top probability ~0.5
    auto r = greedy_request(prompt, 12, rec);
    r->draft_max = n_max;
    r->draft_p_min = p_min;
    LookupRun out = run_one(m, draft_config(1, 64, 4), r, rec, &draft_m);
    EXPECT_EQ(out.tokens, (std::vector<int32_t>{12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}));
    return out;
  };
  EXPECT_EQ(with(0, -1.0f, false).drafted, 0);
  EXPECT_EQ(with(-1, -1.0f, false).steps, 4);  // 1 + 5 + 5 + 1 tokens
  const LookupRun two = with(2, -1.0f, false);
  EXPECT_EQ(two.steps, 5);                      // 1 + 3 + 3 + 3 + 2
  EXPECT_EQ(two.max_slot_tokens, 3);
  EXPECT_EQ(with(-1, -1.0f, true).drafted, 0);  // the server's 0.75
  EXPECT_GT(with(-1, 0.4f, true).drafted, 0);
  // n_min above the n_max in force (the server's 4) is capped at it: full drafts are still sent.
  auto rec = std::make_shared<Recorded>();
  FakeModel m, draft_m;
  auto r = greedy_request(prompt, 12, rec);
  r->draft_min = 20;
  const LookupRun capped = run_one(m, draft_config(1, 64, 4), r, rec, &draft_m);
  EXPECT_EQ(capped.drafted, with(-1, -1.0f, false).drafted);  // as without n_min: 1 + 5 + 5 + 1 tokens
  EXPECT_EQ(capped.drafted, 8);
}

// Banned ids (ignore_eos) are never sampled, greedy or seeded, and the row on_token sees has them
// at -inf; with drafts the output is still that of decoding without them.
TEST(ServerScheduler, BannedTokensAreNeverSampled) {
  for (const bool drafts : {false, true})
    for (const uint64_t seed : {0u, 3u}) {
      auto rec = std::make_shared<Recorded>();
      FakeModel m, draft_m;
      m.second = seed != 0 ? 9.0f : 0.0f;
      auto r = greedy_request({5}, 20, rec);
      if (seed != 0) {
        r->sampling.temp = 1.0f;
        r->sampling.seed = seed;
      }
      r->banned = {6, 9, 1000};  // 1000: outside the vocabulary, skipped
      bool saw_inf = false;
      r->on_token = [rec, &saw_inf](int32_t t, std::span<const float> row) {
        rec->tokens.push_back(t);
        saw_inf = saw_inf || (std::isinf(row[6]) && row[6] < 0.0f && std::isinf(row[9]));
        return TokenAction::Continue;
      };
      const LookupRun out = run_one(m, draft_config(1, 64, 4), r, rec, drafts ? &draft_m : nullptr);
      ASSERT_EQ(out.tokens.size(), 20u);
      for (const int32_t t : out.tokens) EXPECT_TRUE(t != 6 && t != 9) << "banned token " << t << " sampled";
      EXPECT_TRUE(saw_inf);
      if (seed == 0) {
        EXPECT_EQ(out.tokens[0], 0);  // after 5 the model wants 6: the best left is id 0 (ties go to the lowest)
      }
    }
}

TEST(ServerScheduler, DraftModelSettingsOutOfRangeAreRefused) {
  FakeModel m, draft_m;
  SchedulerConfig c = draft_config(1, 64, 4);
  c.lookup_n = 2;
  EXPECT_THROW(Scheduler(m, c, &draft_m), Error);  // a draft model and lookup
  c = draft_config(1, 64, 4);
  c.draft_p_min = 1.5f;
  EXPECT_THROW(Scheduler(m, c, &draft_m), Error);
  c = draft_config(1, 64, 4);
  c.draft_vocab = -1;
  EXPECT_THROW(Scheduler(m, c, &draft_m), Error);
}

}  // namespace
}  // namespace minfer::server
