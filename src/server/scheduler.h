// The request scheduler of `minfer serve`: a bounded queue, N slots (one KV sequence each),
// prefix reuse, LRU choice of the slot to overwrite, cancellation, and the step that turns the
// running slots into one Batch (the next token of every decoding slot plus up to `chunk` prompt
// tokens of the slots being prefilled, oldest first), runs it and samples per slot. With prompt
// lookup on (SchedulerConfig::lookup_n), a decoding slot also sends the tokens that followed the
// latest earlier occurrence of its last n tokens, and keeps those its own sampling confirms; with
// a draft model (a second StepModel, slot s on its sequence s), the draft proposes them instead,
// all drafting slots together in one draft forward per drafted position.
// Plain C++: no HTTP, no CUDA; the engine is reached through StepModel, so tests drive it
// in-process with a fake.
//
// Threads: submit(), cancel flags and stats() may be called from any thread; step() only from
// the one step-loop thread (the engine is single-threaded).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "sampling/sampler.h"

namespace minfer::server {

/// What the scheduler needs of a model: one forward of a Batch, and the one KV operation it uses
/// (the slot <-> KV seam: move this to seq_cp / seq_rm when the cache has them).
class StepModel {
 public:
  virtual ~StepModel() = default;
  /// Runs `batch`; returns the logits of its flagged tokens, n_vocab() floats each, in batch
  /// order, valid until the next call. Throws minfer::Error on failure (the cache then holds
  /// what it held before the call).
  virtual std::span<const float> forward(const Batch& batch) = 0;
  /// Forgets positions >= n_keep of sequence `seq`.
  virtual void keep_prefix(int32_t seq, int32_t n_keep) = 0;
  virtual int64_t n_vocab() const = 0;
  /// Most tokens a forward may hold, all sequences together, with every token's logits bitwise
  /// those of one-token forwards (the scheduler's drafts never take a step past it, nor join a
  /// step with prompt tokens when it is finite). No limit by default.
  virtual int64_t exact_step_tokens() const { return INT32_MAX; }
};

/// The Engine behind StepModel. Gives slot s the KV cells [s * slot_ctx, (s + 1) * slot_ctx),
/// so each token's cell is (slot base + position) whatever else runs (batch invariance: the
/// attention sums run in cell order, term t in lane t % 32, so slot_ctx is a multiple of 32).
class EngineStepModel final : public StepModel {
 public:
  /// Throws minfer::Error when n_slots * slot_ctx exceeds the engine's cells or slot_ctx is not
  /// a positive multiple of kSlotCellAlign.
  EngineStepModel(Engine& engine, int32_t n_slots, int32_t slot_ctx);
  std::span<const float> forward(const Batch& batch) override { return engine_.forward_view(batch); }
  void keep_prefix(int32_t seq, int32_t n_keep) override { engine_.truncate(n_keep, seq); }
  int64_t n_vocab() const override { return engine_.n_vocab(); }
  int64_t exact_step_tokens() const override { return engine_.exact_step_tokens(); }

