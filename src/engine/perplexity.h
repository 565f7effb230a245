// Perplexity of a model over a text, computed the way llama-perplexity does (so the numbers are
// comparable): the tokens are cut into floor(n / n_ctx) non-overlapping chunks of n_ctx tokens;
// each chunk is evaluated from an empty cache and the logits at positions n_ctx/2 .. n_ctx-2
// score the tokens that follow them. PPL = exp(mean NLL over all scored tokens). For a
// vocabulary that adds BOS (Llama, Mistral) the first token of every chunk is replaced by BOS,
// as llama-perplexity does.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "engine/engine.h"

namespace minfer {

struct PerplexityResult {
  int64_t n_chunks = 0;
  int64_t n_scored = 0;
  double nll_mean = 0.0;
  double ppl = 0.0;
  double ppl_stderr = 0.0;          ///< delta-method standard error of the PPL estimate
  std::vector<double> running_ppl;  ///< PPL after each chunk
};

/// Scores `tokens` with `engine` (its cache is cleared per chunk). `max_chunks` < 0: all.
/// `on_chunk(i, running_ppl)` is called after each chunk. Throws minfer::Error when the text
/// holds less than one whole chunk or n_ctx exceeds the engine's context; NonFiniteLogitsError
/// naming the chunk and position when a scored row holds a NaN or an infinity (never a `nan` PPL).
/// `bos` >= 0: the token put first in every chunk (the vocabulary's BOS when it adds one), -1: none.
PerplexityResult perplexity(Engine& engine, std::span<const int32_t> tokens, int64_t n_ctx, int64_t max_chunks,
                            const std::function<void(int64_t, double)>& on_chunk = {}, int32_t bos = -1);

}  // namespace minfer
