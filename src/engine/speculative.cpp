#include "engine/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "core/printable.h"

namespace minfer {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Weight of a new measurement in the moving averages of the cost model.
constexpr double kEmaWeight = 0.2;
/// Decay of the acceptance counts per drafting round (an effective window of ~20 rounds).
constexpr double kCountDecay = 0.95;

void ema(double& avg, double x) { avg = avg <= 0.0 ? x : avg + kEmaWeight * (x - avg); }

double prob_of(const TokenDistribution& d, int32_t id) {
  for (const auto& [t, p] : d)
    if (t == id) return p;
  return 0.0;
}

}  // namespace

double top_probability(std::span<const float> logits) {
  float mx = logits[0];
  for (const float l : logits) mx = std::max(mx, l);
  double sum = 0.0;
  for (const float l : logits) sum += std::exp(static_cast<double>(l - mx));
  return 1.0 / sum;
}

int32_t speculative_accept(const TokenDistribution& p, const TokenDistribution* q, int32_t x, Sampler& rng,
                           bool* accepted) {
  const double px = prob_of(p, x);
  const double qx = q != nullptr ? prob_of(*q, x) : 1.0;
  *accepted = qx > 0.0 && rng.uniform() < px / qx;
  if (*accepted) return x;
  std::unordered_map<int32_t, double> qmap;  // q by id (p and q may each hold the whole vocabulary)
  if (q != nullptr)
    for (const auto& [id, qv] : *q) qmap.emplace(id, qv);
  TokenDistribution residual;
  for (const auto& [id, pv] : p) {
    double qv = id == x ? 1.0 : 0.0;
    if (q != nullptr) {
      const auto it = qmap.find(id);
      qv = it == qmap.end() ? 0.0 : it->second;
    }
    if (pv > qv) residual.emplace_back(id, pv - qv);
  }
  // p == q leaves nothing, but then p(x) / q(x) = 1 accepts: reachable only by rounding.
  return rng.draw(residual.empty() ? p : residual);
}

void validate(const SpeculativeParams& p) {
  if (p.n_max < 1 || p.n_max > 256) fail("--spec-draft-n-max {} is not in [1, 256]", p.n_max);
  if (p.n_min < 0 || p.n_min > p.n_max)
    fail("--spec-draft-n-min {} is not in [0, --spec-draft-n-max {}]", p.n_min, p.n_max);
  if (!(p.p_min >= 0.0f && p.p_min <= 1.0f)) fail("--spec-draft-p-min {} is not in [0, 1]", p.p_min);
  if (p.lookup_n < 0 || p.lookup_n > 64) fail("--lookup {} is not in [1, 64]", p.lookup_n);
  if (p.verify_max < 0) fail("speculation: verify_max {} is negative", p.verify_max);
}

void check_vocab_compatible(const tok::Tokenizer& target, const tok::Tokenizer& draft, const std::string& target_name,
                            const std::string& draft_name) {
  const int32_t nt = target.n_vocab(), nd = draft.n_vocab();
  const int32_t n = std::min(nt, nd);
  for (int32_t id = 0; id < n; ++id)
    if (target.token_text(id) != draft.token_text(id))
      fail("draft model {} does not share the vocabulary of {}: token {} is '{}' in the target and '{}' in the draft",
           printable(draft_name), printable(target_name), id, printable(target.token_text(id)),
           printable(draft.token_text(id)));
  if (nt != nd)
    fail("draft model {} does not share the vocabulary of {}: token {} is '{}' in the {} and absent from the {} "
         "({} tokens against {})",
         printable(draft_name), printable(target_name), n,
         printable(nt > nd ? target.token_text(n) : draft.token_text(n)), nt > nd ? "target" : "draft",
         nt > nd ? "draft" : "target", nt, nd);
}

Speculator::Speculator(Engine& draft, int64_t draft_vocab, const SpeculativeParams& params,
                       const SamplerParams& sampling, double cost_ratio)
    : draft_(&draft), draft_vocab_(draft_vocab), params_(params), draft_sampler_([&] {
        SamplerParams s = sampling;
        s.seed = params.seed;
        return s;
      }()),
      cost_ratio_(cost_ratio) {
  validate(params_);
  if (params_.lookup_n > 0) fail("speculation: a draft model and prompt lookup exclude each other");
}