 private:
  Engine& engine_;
};

/// Slot KV ranges start at multiples of this (the 32 lanes of the dot-product contract,
/// src/quant/quant_ref.h).
inline constexpr int32_t kSlotCellAlign = 32;

/// Why a request ended.
enum class FinishReason { Stop, Length, Cancelled, Error };

/// Returned by a request's on_token: go on, or stop here (a stop string or end of generation).
enum class TokenAction { Continue, Stop };

struct FinishInfo {
  FinishReason reason = FinishReason::Stop;
  std::string error;              ///< when reason == Error
  int32_t prompt_tokens = 0;      ///< the whole prompt
  int32_t cached_tokens = 0;      ///< prompt tokens reused from the slot's KV
  int32_t completion_tokens = 0;  ///< tokens sampled and accepted
};

/// One generation request. The callbacks run on the step-loop thread.
struct Request {
  std::vector<int32_t> prompt;  ///< non-empty
  SamplerParams sampling;
  int32_t max_tokens = -1;      ///< < 0: until the slot's context is full
  /// This request's speculation settings (llama-server's per-request "speculative.*" fields);
  /// < 0: the scheduler's SchedulerConfig::draft_max / draft_min / draft_p_min. draft_max 0: no
  /// drafts. The output does not depend on them, only the steps it takes.
  int32_t draft_max = -1, draft_min = -1;
  float draft_p_min = -1.0f;
  /// Token ids never sampled: their logits are -inf in the row the sampler (and on_token) sees
  /// (ignore_eos bans the end-of-generation ids). Ids outside the vocabulary are skipped.
  std::vector<int32_t> banned;
  /// Called with each sampled token and its logits row (n_vocab floats); Stop ends the request
  /// with FinishReason::Stop (the token was accepted and counts as generated).
  std::function<TokenAction(int32_t token, std::span<const float> logits)> on_token;
  /// Called once when the request ends (after its last on_token).
  std::function<void(const FinishInfo&)> on_done;
  /// Set from any thread: the request ends at the next step with FinishReason::Cancelled.
  std::atomic<bool> cancelled{false};
};

struct SchedulerConfig {
  int32_t n_slots = 1;
  int32_t slot_ctx = 512;      ///< KV cells per slot: a prompt plus its output must fit
  int32_t chunk = 256;         ///< most prompt tokens per step, of one or several prompts (chunked prefill)
  int32_t max_queue = 64;      ///< waiting requests beyond the running ones
  /// Prompt lookup speculation (llama.cpp's --spec-type ngram-simple): > 0 is the n-gram size; a
  /// decoding slot drafts what followed the latest earlier occurrence of the last lookup_n tokens
  /// of its prompt and output, and the step verifies the drafts with the slot's own sampler, row
  /// by row: a drafted token is kept while it is the token sampled at its position. The tokens
  /// are those of decoding without drafts, for greedy and seeded sampling alike (one draw per
  /// emitted token, from the same logits). 0: off.
  int32_t lookup_n = 0;
  int32_t draft_max = 16;      ///< most tokens drafted per slot per step
  int32_t draft_min = 0;       ///< a lookup (or draft model) that proposes fewer tokens drafts none
  /// Draft model only (llama.cpp's --spec-draft-p-min): a slot stops drafting at a position where
  /// the draft's top probability (softmax of its row at temperature 1) is below this. 0: off.
  float draft_p_min = 0.75f;
  /// Draft model only: drafted ids are the argmax over the first draft_vocab logits of the
  /// draft's row (the ids both tokenizers have). 0: the draft's whole row.
  int64_t draft_vocab = 0;
};

/// Request-duration histogram buckets (seconds, upper bounds; +Inf implied).
inline constexpr double kDurationBuckets[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};

/// A snapshot of the scheduler for /metrics and /health.
struct SchedulerStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t kv_cells_used = 0;
  int64_t kv_cells_total = 0;
  uint64_t prompt_tokens = 0;     ///< prompt tokens prefilled (reused ones not counted)
  uint64_t generated_tokens = 0;
  uint64_t draft_tokens = 0;      ///< tokens drafted (prompt lookup or draft model) and sent to the model
  uint64_t draft_accepted = 0;    ///< of those, kept (the token sampled at their position)
  uint64_t requests_finished = 0;
  uint64_t duration_counts[std::size(kDurationBuckets) + 1] = {};  ///< per bucket, not cumulative
  double duration_sum = 0.0;
};

/// What one step ran (for tests and logs).
struct StepReport {
  int32_t decode_tokens = 0;           ///< one per decoding slot, drafts not counted
  int32_t draft_tokens = 0;            ///< drafted tokens in the batch (all slots)
  int32_t draft_accepted = 0;          ///< of those, kept
  int32_t prefill_tokens = 0;          ///< prompt tokens of all prefilling slots together
  int32_t prefill_slot = -1;           ///< the first (oldest) slot prefilled, -1 for none
  std::vector<int32_t> prefill_slots;  ///< every slot prefilled, in batch (admission) order
};

class Scheduler {
 public:
  /// `draft`, when given, is the draft model (it must outlive the scheduler; slot s uses its
  /// sequence s, which must have slot_ctx cells, as the target's; its vocabulary must agree with
  /// the target's on the first draft_vocab ids). Throws minfer::Error for a config value out of
  /// range (n_slots, slot_ctx, chunk < 1, max_queue < 0, lookup_n outside [0, 64], draft_max
  /// outside [1, 256], draft_min outside [0, draft_max], draft_p_min outside [0, 1],
  /// draft_vocab < 0) and for a draft model together with lookup_n > 0.
  Scheduler(StepModel& model, const SchedulerConfig& config, StepModel* draft = nullptr);

