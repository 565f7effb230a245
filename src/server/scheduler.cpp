#include "server/scheduler.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "core/log.h"
#include "engine/speculative.h"

namespace minfer::server {

EngineStepModel::EngineStepModel(Engine& engine, int32_t n_slots, int32_t slot_ctx) : engine_(engine) {
  if (n_slots < 1 || slot_ctx < kSlotCellAlign || slot_ctx % kSlotCellAlign != 0)
    fail("server: {} slots of {} cells: slots must be >= 1 and cells a positive multiple of {}", n_slots, slot_ctx,
         kSlotCellAlign);
  if (static_cast<int64_t>(n_slots) * slot_ctx > engine.n_ctx())
    fail("server: {} slots of {} cells need {} cells, the engine has {}", n_slots, slot_ctx,
         static_cast<int64_t>(n_slots) * slot_ctx, engine.n_ctx());
  for (int32_t s = 0; s < n_slots; ++s)
    engine.kv().set_seq_cells(s, static_cast<int64_t>(s) * slot_ctx, static_cast<int64_t>(s + 1) * slot_ctx);
}

Scheduler::Scheduler(StepModel& model, const SchedulerConfig& config, StepModel* draft)
    : model_(model), draft_(draft), cfg_(config) {
  if (cfg_.n_slots < 1) fail("server: --parallel {} must be at least 1", cfg_.n_slots);
  if (cfg_.slot_ctx < 2) fail("server: a slot's context {} must be at least 2 tokens", cfg_.slot_ctx);
  if (cfg_.chunk < 1) fail("server: the prefill chunk {} must be at least 1 token", cfg_.chunk);
  if (cfg_.max_queue < 0) fail("server: --max-queue {} must not be negative", cfg_.max_queue);
  SpeculativeParams lookup;  // the ranges of run's speculation options
  lookup.lookup_n = cfg_.lookup_n;
  lookup.n_max = cfg_.draft_max;
  lookup.n_min = cfg_.draft_min;
  lookup.p_min = cfg_.draft_p_min;
  validate(lookup);
  if (cfg_.draft_vocab < 0) fail("server: the draft vocabulary {} must not be negative", cfg_.draft_vocab);
  if (draft_ != nullptr && cfg_.lookup_n > 0)
    fail("server: a draft model and prompt lookup (--lookup {}) cannot both be on", cfg_.lookup_n);
  slots_.resize(static_cast<size_t>(cfg_.n_slots));
  totals_.kv_cells_total = static_cast<int64_t>(cfg_.n_slots) * cfg_.slot_ctx;
}

bool Scheduler::submit(std::shared_ptr<Request> r) {
  if (r->prompt.empty()) fail("the prompt is empty (no tokens)");
  if (static_cast<int64_t>(r->prompt.size()) >= cfg_.slot_ctx)
    fail("the prompt is {} tokens; a slot holds {} (prompt and output), so at most {} prompt tokens", r->prompt.size(),
         cfg_.slot_ctx, cfg_.slot_ctx - 1);
  {
    std::lock_guard lock(mu_);
    if (draining_ || static_cast<int32_t>(queue_.size()) >= cfg_.max_queue) return false;
    queue_.push_back(Waiting{std::move(r), std::chrono::steady_clock::now()});
  }
  cv_.notify_all();
  return true;
}

void Scheduler::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

void Scheduler::wait_for_work(std::chrono::steady_clock::time_point until) {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, until, [&] {
    if (woken_ || !queue_.empty()) return true;
    return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.state != SlotState::Idle; });
  });
  woken_ = false;
}

void Scheduler::cancel_all() {
  std::lock_guard lock(mu_);
  for (Waiting& w : queue_) w.req->cancelled = true;
  for (Slot& s : slots_)
    if (s.req) s.req->cancelled = true;
}

bool Scheduler::idle() const {
  std::lock_guard lock(mu_);
  if (!queue_.empty()) return false;
  return std::all_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.state == SlotState::Idle; });
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mu_);
  SchedulerStats st = totals_;
  st.waiting = static_cast<int32_t>(queue_.size());
  for (const Slot& s : slots_) {
    st.running += s.state != SlotState::Idle;
    st.kv_cells_used += static_cast<int64_t>(s.cached.size());
  }
  return st;
}

