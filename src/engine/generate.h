// Text generation on top of an Engine: prompt prefill, token-by-token decode with a sampler,
// streaming detokenized text, stopping at end-of-generation tokens, a token budget or stop
// strings. Shared by `minfer run`, `minfer chat` and the server.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace minfer {

class Speculator;

struct GenerateOptions {
  int32_t max_tokens = 256;          ///< < 0: until the context is full
  std::vector<std::string> stop;     ///< stop strings (not included in the output)
  bool stop_at_eog = true;
  /// Called once the prompt is in the cache, before the first token is sampled (run's
  /// --prompt-cache saves there). Exceptions propagate.
  std::function<void()> after_prefill;
  /// Speculative decoding (engine/speculative.h): when set, each step drafts and verifies
  /// through it; greedy output is unchanged, sampled output keeps the target's distribution.
  /// Not owned; must use this Session's engine as its target.
  Speculator* speculator = nullptr;
};

struct GenerateStats {
  int32_t prompt_tokens = 0;         ///< tokens prefilled by this call (after cache reuse)
  int32_t reused_tokens = 0;         ///< prompt tokens already in the KV cache
  int32_t generated_tokens = 0;
  int32_t decoded_tokens = 0;        ///< tokens put into the KV cache after the prompt (timed in decode_ms)
  int32_t target_forwards = 0;       ///< forward passes after the prompt (one token each without speculation)
  int64_t drafted = 0;               ///< speculation: tokens proposed to the target
  int64_t accepted = 0;              ///< speculation: of those, kept
  double prefill_ms = 0.0;
  double decode_ms = 0.0;
  std::string stop_reason;           ///< "eog", "length", "stop", "context"
  double prefill_tps() const { return prompt_tokens > 0 && prefill_ms > 0 ? prompt_tokens / (prefill_ms / 1e3) : 0.0; }
  /// Generated tokens per forward pass of the target after the prompt.
  double tokens_per_forward() const { return target_forwards > 0 ? static_cast<double>(generated_tokens) / target_forwards : 0.0; }
  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0; }
  double decode_tps() const { return decoded_tokens > 0 && decode_ms > 0 ? decoded_tokens / (decode_ms / 1e3) : 0.0; }
};

/// Length of the longest suffix of `text` that is a proper prefix of some stop string: that much
/// must be held back from a stream because it may still become a stop string.
size_t held_suffix(const std::string& text, const std::vector<std::string>& stops);

/// Keeps an engine's sequence 0 in step with a token list, so a new prompt that shares a prefix
/// with what the cache holds only prefills the difference (multi-turn chat, server slots).
class Session {
 public:
  Session(Engine& engine, const tok::Tokenizer& tokenizer);

  /// Makes the cache hold exactly `prompt` and returns the logits of its last token. Tokens
  /// already in the cache (the common prefix) are kept; the rest are truncated and prefilled.
  /// At least the last prompt token is always recomputed (its logits are needed). Throws
  /// NonFiniteLogitsError naming "prompt prefill" when the logits are not finite.
  std::vector<float> prefill(std::span<const int32_t> prompt, GenerateStats* stats);

  /// Prefill `prompt`, then sample until a stop condition. `on_text` receives each complete
  /// UTF-8 piece as it is produced (stop strings held back until resolved) and may return
  /// false to stop early. Returns the generated text. Throws NonFiniteLogitsError naming the
  /// step ("decode step 3 (position 17): logits contain NaN ...") when a sampled row holds a NaN
  /// or an infinity: nothing is sampled from it. With opt.speculator, decode_ms times whole
  /// rounds (drafting, verifying, sampling).
  std::string generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& opt,
                       const std::function<bool(const std::string&)>& on_text, GenerateStats* stats);

  const std::vector<int32_t>& tokens() const { return tokens_; }
  /// The tokens the last generate() produced (GenerateStats::generated_tokens of them).
  const std::vector<int32_t>& generated() const { return generated_; }
  void reset();

  /// Context shift: when generate() finds the context full, it keeps the first `n_keep` tokens,
  /// drops the oldest half of the rest (Engine::seq_rm) and moves the others down
  /// (Engine::seq_add), instead of stopping with stop_reason "context". n_keep < 0: off (the
  /// default). The cache positions stay 0..n-1, in step with tokens().
  void set_context_shift(int32_t n_keep) { shift_keep_ = n_keep; }
  bool context_shift() const { return shift_keep_ >= 0; }
  /// Shifts once as described (keep the first min(n_keep, n - 1) tokens, drop half the rest,
  /// at least one token). Returns false, changing nothing, when nothing can be dropped.
  bool shift_context();
  /// Context shifts done so far.
  int32_t shifts() const { return shifts_; }

  /// Writes sequence 0 with tokens() to `path` (Engine::save_sequence_file: temporary file,
  /// renamed; minfer::Error naming the file on failure, the old file kept).
  void save(const std::string& path) const;
  /// Replaces the cache's sequence 0 and tokens() with the session in `path`
  /// (Engine::restore_sequence_file). A refused file throws minfer::Error "<path>: <reason>"
  /// and changes nothing; so does a file whose positions are not 0..n-1.
  void load(const std::string& path);

 private:
  Engine& engine_;
  const tok::Tokenizer& tok_;
  std::vector<int32_t> tokens_;  ///< what sequence 0 of the cache holds (token i at position i)
  std::vector<int32_t> generated_;
  int32_t shift_keep_ = -1;
  int32_t shifts_ = 0;
};

}  // namespace minfer
