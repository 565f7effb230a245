// Speculative decoding: something cheap proposes the next few tokens (a smaller draft model that
// shares the target's vocabulary, or prompt lookup: what followed the last n-gram's earlier
// occurrence in the context), and the target checks them all in one batched forward.
//
// Correctness: greedy output is the target's own greedy output token for token (a drafted token
// is kept only when it is the target's argmax at its position). With sampling, drafted token x
// (drawn from the draft's processed distribution q) is kept with probability min(1, p(x)/q(x)),
// p being the target's processed distribution (Sampler::distribution: penalties, top-k, top-p,
// min-p, temperature); on rejection the token is drawn from max(0, p - q) renormalized. Every
// emitted token is then distributed as p (Leviathan et al. 2023, "Fast Inference from
// Transformers via Speculative Decoding", Theorem 1; Chen et al. 2023). Prompt lookup is the
// special case q = a point mass on the proposed token.
//
// When to draft (the adaptive draft length): with a per-token acceptance probability a, a round
// that drafts k tokens yields E(k) = 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a) tokens and costs
// C(k) = t1 + k * (d + b) seconds, where t1 is a one-token target decode, d a draft step (~0 for
// lookup) and b the extra verify cost per drafted token (a (k+1)-token forward costs t1 + k*b).
// Not drafting yields 1 token for t1. Each round picks the k in {0} u [max(1, n_min), n_max] that
// maximizes E(k) / C(k). a is (accepted + 1) / (judged + 2) over decayed counts (judged = the
// drafted tokens the target ruled on: the accepted ones and the first rejected one); t1, d and b
// are exponential moving averages of measured times, starting from t1 measured on the first
// (plain) round, d = t1 x (draft weight bytes / target weight bytes) and b = t1 / 4. When k = 0
// wins, every kProbeInterval-th round still drafts max(1, n_min) tokens so a can recover.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace minfer {

struct SpeculativeParams {
  /// Most tokens drafted per round (llama.cpp's --spec-draft-n-max / --draft-max, default 16).
  int32_t n_max = 16;
  /// A round that drafts fewer tokens than this (p_min stopped it) decodes one token instead.
  int32_t n_min = 0;
  /// The draft model stops drafting at a position where its own top probability (softmax of its
  /// logits at temperature 1) is below this. 0: off. Default 0.75 (llama.cpp's speculative p_min).
  float p_min = 0.75f;
  /// > 0: prompt lookup with n-grams of this many tokens instead of a draft model.
  int32_t lookup_n = 0;
  /// false: always draft n_max tokens (tests, measurements); true: the expected-gain model.
  bool adaptive = true;
  /// Seed of the draft's own sampler (sampling mode only).
  uint64_t seed = 0;
  /// Most tokens per verify forward; a longer verify runs as several forwards, stopping at the
  /// first rejection. 0: the target engine's exact step (Engine::exact_step_tokens: no limit on
  /// the CPU, 8 on CUDA), which keeps greedy output bitwise the target's. Tests set it to run
  /// the pieces on the CPU.
  int32_t verify_max = 0;
};

/// Throws minfer::Error naming the option and value: n_max in [1, 256], n_min in [0, n_max],
/// p_min in [0, 1], lookup_n in [0, 64], verify_max >= 0.
void validate(const SpeculativeParams& p);

/// The speculative sampling rule for one drafted token `x`: with probability min(1, p(x)/q(x))
/// returns x and sets *accepted; otherwise returns a token drawn from max(0, p - q)
/// renormalized. `q` null: a point mass on x (prompt lookup). p and q are processed
/// distributions (Sampler::distribution); `rng` draws (the target's sampler).
int32_t speculative_accept(const TokenDistribution& p, const TokenDistribution* q, int32_t x, Sampler& rng,
                           bool* accepted);

/// The top probability of softmax(`logits`) at temperature 1, 1 / sum(exp(l - max)): the draft
/// model's p_min test. `logits` must not be empty.
double top_probability(std::span<const float> logits);

/// Prompt lookup: the tokens (at most `k`) that followed the latest earlier occurrence of the
/// last `n` tokens of `history`. Empty when `history` holds no earlier occurrence, n < 1 or k < 1.
std::vector<int32_t> prompt_lookup(std::span<const int32_t> history, int32_t n, int32_t k);