std::vector<int32_t> Scheduler::slot_tokens(int32_t s) const {
  std::lock_guard lock(mu_);
  return slots_.at(static_cast<size_t>(s)).cached;
}

void Scheduler::record_duration(std::chrono::steady_clock::time_point t_submit) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_submit).count();
  size_t b = 0;
  while (b < std::size(kDurationBuckets) && secs > kDurationBuckets[b]) ++b;
  ++totals_.duration_counts[b];
  totals_.duration_sum += secs;
  ++totals_.requests_finished;
}

void Scheduler::finish(Slot& s, FinishReason reason, const std::string& error) {
  FinishInfo info;
  info.reason = reason;
  info.error = error;
  info.prompt_tokens = static_cast<int32_t>(s.req->prompt.size());
  info.cached_tokens = s.cached_prompt;
  info.completion_tokens = s.generated;
  std::shared_ptr<Request> req = std::move(s.req);
  record_duration(s.t_submit);
  s.state = SlotState::Idle;
  s.sampler.reset();
  s.history.clear();
  s.next_token = -1;
  s.draft.clear();
  if (req->on_done) req->on_done(info);
}

int32_t Scheduler::draft_max_of(const Slot& s) const {
  return s.req->draft_max >= 0 ? s.req->draft_max : cfg_.draft_max;
}

int32_t Scheduler::draft_min_of(const Slot& s) const {
  // A request's n_min above its n_max (either set by the request, the other by the server) is
  // capped at it, as llama-server does, instead of turning drafting off.
  return std::min(s.req->draft_min >= 0 ? s.req->draft_min : cfg_.draft_min, draft_max_of(s));
}

int64_t Scheduler::draft_cap(const Slot& s, int64_t room) const {
  // Row i of the slot's verify predicts position base + i + 1; the drafts fill positions
  // base + 1 .. base + k, which must be cells of the slot; each row emits at most one token.
  const auto base = static_cast<int64_t>(s.cached.size());
  int64_t k = std::min<int64_t>(draft_max_of(s), room);
  k = std::min<int64_t>(k, cfg_.slot_ctx - 1 - base);
  if (s.req->max_tokens >= 0) k = std::min<int64_t>(k, s.req->max_tokens - s.generated - 1);
  return std::max<int64_t>(k, 0);
}

std::vector<int32_t> Scheduler::draft_for(const Slot& s, int64_t room) const {
  if (cfg_.lookup_n == 0) return {};
  const int64_t k = draft_cap(s, room);
  if (k <= 0) return {};
  std::vector<int32_t> d = prompt_lookup(s.history, cfg_.lookup_n, static_cast<int32_t>(k));
  if (static_cast<int32_t>(d.size()) < std::max(1, draft_min_of(s))) d.clear();
  return d;
}

// Admission: each waiting request (oldest first) takes the idle slot whose cached tokens share
// the longest prefix with its prompt; among equals (no shared prefix included) the least
// recently used slot, so the KV a later request may reuse survives longest.
void Scheduler::admit_locked() {
  // Requests cancelled while waiting end here.
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->req->cancelled) {
      FinishInfo info;
      info.reason = FinishReason::Cancelled;
      info.prompt_tokens = static_cast<int32_t>(it->req->prompt.size());
      const std::shared_ptr<Request> req = it->req;
      record_duration(it->t_submit);
      it = queue_.erase(it);
      if (req->on_done) req->on_done(info);
    } else {
      ++it;
    }
  }
  while (!queue_.empty()) {
    Waiting w = queue_.front();
    const std::vector<int32_t>& prompt = w.req->prompt;
    int32_t best = -1;
    size_t best_common = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
      const Slot& s = slots_[i];
      if (s.state != SlotState::Idle) continue;
      size_t common = 0;
      while (common < s.cached.size() && common < prompt.size() && s.cached[common] == prompt[common]) ++common;
      if (best < 0 || common > best_common ||
          (common == best_common && s.last_used < slots_[static_cast<size_t>(best)].last_used)) {
        best = static_cast<int32_t>(i);
        best_common = common;
      }
    }
    if (best < 0) return;  // every slot is busy
    queue_.erase(queue_.begin());
    Slot& s = slots_[static_cast<size_t>(best)];
    // Keep the shared prefix, but recompute at least the last prompt token (its logits are needed).
    if (best_common == prompt.size()) --best_common;
    model_.keep_prefix(best, static_cast<int32_t>(best_common));
    s.cached.resize(best_common);
    s.req = std::move(w.req);
    s.state = SlotState::Prefill;
    s.sampler = std::make_unique<Sampler>(s.req->sampling);
    s.history = s.req->prompt;
    s.generated = 0;
    s.cached_prompt = static_cast<int32_t>(best_common);
    s.next_token = -1;
    s.last_used = ++tick_;
    s.admitted = ++admissions_;
    s.t_submit = w.t_submit;
  }
}

