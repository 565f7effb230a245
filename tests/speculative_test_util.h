// What the speculative-decoding tests share (tests/test_speculative.cpp on the CPU,
// tests/cuda/test_cuda_speculative.cpp on CUDA): the trained pair's files, the code prompts, a
// greedy generation with or without a speculator, and fixed-length drafting.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/generate.h"
#include "engine/speculative.h"
#include "sampling/sampler.h"

namespace minfer::test {

/// The trained target / draft pair under ../shared (Q8_0).
inline constexpr const char* kSpecTarget = "models/minfer-demo-py-q8_0.gguf";
inline constexpr const char* kSpecDraft = "models/minfer-draft-py-q8_0.gguf";

inline const char* const kCodePrompts[] = {
    "import numpy as np\n\ndef normalize(x):\n",
    "def fibonacci(n):\n",
    "class Stack:\n    def __init__(self):\n",
    "import os\nimport sys\n\ndef main():\n",
    "def quicksort(arr):\n    if len(arr) <= 1:\n",
};

/// Greedy generation of `n` tokens on `session` (the target; -1: until the context is full),
/// with `spec` or without; the tokens generated. Stats into `st` when given.
inline std::vector<int32_t> greedy_tokens(Session& session, const std::vector<int32_t>& prompt, int32_t n,
                                          Speculator* spec, GenerateStats* st = nullptr) {
  SamplerParams sp;
  sp.temp = 0.0f;
  Sampler sampler(sp);
  GenerateOptions opt;
  opt.max_tokens = n;
  opt.stop_at_eog = false;
  opt.speculator = spec;
  GenerateStats local;
  session.generate(prompt, sampler, opt, {}, st ? st : &local);
  return session.generated();
}

/// Drafting of exactly `n_max` tokens a round: p-min off, no adaptive length.
inline SpeculativeParams fixed_draft(int32_t n_max) {
  SpeculativeParams p;
  p.n_max = n_max;
  p.p_min = 0.0f;
  p.adaptive = false;
  return p;
}

}  // namespace minfer::test
