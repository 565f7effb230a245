// Parsing and validation of the OpenAI-style request bodies of `minfer serve` (chat completions
// and completions), the errors they answer with, and the pure pieces of the responses (logprobs,
// the Prometheus text). No HTTP here: the server and the fuzz target call these on a body string.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "server/scheduler.h"

namespace minfer::server {

/// An error that becomes an HTTP status and an OpenAI-style body
/// {"error": {"message", "type", "code", "param"}}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {});
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  /// OpenAI's error type for the status: invalid_request_error (400, 413), authentication_error
  /// (401), not_found_error (404), server_error (500), unavailable_error (503).
  std::string type() const;
  /// The response body.
  std::string body() const;

 private:
  int status_;
  std::string param_;
};

/// The response body of an error with `status` and `message` (ApiError::body without a throw).
std::string error_body(int status, const std::string& message, const std::string& param = {});

/// Most stop strings and most top logprobs a request may ask for (OpenAI allows 4 stop strings
/// and 20 top logprobs; llama-server takes more stop strings).
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr int32_t kMaxTopLogprobs = 20;

/// A validated generation request (before tokenization).
struct GenerationRequest {
  bool chat = false;                  ///< /v1/chat/completions (else /v1/completions)
  std::string model;                  ///< as given ("" when absent)
  nlohmann::ordered_json messages;    ///< chat: [{role, content (string)}...], non-empty
  std::string prompt_text;            ///< completions: the prompt as text ...
  std::vector<int32_t> prompt_ids;    ///< ... or as token ids (prompt_is_ids)
  bool prompt_is_ids = false;
  int32_t max_tokens = -1;            ///< -1: until the slot's context is full
  SamplerParams sampling;             ///< seed random unless seed_given
  bool seed_given = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;         ///< stream_options.include_usage
  bool logprobs = false;
  int32_t top_logprobs = 0;           ///< alternatives per token (chat top_logprobs, completions logprobs)
  /// llama-server's per-request speculation fields "speculative.n_max" (0..256; 0: no drafts for
  /// this request), "speculative.n_min" (0..256, at most n_max when both are given) and
  /// "speculative.p_min" (0..1, draft model only); -1: the server's --spec-draft-* setting.
  int32_t spec_n_max = -1, spec_n_min = -1;
  float spec_p_min = -1.0f;
  /// llama-server's "ignore_eos": end-of-generation tokens are never sampled (their logits are
  /// -inf), so the request runs to max_tokens or the slot's end (benchmarks send it).
  bool ignore_eos = false;
};

/// Parses and validates a request body. Throws ApiError(400) naming the field and the value for
/// malformed JSON, a field of the wrong type or out of range, a missing or empty messages /
/// prompt, n != 1. Unknown fields are ignored (clients send many). Defaults not given by the
/// request are minfer's sampler defaults (SamplerParams), as llama-server's are llama.cpp's.
GenerationRequest parse_generation_request(std::string_view body, bool chat);

/// Parses a /tokenize body {"content": string, "add_special": bool?, "with_pieces": bool?} or a
/// /detokenize body {"tokens": [int...]}; ApiError(400) as above.
struct TokenizeRequest {
  std::string content;
  bool add_special = false;
  bool with_pieces = false;
};
TokenizeRequest parse_tokenize_request(std::string_view body);
std::vector<int64_t> parse_detokenize_request(std::string_view body);

/// log-softmax of `logits` at `token` and the `top` largest entries (id, logprob), largest
/// first, ties to the lower id. Computed in double from the raw logits (the model's
/// distribution, before sampling filters, as OpenAI reports it).
struct TokenLogprob {
  double logprob = 0.0;
  std::vector<std::pair<int32_t, double>> top;
};
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int32_t top);

/// The /metrics text (Prometheus exposition format 0.0.4) of `st`.
std::string prometheus_text(const SchedulerStats& st);

/// JSON text of `j` with invalid UTF-8 (a token piece may be part of a character) replaced by
/// U+FFFD instead of throwing.
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace minfer::server
