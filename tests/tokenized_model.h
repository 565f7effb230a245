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

/// A model of 300 tokens, as write_tokenized_model writes, whose tokenizer.ggml.pre names no
/// known pre-tokenizer ('bogus'): its tokenizer build fails with "<path>: unknown pre-tokenizer
/// tokenizer.ggml.pre = 'bogus'". Writes `dir`/tokenizer.json and the model; returns its path.
inline std::filesystem::path write_bad_vocab_model(const std::filesystem::path& dir) {
  (void)write_tokenized_model(SynthSpec{}, dir, 300);  // writes dir/tokenizer.json
  SynthSpec spec;
  spec.extra_metadata = [json = (dir / "tokenizer.json").string()](gguf::GgufWriter& w) {
    convert::add_vocab_metadata(w, json, 300);
    w.set_string("tokenizer.ggml.pre", "bogus");
  };
  return write_synth_model(spec, dir);
}

}  // namespace minfer::test
