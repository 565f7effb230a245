// Options shared by the model-running subcommands (run, chat, bench, perplexity, serve) and the
// code that turns them into an Engine and a Sampler.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "chat/chat.h"
#include "engine/engine.h"
#include "sampling/sampler.h"

namespace minfer::cli {

struct ModelArgs {
  std::string model;
  std::string device = "cpu";
  int threads = 0;
  int64_t ctx = 0;
  int32_t ubatch = 512;
  std::string cache_type;  ///< "" = MINFER_CACHE_TYPE or f16

  /// Adds -m/--model, --device, -t/--threads, -c/--ctx-size, -ub/--ubatch-size, --cache-type.
  void add(CLI::App* cmd);
  EngineConfig engine_config() const;
};

struct SamplingArgs {
  float temp = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t repeat_last_n = 64;
  int64_t seed = -1;  ///< -1: random

  void add(CLI::App* cmd);
  SamplerParams params() const;
};

/// Chat rendering options from --think / --no-think (neither: the template's default).
chat::ChatOptions chat_options(bool think, bool no_think);

/// Loads the model (one line on stderr: name, architecture, size, device) and creates its
/// engine. Throws minfer::Error with a one-line message on any failure.
struct LoadedModel {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Engine> engine;
};
LoadedModel load_model(const ModelArgs& args);

}  // namespace minfer::cli
