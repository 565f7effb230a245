#include "engine/generate.h"

#include <algorithm>

#include "core/error.h"
#include "engine/speculative.h"
#include "tokenizer/detokenizer.h"

namespace minfer {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

size_t held_suffix(const std::string& text, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const std::string& s : stops) {
    for (size_t len = std::min(s.size() - 1, text.size()); len > hold; --len)
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  }
  return hold;
}

Session::Session(Engine& engine, const tok::Tokenizer& tokenizer) : engine_(engine), tok_(tokenizer) {}

bool Session::shift_context() {
  const auto n = static_cast<int32_t>(tokens_.size());
  const int32_t keep = std::clamp(shift_keep_, 0, std::max(n - 1, 0));
  const int32_t discard = (n - keep) / 2;
  if (discard <= 0) return false;
  engine_.seq_rm(0, keep, keep + discard);
  engine_.seq_add(0, keep + discard, -1, -discard);
  tokens_.erase(tokens_.begin() + keep, tokens_.begin() + keep + discard);
  ++shifts_;
  return true;
}

void Session::save(const std::string& path) const { engine_.save_sequence_file(path, 0, tokens_); }

void Session::load(const std::string& path) {
  Engine::Restored r = engine_.restore_sequence_file(path, 0, /*positions_from_0=*/true);
  tokens_ = std::move(r.tokens);
}

void Session::reset() {
  engine_.truncate(0);
  tokens_.clear();
}

std::vector<float> Session::prefill(std::span<const int32_t> prompt, GenerateStats* stats) {
  if (prompt.empty()) fail("the prompt is empty (no tokens)");
  if (static_cast<int64_t>(prompt.size()) >= engine_.n_ctx())
    fail("the prompt is {} tokens, which does not fit the context size {} (raise it with -c)",
         prompt.size(), engine_.n_ctx());
  size_t common = 0;
  while (common < tokens_.size() && common < prompt.size() && tokens_[common] == prompt[common]) ++common;
  if (common == prompt.size()) --common;  // recompute the last token for its logits
  engine_.truncate(static_cast<int32_t>(common));
  tokens_.resize(common);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits;
  try {
    logits = engine_.decode(prompt.subspan(common));
  } catch (const NonFiniteLogitsError& e) {
    throw e.with_step(fmt::format("prompt prefill of {} tokens", prompt.size() - common));
  }
  tokens_.assign(prompt.begin(), prompt.end());
  if (stats) {
    stats->reused_tokens = static_cast<int32_t>(common);
    stats->prompt_tokens = static_cast<int32_t>(prompt.size() - common);
    stats->prefill_ms = ms_since(t0);
  }
  return logits;
}