Speculator::Speculator(const SpeculativeParams& params, const SamplerParams& sampling)
    : params_(params), draft_sampler_(sampling) {
  validate(params_);
  if (params_.lookup_n <= 0) fail("speculation: prompt lookup needs an n-gram size of at least 1 (--lookup N)");
}

std::vector<int32_t> prompt_lookup(std::span<const int32_t> history, int32_t n_gram, int32_t k) {
  std::vector<int32_t> out;
  if (n_gram < 1 || k <= 0 || history.size() <= static_cast<size_t>(n_gram)) return out;
  const auto n = static_cast<size_t>(n_gram);
  const std::span<const int32_t> tail = history.last(n);
  // Latest earlier occurrence: start positions s < size - n, searched from the end.
  for (size_t s = history.size() - n; s-- > 0;) {
    if (!std::equal(tail.begin(), tail.end(), history.begin() + static_cast<std::ptrdiff_t>(s))) continue;
    for (size_t i = s + n; i < history.size() && out.size() < static_cast<size_t>(k); ++i) out.push_back(history[i]);
    break;
  }
  return out;
}

std::vector<int32_t> Speculator::lookup(std::span<const int32_t> history, int32_t k) const {
  return prompt_lookup(history, params_.lookup_n, k);
}

int32_t Speculator::choose_length() {
  const int32_t lo = std::max(1, params_.n_min);
  if (!params_.adaptive) return params_.n_max;
  if (t1_ <= 0.0) return 0;  // the first round measures a plain decode
  const double a = std::min(acceptance_estimate(), 0.999);
  const double d = d_ > 0.0 ? d_ : (draft_ ? cost_ratio_ * t1_ : 0.0);
  const double b = b_ > 0.0 ? b_ : t1_ / 4.0;
  int32_t best = 0;
  double best_gain = 1.0 / t1_;
  double expect = 1.0, ak = 1.0;
  for (int32_t k = 1; k <= params_.n_max; ++k) {
    ak *= a;
    expect += ak;  // 1 + a + ... + a^k
    if (k < lo) continue;
    const double gain = expect / (t1_ + static_cast<double>(k) * (d + b));
    if (gain > best_gain) {
      best_gain = gain;
      best = k;
    }
  }
  if (best == 0 && since_draft_ >= kProbeInterval) return lo;
  return best;
}

void Speculator::draft_tokens(std::span<const int32_t> history, int32_t k, int64_t n_vocab, std::vector<int32_t>& out) {
  out.clear();
  q_.clear();
  catchup_s_ = 0.0;
  if (params_.lookup_n > 0) {
    out = lookup(history, k);
    return;
  }
  Engine& dr = *draft_;
  // Bring the draft's cache to `history` (what it shares is kept; the last token is always
  // decoded here for its logits).
  size_t common = 0;
  while (common < draft_cache_.size() && common < history.size() && draft_cache_[common] == history[common]) ++common;
  if (common == history.size()) --common;
  dr.truncate(static_cast<int32_t>(common));
  draft_cache_.resize(common);
  const int64_t vocab = std::min<int64_t>(n_vocab, draft_vocab_);
  std::vector<int32_t> hist(history.begin(), history.end());
  const auto t0 = std::chrono::steady_clock::now();
  std::span<const float> logits = dr.decode_view(history.subspan(common));
  // A catch-up of more than the last round's two new tokens is a prefill, not a draft step.
  catchup_s_ = history.size() - common > 2 ? seconds_since(t0) : 0.0;
  draft_cache_.assign(history.begin(), history.end());
  const bool greedy = draft_sampler_.greedy();
  for (int32_t i = 0; i < k; ++i) {
    const std::span<const float> row = logits.first(static_cast<size_t>(vocab));
    if (params_.p_min > 0.0f && top_probability(row) < params_.p_min) break;
    int32_t id;
    if (greedy) {
      id = draft_sampler_.sample(row, hist);
    } else {
      q_.emplace_back();
      draft_sampler_.distribution(row, hist, q_.back());
      id = draft_sampler_.draw(q_.back());
    }
    out.push_back(id);
    hist.push_back(id);
    if (i + 1 == k) break;
    const int32_t one[1] = {id};
    logits = dr.decode_view(one);
    draft_cache_.push_back(id);
  }
  if (!greedy) q_.resize(out.size());
}