  /// Queues `r`. Returns false (and does not keep it) when max_queue requests already wait or
  /// draining() is set. Throws minfer::Error when the prompt is empty or does not leave room for
  /// one generated token in a slot (slot_ctx - 1 tokens at most).
  bool submit(std::shared_ptr<Request> r);

  /// Runs one step: admits waiting requests into free slots, drops cancelled ones, runs one
  /// forward and samples. Returns false when there was nothing to do (no forward ran).
  bool step(StepReport* report = nullptr);

  /// Blocks until a request is waiting or running, or until `until` passes, or wake() is called.
  void wait_for_work(std::chrono::steady_clock::time_point until);
  void wake();

  /// New submits are refused from now on.
  void set_draining() { draining_ = true; }
  bool draining() const { return draining_; }
  /// Marks every queued and running request cancelled.
  void cancel_all();
  /// True when no request is queued or running.
  bool idle() const;

  SchedulerStats stats() const;
  const SchedulerConfig& config() const { return cfg_; }
  /// The tokens slot `s`'s KV holds (tests).
  std::vector<int32_t> slot_tokens(int32_t s) const;

 private:
  enum class SlotState { Idle, Prefill, Decode };
  struct Slot {
    SlotState state = SlotState::Idle;
    std::vector<int32_t> cached;       ///< tokens in the KV (positions 0..n-1)
    std::shared_ptr<Request> req;
    std::unique_ptr<Sampler> sampler;
    std::vector<int32_t> history;      ///< prompt + generated (penalties)
    int32_t next_token = -1;           ///< sampled, not yet in the KV (Decode)
    std::vector<int32_t> draft;        ///< tokens drafted after next_token in this step's batch
    std::vector<int32_t> draft_cached; ///< tokens the draft model's KV holds for the slot
    std::vector<float> row;            ///< a logits row with the request's banned ids at -inf
    int32_t generated = 0;
    int32_t cached_prompt = 0;
    uint64_t last_used = 0;            ///< step counter of the last assignment (LRU)
    uint64_t admitted = 0;             ///< admission order (prefill goes oldest first)
    std::chrono::steady_clock::time_point t_submit;
  };
  struct Waiting {
    std::shared_ptr<Request> req;
    std::chrono::steady_clock::time_point t_submit;
  };

  void admit_locked();
  /// The tokens prompt lookup drafts for decoding slot `s` this step: at most `room` (what the
  /// model's exact step leaves), none when off or capped to nothing by the slot's cells or
  /// max_tokens.
  std::vector<int32_t> draft_for(const Slot& s, int64_t room) const;
  /// Most tokens slot `s` may draft this step: draft_max, capped by `room`, the slot's cells and
  /// its max_tokens (each verify row emits at most one token).
  int64_t draft_cap(const Slot& s, int64_t room) const;
  /// Slot `s`'s request's draft_max, else the config's.
  int32_t draft_max_of(const Slot& s) const;
  /// The fewest drafts slot `s`'s request keeps (its draft_min, else the config's), at most its
  /// draft_max_of.
  int32_t draft_min_of(const Slot& s) const;
  /// Fills the drafts of the decoding slots with cap[i] > 0 from the draft model: brings each
  /// slot's draft KV to its cached tokens plus next_token (at most `chunk` catch-up tokens a step,
  /// all slots together: a slot still catching up drafts nothing this step), then drafts greedily
  /// one position per draft forward, a slot stopping at its cap or below draft_p_min. Runs
  /// without the lock. A draft forward that throws turns drafting off for the scheduler's life
  /// (logged once); the step goes on without drafts.
  void draft_with_model(const std::vector<int64_t>& cap);
  void finish(Slot& s, FinishReason reason, const std::string& error = {});
  void record_duration(std::chrono::steady_clock::time_point t_submit);

  StepModel& model_;
  StepModel* draft_ = nullptr;   ///< the draft model; null without one or after it failed
  SchedulerConfig cfg_;
  std::vector<Slot> slots_;
  mutable std::mutex mu_;        ///< guards queue_, slots_' state/cached sizes, the counters
  std::condition_variable cv_;
  std::vector<Waiting> queue_;
  std::atomic<bool> draining_{false};
  bool woken_ = false;
  uint64_t tick_ = 0;
  uint64_t admissions_ = 0;
  SchedulerStats totals_;        ///< counters and histogram (gauges are computed in stats())
};

}  // namespace minfer::server