/// The rounds' tallies, for the summary line.
struct SpeculativeStats {
  int64_t rounds = 0;           ///< target forwards after the prompt (verifies and plain decodes)
  int64_t drafted = 0;          ///< tokens proposed and sent to the target
  int64_t accepted = 0;         ///< of those, kept
  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0; }
};

/// Refuses a draft whose vocabulary differs from the target's on any id either can produce
/// (ids below each model's tokenizer size): minfer::Error, one line, naming the first differing
/// id and both texts, or the first id only one of them has. `target_name` / `draft_name` name
/// the files.
void check_vocab_compatible(const tok::Tokenizer& target, const tok::Tokenizer& draft, const std::string& target_name,
                            const std::string& draft_name);

/// Proposes tokens and verifies them on a target engine's sequence 0. One per generation stream
/// (a server would keep one per slot, with the draft engine's sequence = the slot); not
/// thread-safe.
class Speculator {
 public:
  /// Draft-model speculation. `draft` is used on its sequence 0 only and must outlive this;
  /// `draft_vocab` limits the draft's candidate ids (its tokenizer's size). `cost_ratio` is the
  /// prior of d / t1 (e.g. draft weight bytes / target weight bytes).
  Speculator(Engine& draft, int64_t draft_vocab, const SpeculativeParams& params, const SamplerParams& sampling,
             double cost_ratio);
  /// Prompt-lookup speculation (params.lookup_n > 0).
  Speculator(const SpeculativeParams& params, const SamplerParams& sampling);

  /// One round. On entry the target's sequence 0 holds `history` minus its last token (the
  /// sampled token not yet decoded) and `sampler` is the target's. Drafts up to
  /// min(chosen length, k_cap) tokens, verifies them with one forward of the last token and
  /// the drafts, and returns the accepted drafts followed by one token sampled from the target
  /// (at least one token). On return the target holds `history` plus the accepted drafts (the
  /// returned tokens but the last). `n_vocab` bounds the ids sampled (the tokenizer's size).
  /// Throws what Engine::forward throws (NonFiniteLogitsError, ...).
  std::vector<int32_t> step(Engine& target, std::span<const int32_t> history, Sampler& sampler, int64_t n_vocab,
                            int32_t k_cap);

  /// Tokens the lookup would propose after `history` (at most `k`): what followed the latest
  /// earlier occurrence of its last lookup_n tokens. Empty when there is none.
  std::vector<int32_t> lookup(std::span<const int32_t> history, int32_t k) const;

  /// The draft length the cost model picks now (before the cap), 0 for "decode one token".
  int32_t choose_length();

  const SpeculativeStats& stats() const { return stats_; }
  const SpeculativeParams& params() const { return params_; }
  /// The current acceptance estimate a of the cost model.
  double acceptance_estimate() const { return (acc_ + 1.0) / (judged_ + 2.0); }

  /// Rounds between probes while the model prefers not to draft.
  static constexpr int32_t kProbeInterval = 16;

 private:
  /// Draft proposals and, in sampling mode, the draft's distribution q at each.
  void draft_tokens(std::span<const int32_t> history, int32_t k, int64_t n_vocab, std::vector<int32_t>& out);

  Engine* draft_ = nullptr;
  int64_t draft_vocab_ = 0;
  SpeculativeParams params_;
  Sampler draft_sampler_;
  std::vector<int32_t> draft_cache_;           ///< what the draft's sequence 0 holds
  std::vector<TokenDistribution> q_;           ///< the draft's q per drafted token (sampling mode)
  SpeculativeStats stats_;
  // The cost model (see the file comment).
  double acc_ = 0.0, judged_ = 0.0;            ///< decayed counts
  double t1_ = 0.0, d_ = 0.0, b_ = 0.0;        ///< seconds; t1_ = 0 until measured
  double cost_ratio_ = 0.0;
  int32_t since_draft_ = 0;                    ///< plain rounds since the last drafting round
  double catchup_s_ = 0.0;                     ///< the last draft_tokens' prefill time (excluded from d_)
};

}  // namespace minfer