std::vector<int32_t> Speculator::step(Engine& target, std::span<const int32_t> history, Sampler& sampler,
                                      int64_t n_vocab, int32_t k_cap) {
  if (history.empty()) fail("speculation: an empty history");
  const int32_t want = std::min(choose_length(), std::max(k_cap, 0));
  std::vector<int32_t> drafts;
  double draft_s = 0.0;
  if (want > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    draft_tokens(history, want, n_vocab, drafts);
    draft_s = seconds_since(t0) - catchup_s_;
    if (static_cast<int32_t>(drafts.size()) < params_.n_min) drafts.clear();
  }
  since_draft_ = drafts.empty() ? since_draft_ + 1 : 0;
  if (!drafts.empty() && draft_ != nullptr) ema(d_, draft_s / static_cast<double>(drafts.size()));

  // Verify: the last token and the drafts, logits for all. The forward is cut into pieces of at
  // most the backend's exact step (Engine::exact_step_tokens: each piece's logits are bitwise
  // those of one-token steps, so greedy output stays the target's own); a later piece is not run
  // once a draft is rejected.
  std::vector<int32_t> batch;
  batch.reserve(drafts.size() + 1);
  batch.push_back(history.back());
  batch.insert(batch.end(), drafts.begin(), drafts.end());
  const int32_t n_past = target.n_past();
  const auto piece = static_cast<size_t>(std::max<int64_t>(
      1, params_.verify_max > 0 ? std::min<int64_t>(params_.verify_max, target.exact_step_tokens()) : target.exact_step_tokens()));
  const auto row_len = static_cast<size_t>(target.n_vocab());
  std::vector<int32_t> out;
  std::vector<int32_t> hist(history.begin(), history.end());
  TokenDistribution p;
  double verify_s = 0.0;
  size_t j = 0;
  bool rejected = false;
  for (size_t i0 = 0; i0 < batch.size() && !rejected; i0 += piece) {
    const size_t i1 = std::min(batch.size(), i0 + piece);
    const auto t0 = std::chrono::steady_clock::now();
    const std::span<const float> logits = target.forward_view(
        Batch::sequence(std::span(batch).subspan(i0, i1 - i0), n_past + static_cast<int32_t>(i0), 0, /*all_logits=*/true));
    verify_s += seconds_since(t0);
    const auto row = [&](size_t i) { return logits.subspan((i - i0) * row_len, static_cast<size_t>(n_vocab)); };
    for (; j < drafts.size() && j < i1; ++j) {
      const int32_t x = drafts[j];
      if (sampler.greedy()) {
        const int32_t t = sampler.sample(row(j), hist);
        if (t != x) {
          out.push_back(t);
          rejected = true;
          break;
        }
      } else {
        sampler.distribution(row(j), hist, p);
        bool ok = false;
        const int32_t t = speculative_accept(p, draft_ != nullptr ? &q_[j] : nullptr, x, sampler, &ok);
        if (!ok) {
          out.push_back(t);
          rejected = true;
          break;
        }
      }
      out.push_back(x);
      hist.push_back(x);
    }
    // Every draft kept (or none made): one more token from the target's last row.
    if (!rejected && i1 == batch.size()) out.push_back(sampler.sample(row(drafts.size()), hist));
  }
  ++stats_.rounds;
  if (drafts.empty()) {
    ema(t1_, verify_s);
  } else if (t1_ > 0.0) {
    ema(b_, std::max(0.0, verify_s - t1_) / static_cast<double>(drafts.size()));
  }
  const size_t accepted = j;
  if (!drafts.empty()) {
    stats_.drafted += static_cast<int64_t>(drafts.size());
    stats_.accepted += static_cast<int64_t>(accepted);
    acc_ = acc_ * kCountDecay + static_cast<double>(accepted);
    judged_ = judged_ * kCountDecay + static_cast<double>(accepted + (accepted < drafts.size() ? 1 : 0));
  }
  // Rejected drafts leave the target's cache (the draft's is re-synced by the next round).
  target.truncate(n_past + 1 + static_cast<int32_t>(accepted));
  return out;
}

}  // namespace minfer
