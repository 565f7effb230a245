// `minfer perplexity`: llama-perplexity's measurement (see src/engine/perplexity.h).
#include <cstdio>
#include <fstream>
#include <iterator>

#include "commands.h"
#include "core/error.h"
#include "core/read_file.h"
#include "engine/perplexity.h"
#include "options.h"
#include "tokenizer/tokenizer.h"

namespace minfer::cli {

void add_perplexity_command(CLI::App& app) {
  struct Args {
    ModelArgs model;
    std::string file;
    int64_t chunks = -1;
  };
  auto a = std::make_shared<Args>();
  a->model.ctx = 512;
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a model over a text file (llama-perplexity's method)");
  a->model.add(cmd);
  cmd->add_option("-f,--file", a->file, "text file")->required();
  cmd->add_option("--chunks", a->chunks, "score at most this many chunks (-1: all)")->capture_default_str();
  cmd->callback([a] {
    if (a->chunks == 0 || a->chunks < -1) fail("--chunks {} must be positive, or -1 for all chunks", a->chunks);
    const std::string text = read_file_bytes(a->file, "text file", kTextLimitBytes);
    LoadedModel lm = load_model(a->model);
    const tok::Tokenizer& tk = *lm.model->tokenizer();
    const std::vector<int32_t> ids = tk.encode(text, /*add_special=*/true, /*parse_special=*/false);
    std::fprintf(stderr, "minfer: %zu tokens, chunks of %lld\n", ids.size(), static_cast<long long>(lm.engine->n_ctx()));
    const PerplexityResult r = perplexity(*lm.engine, ids, lm.engine->n_ctx(), a->chunks, [](int64_t i, double ppl) {
      std::printf("[%lld]%.4f,", static_cast<long long>(i + 1), ppl);
      std::fflush(stdout);
    }, tk.add_bos() ? tk.bos() : -1);
    std::printf("\nFinal estimate: PPL = %.4f +/- %.5f (%lld chunks, %lld scored tokens)\n", r.ppl, r.ppl_stderr,
                static_cast<long long>(r.n_chunks), static_cast<long long>(r.n_scored));
  });
}

}  // namespace minfer::cli
