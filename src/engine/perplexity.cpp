#include "engine/perplexity.h"

#include <cmath>

#include "core/error.h"

namespace minfer {

PerplexityResult perplexity(Engine& engine, std::span<const int32_t> tokens, int64_t n_ctx, int64_t max_chunks,
                            const std::function<void(int64_t, double)>& on_chunk, int32_t bos) {
  if (n_ctx < 4) fail("perplexity: context {} is too small", n_ctx);
  if (n_ctx > engine.n_ctx()) fail("perplexity: chunk size {} exceeds the engine context {}", n_ctx, engine.n_ctx());
  int64_t n_chunks = static_cast<int64_t>(tokens.size()) / n_ctx;
  if (n_chunks == 0) fail("perplexity: the text has {} tokens, fewer than one chunk of {}", tokens.size(), n_ctx);
  if (max_chunks >= 0) n_chunks = std::min(n_chunks, max_chunks);
  const size_t nv = static_cast<size_t>(engine.n_vocab());
  const int64_t first = n_ctx / 2;
  PerplexityResult r;
  double nll_sum = 0.0, nll2_sum = 0.0;
  for (int64_t c = 0; c < n_chunks; ++c) {
    engine.reset();
    const auto span = tokens.subspan(static_cast<size_t>(c * n_ctx), static_cast<size_t>(n_ctx));
    std::vector<int32_t> chunk(span.begin(), span.end());
    if (bos >= 0) chunk[0] = bos;
    Batch b = Batch::sequence(chunk, 0, 0, false);
    for (int64_t i = first; i < n_ctx - 1; ++i) b.logits[static_cast<size_t>(i)] = 1;
    b.logits.back() = 0;
    std::span<const float> logits;
    try {
      logits = engine.forward_view(b);
    } catch (const NonFiniteLogitsError& e) {
      throw e.with_step(fmt::format("perplexity chunk {} of {}", c + 1, n_chunks));
    }
    for (int64_t i = first; i < n_ctx - 1; ++i) {
      const float* l = logits.data() + static_cast<size_t>(i - first) * nv;
      float mx = l[0];
      for (size_t v = 1; v < nv; ++v) mx = std::max(mx, l[v]);
      double sum = 0.0;
      for (size_t v = 0; v < nv; ++v) sum += std::exp(static_cast<double>(l[v] - mx));
      const double nll = std::log(sum) - static_cast<double>(l[chunk[static_cast<size_t>(i + 1)]] - mx);
      nll_sum += nll;
      nll2_sum += nll * nll;
      ++r.n_scored;
    }
    r.running_ppl.push_back(std::exp(nll_sum / static_cast<double>(r.n_scored)));
    if (on_chunk) on_chunk(c, r.running_ppl.back());
  }
  r.n_chunks = n_chunks;
  r.nll_mean = nll_sum / static_cast<double>(r.n_scored);
  r.ppl = std::exp(r.nll_mean);
  const double var = nll2_sum / static_cast<double>(r.n_scored) - r.nll_mean * r.nll_mean;
  r.ppl_stderr = r.n_scored > 1 ? r.ppl * std::sqrt(std::max(0.0, var) / static_cast<double>(r.n_scored - 1)) : 0.0;
  return r;
}

}  // namespace minfer
