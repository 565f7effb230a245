// A tiny random model (synth_model.h) that also carries a small byte-level tokenizer, so the
// `minfer` commands that need one (run, chat, bench, perplexity, tokenize) can run in tests
// without ../shared.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "convert/synth_vocab.h"
#include "synth_model.h"
#include "tokenizer_test_util.h"

namespace minfer::test {

/// Writes `dir`/tokenizer.json with `n_tokens` tokens (the 256 bytes, then added tokens
/// "<tN>", the last one "<|endoftext|>" marked special) and a model of `spec` whose GGUF
/// metadata holds that vocabulary (tokenizer.ggml.*). Returns the model path.
inline std::filesystem::path write_tokenized_model(SynthSpec spec, const std::filesystem::path& dir,
                                                   int64_t n_tokens) {
  std::vector<std::pair<std::string, bool>> added;
  for (int64_t i = 256; i + 1 < n_tokens; ++i) added.emplace_back("<t" + std::to_string(i) + ">", false);
  added.emplace_back("<|endoftext|>", true);
  const auto json = dir / "tokenizer.json";
  write_tokenizer_json(tiny_vocab({}, added), json, /*pair_merges=*/false);
  const auto previous = spec.extra_metadata;
  spec.extra_metadata = [previous, json, n_tokens](gguf::GgufWriter& w) {
    if (previous) previous(w);
    convert::add_vocab_metadata(w, json.string(), n_tokens);
  };
  return write_synth_model(spec, dir);
}

}  // namespace minfer::test
