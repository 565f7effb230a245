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

struct GenerateOptions {
  int32_t max_tokens = 256;          ///< < 0: until the context is full
  std::vector<std::string> stop;     ///< stop strings (not included in the output)
  bool stop_at_eog = true;
};

struct GenerateStats {
  int32_t prompt_tokens = 0;         ///< tokens prefilled by this call (after cache reuse)
  int32_t reused_tokens = 0;         ///< prompt tokens already in the KV cache
  int32_t generated_tokens = 0;
  int32_t decoded_tokens = 0;        ///< one-token forward passes (timed in decode_ms)
  double prefill_ms = 0.0;
  double decode_ms = 0.0;
  std::string stop_reason;           ///< "eog", "length", "stop", "context"
  double prefill_tps() const { return prompt_tokens > 0 && prefill_ms > 0 ? prompt_tokens / (prefill_ms / 1e3) : 0.0; }
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
  /// At least the last prompt token is always recomputed (its logits are needed).
  std::vector<float> prefill(std::span<const int32_t> prompt, GenerateStats* stats);

  /// Prefill `prompt`, then sample until a stop condition. `on_text` receives each complete
  /// UTF-8 piece as it is produced (stop strings held back until resolved) and may return
  /// false to stop early. Returns the generated text.
  std::string generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& opt,
                       const std::function<bool(const std::string&)>& on_text, GenerateStats* stats);

  const std::vector<int32_t>& tokens() const { return tokens_; }
  void reset();

 private:
  Engine& engine_;
  const tok::Tokenizer& tok_;
  std::vector<int32_t> tokens_;  ///< what sequence 0 of the cache holds
};

}  // namespace minfer