void Scheduler::draft_with_model(const std::vector<int64_t>& cap) {
  StepModel& dm = *draft_;
  const auto nv = static_cast<size_t>(dm.n_vocab());
  const size_t vocab = cfg_.draft_vocab > 0 ? std::min(nv, static_cast<size_t>(cfg_.draft_vocab)) : nv;
  std::vector<int32_t> active;  // slots whose last batch token is flagged, in batch order
  const auto take_rows = [&](std::span<const float> logits) {
    std::vector<int32_t> still;
    for (size_t j = 0; j < active.size(); ++j) {
      Slot& s = slots_[static_cast<size_t>(active[j])];
      const std::span<const float> row = logits.subspan(j * nv, vocab);
      const float p_min = s.req->draft_p_min >= 0.0f ? s.req->draft_p_min : cfg_.draft_p_min;
      if (p_min > 0.0f && top_probability(row) < p_min) continue;
      s.draft.push_back(argmax(row));
      if (static_cast<int64_t>(s.draft.size()) < cap[static_cast<size_t>(active[j])]) still.push_back(active[j]);
    }
    active = std::move(still);
  };
  try {
    // Catch-up: the draft's KV of each drafting slot becomes the slot's cached tokens plus
    // next_token (what it shares with them is kept; the last token is always decoded, for its
    // logits). At most `chunk` tokens in all: a slot that needs more (its prompt, right after the
    // prefill) takes what is left of the budget and drafts from a later step on.
    Batch b;
    size_t budget = static_cast<size_t>(cfg_.chunk);
    for (size_t i = 0; i < slots_.size(); ++i) {
      if (cap[i] <= 0) continue;
      Slot& s = slots_[i];
      const size_t n = s.cached.size() + 1;
      const auto at = [&](size_t p) { return p < s.cached.size() ? s.cached[p] : s.next_token; };
      size_t common = 0;
      while (common < s.draft_cached.size() && common < n && s.draft_cached[common] == at(common)) ++common;
      if (common == n) --common;
      if (common < s.draft_cached.size()) {
        dm.keep_prefix(static_cast<int32_t>(i), static_cast<int32_t>(common));
        s.draft_cached.resize(common);
      }
      const size_t feed = std::min(n - common, budget);
      for (size_t p = common; p < common + feed; ++p) {
        b.tokens.push_back(at(p));
        b.positions.push_back(static_cast<int32_t>(p));
        b.seq_ids.push_back(static_cast<int32_t>(i));
        b.logits.push_back(p + 1 == n ? 1 : 0);
        s.draft_cached.push_back(at(p));
      }
      budget -= feed;
      if (common + feed == n) active.push_back(static_cast<int32_t>(i));
    }
    if (b.tokens.empty()) return;
    take_rows(dm.forward(b));
    // One position per forward: each slot still drafting feeds its last draft.
    while (!active.empty()) {
      Batch d;
      for (const int32_t i : active) {
        Slot& s = slots_[static_cast<size_t>(i)];
        d.tokens.push_back(s.draft.back());
        d.positions.push_back(static_cast<int32_t>(s.draft_cached.size()));
        d.seq_ids.push_back(i);
        d.logits.push_back(1);
        s.draft_cached.push_back(s.draft.back());
      }
      take_rows(dm.forward(d));
    }
  } catch (const std::exception& e) {
    log_warn("serve: the draft model failed ({}); speculative decoding is off from now on", e.what());
    draft_ = nullptr;
    for (Slot& s : slots_) s.draft.clear();
    return;
  }
  for (Slot& s : slots_)
    if (s.req && static_cast<int32_t>(s.draft.size()) < std::max(1, draft_min_of(s))) s.draft.clear();
}