std::string Session::generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& opt,
                              const std::function<bool(const std::string&)>& on_text, GenerateStats* stats) {
  GenerateStats local;
  GenerateStats& st = stats ? *stats : local;
  st = GenerateStats{};
  const std::vector<float> prompt_logits = prefill(prompt, &st);
  if (opt.after_prefill) opt.after_prefill();
  std::span<const float> logits = prompt_logits;  // then each decode's view (no copy)
  tok::Detokenizer detok(tok_, false);
  std::string text;      // all generated text
  size_t emitted = 0;    // bytes of `text` given to on_text
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  const auto emit = [&](size_t upto) {
    if (upto > emitted) {
      const bool go_on = !on_text || on_text(text.substr(emitted, upto - emitted));
      emitted = upto;
      return go_on;
    }
    return true;
  };
  // Takes a sampled token: stops at end-of-generation or the token budget (false, with the
  // stop reason set), else appends its text, cuts at a stop string and streams what is settled.
  const auto take = [&](int32_t id) {
    if (opt.max_tokens >= 0 && st.generated_tokens >= opt.max_tokens) {
      st.stop_reason = "length";
      return false;
    }
    if (opt.stop_at_eog && tok_.is_eog(id)) {
      st.stop_reason = "eog";
      return false;
    }
    ++st.generated_tokens;
    history.push_back(id);
    text += detok.push(id);
    // Stop strings: cut at the first occurrence.
    bool stopped = false;
    for (const std::string& s : opt.stop) {
      const size_t at = text.find(s, emitted > s.size() ? emitted - s.size() : 0);
      if (!s.empty() && at != std::string::npos) {
        text.resize(at);
        stopped = true;
      }
    }
    if (stopped) {
      emit(text.size());
      st.stop_reason = "stop";
      return false;
    }
    if (!emit(text.size() - held_suffix(text, opt.stop))) {
      st.stop_reason = "cancelled";
      return false;
    }
    return true;
  };
  // A padded embedding (more rows than the tokenizer has tokens; Model::from_file refuses
  // fewer) never yields an id the tokenizer cannot decode: only its ids are candidates.
  const auto n_tok = static_cast<size_t>(tok_.n_vocab());
  if (logits.size() > n_tok) logits = logits.first(n_tok);
  if (opt.speculator == nullptr) {
    for (;;) {
      if (opt.max_tokens >= 0 && st.generated_tokens >= opt.max_tokens) {
        st.stop_reason = "length";
        break;
      }
      if (!take(sampler.sample(logits, history))) break;
      if (engine_.n_past() + 1 >= engine_.n_ctx() && !(context_shift() && shift_context())) {
        st.stop_reason = "context";
        break;
      }
      const int32_t one[1] = {history.back()};
      const auto t0 = std::chrono::steady_clock::now();
      try {
        logits = engine_.decode_view(one);
      } catch (const NonFiniteLogitsError& e) {
        throw e.with_step(fmt::format("decode step {}", st.decoded_tokens + 1));
      }
      st.decode_ms += ms_since(t0);
      ++st.decoded_tokens;
      ++st.target_forwards;
      tokens_.push_back(one[0]);
      if (logits.size() > n_tok) logits = logits.first(n_tok);
    }
  } else {
    Speculator& spec = *opt.speculator;
    const SpeculativeStats before = spec.stats();
    std::vector<int32_t> next{sampler.sample(logits, history)};
    for (bool go = true; go;) {
      // `next`: tokens decided by the last round; all but the last are in the cache already.
      for (size_t i = 0; i < next.size() && go; ++i) {
        go = take(next[i]);
        if (go && i + 1 < next.size()) tokens_.push_back(next[i]);
      }
      if (!go) break;
      if (engine_.n_past() + 1 >= engine_.n_ctx() && !(context_shift() && shift_context())) {
        st.stop_reason = "context";
        break;
      }
      // The verify batch (the last token and k drafts) must leave a cell free, as a plain
      // decode does; drafts past the token budget would be thrown away.
      int32_t k_cap = static_cast<int32_t>(engine_.n_ctx() - engine_.n_past() - 2);
      if (opt.max_tokens >= 0) k_cap = std::min(k_cap, opt.max_tokens - st.generated_tokens - 1);
      std::vector<int32_t> ctx(tokens_);
      ctx.push_back(history.back());
      const auto t0 = std::chrono::steady_clock::now();
      try {
        next = spec.step(engine_, ctx, sampler, tok_.n_vocab(), k_cap);
      } catch (const NonFiniteLogitsError& e) {
        engine_.truncate(static_cast<int32_t>(tokens_.size()));
        throw e.with_step(fmt::format("speculative step after {} generated tokens", st.generated_tokens));
      }
      st.decode_ms += ms_since(t0);
      tokens_.push_back(ctx.back());
      st.decoded_tokens += static_cast<int32_t>(next.size());  // the last token and the accepted drafts
      ++st.target_forwards;
    }
    // A stop inside the accepted drafts leaves later ones in the cache: drop them.
    engine_.truncate(static_cast<int32_t>(tokens_.size()));
    st.drafted = spec.stats().drafted - before.drafted;
    st.accepted = spec.stats().accepted - before.accepted;
  }
  generated_.assign(history.begin() + static_cast<std::ptrdiff_t>(prompt.size()), history.end());
  text += detok.flush();
  emit(text.size());
  return text;
}

}  // namespace minfer