bool Scheduler::step(StepReport* report) {
  std::unique_lock lock(mu_);
  admit_locked();
  // Cancelled running requests leave now; what their slot's KV holds stays for reuse.
  for (Slot& s : slots_)
    if (s.state != SlotState::Idle && s.req->cancelled) finish(s, FinishReason::Cancelled);

  // The batch: one token of every decoding slot (slot order), then up to `chunk` prompt tokens
  // taken from the slots still prefilling, oldest admission first: each takes what is left of its
  // prompt or of the budget, so several short prompts share one step and a long one is chunked.
  Batch b;
  struct Row {
    int32_t slot;
    bool decode;
    int32_t n = 1;  ///< flagged tokens of the slot: 1 + its drafts
  };
  std::vector<Row> rows;  // flagged tokens, in batch order
  StepReport rep;
  // Drafts take what the model's exact step leaves after one token of every decoding slot, in
  // slot order, so a step that gives one-token logits without them still does (CUDA: 8 tokens).
  // Where that step is finite, a step with prompt tokens gets none: it leaves the exact kernels
  // anyway, and the drafted rows would then differ from the later decode steps they stand for.
  int64_t room = model_.exact_step_tokens();
  bool prefill_joins = false;
  for (const Slot& s : slots_) {
    room -= s.state == SlotState::Decode ? 1 : 0;
    prefill_joins = prefill_joins || s.state == SlotState::Prefill;
  }
  if (prefill_joins && model_.exact_step_tokens() < INT32_MAX) room = 0;
  // Lookup drafts take the room in slot order as they are found; a draft model's slots reserve
  // their caps (the draft may stop earlier) and draft together, without the lock.
  std::vector<int64_t> cap(slots_.size(), 0);
  bool model_drafts = false;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    s.draft.clear();
    if (s.state != SlotState::Decode) continue;
    if (draft_ != nullptr) {
      cap[i] = draft_cap(s, room);
      model_drafts = model_drafts || cap[i] > 0;
    } else {
      s.draft = draft_for(s, room);
      cap[i] = static_cast<int64_t>(s.draft.size());
    }
    room -= cap[i];
  }
  if (model_drafts) {
    lock.unlock();
    draft_with_model(cap);
    lock.lock();
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.state != SlotState::Decode) continue;
    const auto base = static_cast<int32_t>(s.cached.size());
    for (size_t j = 0; j <= s.draft.size(); ++j) {
      b.tokens.push_back(j == 0 ? s.next_token : s.draft[j - 1]);
      b.positions.push_back(base + static_cast<int32_t>(j));
      b.seq_ids.push_back(static_cast<int32_t>(i));
      b.logits.push_back(1);
    }
    rows.push_back({static_cast<int32_t>(i), true, 1 + static_cast<int32_t>(s.draft.size())});
    ++rep.decode_tokens;
    rep.draft_tokens += static_cast<int32_t>(s.draft.size());
  }
  struct Chunk {
    int32_t slot;
    size_t from, end;  ///< prompt positions [from, end) in this step
  };
  std::vector<int32_t> prefilling;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].state == SlotState::Prefill) prefilling.push_back(static_cast<int32_t>(i));
  std::sort(prefilling.begin(), prefilling.end(), [&](int32_t x, int32_t y) {
    return slots_[static_cast<size_t>(x)].admitted < slots_[static_cast<size_t>(y)].admitted;
  });
  std::vector<Chunk> chunks;
  size_t budget = static_cast<size_t>(cfg_.chunk);
  for (int32_t pf : prefilling) {
    if (budget == 0) break;
    Slot& s = slots_[static_cast<size_t>(pf)];
    const size_t from = s.cached.size();
    const size_t end = std::min(s.req->prompt.size(), from + budget);
    for (size_t p = from; p < end; ++p) {
      b.tokens.push_back(s.req->prompt[p]);
      b.positions.push_back(static_cast<int32_t>(p));
      b.seq_ids.push_back(pf);
      b.logits.push_back(p + 1 == s.req->prompt.size() ? 1 : 0);
    }
    if (end == s.req->prompt.size()) rows.push_back({pf, false});
    chunks.push_back({pf, from, end});
    budget -= end - from;
    rep.prefill_tokens += static_cast<int32_t>(end - from);
    rep.prefill_slots.push_back(pf);
  }
  if (!chunks.empty()) rep.prefill_slot = chunks.front().slot;
  if (report) *report = rep;
  if (b.tokens.empty()) return false;

  // The forward runs without the lock (stats() and submit() go on meanwhile); only this thread
  // changes slots.
  std::span<const float> logits;
  lock.unlock();
  std::string error;
  try {
    logits = model_.forward(b);
  } catch (const std::exception& e) {
    error = e.what();
  }
  lock.lock();
  if (!error.empty()) {
    // The cache holds what it held before the step: every request of the batch ends with the error.
    for (const Row& r : rows) finish(slots_[static_cast<size_t>(r.slot)], FinishReason::Error, error);
    for (const Chunk& c : chunks)
      if (slots_[static_cast<size_t>(c.slot)].state == SlotState::Prefill)
        finish(slots_[static_cast<size_t>(c.slot)], FinishReason::Error, error);
    return true;
  }
  // Bookkeeping of what the KV now holds.
  for (const Row& r : rows)
    if (r.decode) {
      Slot& s = slots_[static_cast<size_t>(r.slot)];
      s.cached.push_back(s.next_token);
      s.cached.insert(s.cached.end(), s.draft.begin(), s.draft.end());
    }
  for (const Chunk& c : chunks) {
    Slot& s = slots_[static_cast<size_t>(c.slot)];
    s.cached.insert(s.cached.end(), s.req->prompt.begin() + static_cast<std::ptrdiff_t>(c.from),
                    s.req->prompt.begin() + static_cast<std::ptrdiff_t>(c.end));
    totals_.prompt_tokens += c.end - c.from;
  }
  // Sample per flagged row. A slot with drafts goes on to its next row while the token sampled
  // is the drafted one (that token is already in the KV, at the row's next position); at the
  // first other token, or when the request ends, the drafts after it leave the KV.
  const auto nv = static_cast<size_t>(model_.n_vocab());
  size_t first = 0;  // the slot's first row in the logits
  for (const Row& r : rows) {
    Slot& s = slots_[static_cast<size_t>(r.slot)];
    const size_t base = s.cached.size() - static_cast<size_t>(r.decode ? r.n : 0);
    for (int32_t i = 0; i < r.n; ++i) {
      std::span<const float> row = logits.subspan((first + static_cast<size_t>(i)) * nv, nv);
      if (!s.req->banned.empty()) {
        s.row.assign(row.begin(), row.end());
        for (const int32_t id : s.req->banned)
          if (id >= 0 && static_cast<size_t>(id) < nv) s.row[static_cast<size_t>(id)] = -INFINITY;
        row = s.row;
      }
      const int32_t tok = s.sampler->sample(row, s.history);
      s.state = SlotState::Decode;
      ++s.generated;
      ++totals_.generated_tokens;
      s.history.push_back(tok);
      s.next_token = tok;
      const bool drafted = i + 1 < r.n && tok == s.draft[static_cast<size_t>(i)];
      if (drafted) {
        ++totals_.draft_accepted;
        ++rep.draft_accepted;
      }
      // The KV holds the prompt and every token before tok; tok itself only as a kept draft.
      const size_t valid = r.decode ? base + static_cast<size_t>(i) + 1 : s.cached.size();
      const TokenAction act = s.req->on_token ? s.req->on_token(tok, row) : TokenAction::Continue;
      std::optional<FinishReason> end;
      if (act == TokenAction::Stop) end = FinishReason::Stop;
      else if (s.req->max_tokens >= 0 && s.generated >= s.req->max_tokens) end = FinishReason::Length;
      else if (static_cast<int64_t>(valid) + 1 >= cfg_.slot_ctx) end = FinishReason::Length;  // tok would not fit
      if (!end && drafted) continue;
      if (valid < s.cached.size()) {
        model_.keep_prefix(r.slot, static_cast<int32_t>(valid));
        s.cached.resize(valid);
      }
      if (end) finish(s, *end);
      break;
    }
    totals_.draft_tokens += static_cast<uint64_t>(r.n - 1);
    first += static_cast<size_t>(r.n);
  }
  if (report) report->draft_accepted = rep.draft_accepted;
  return true;
}

}  // namespace minfer::server
