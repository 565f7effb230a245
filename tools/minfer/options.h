// Options shared by the model-running subcommands (run, chat, bench, perplexity, serve) and the
// code that turns them into an Engine and a Sampler.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "chat/chat.h"
#include "engine/engine.h"
#include "engine/speculative.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace minfer::cli {

/// The KV cache type name used when no option names one: MINFER_CACHE_TYPE (lower case), else
/// "f16". Shared by --cache-type (run, chat, perplexity) and bench's -ctk.
std::string default_cache_type();

/// --graph-dump, --profile and --trace-out (docs/observability.md), shared by the model commands
/// and bench.
struct ObservabilityArgs {
  std::string graph_dump;  ///< --graph-dump FILE (EngineConfig::graph_dump)
  bool profile = false;    ///< --profile: op timing on (graph/op_timing.h), its table at the end
  std::string trace_out;   ///< --trace-out FILE.json: trace events of every forward (graph/op_timing.h)
  const CLI::Option* dump_opt = nullptr;   ///< set by add(): was --graph-dump given (maybe empty)?
  const CLI::Option* trace_opt = nullptr;  ///< set by add(): was --trace-out given (maybe empty)?

  /// Adds the three options; `what` ends their help texts' "when the ... ends" ("command", "bench").
  void add(CLI::App* cmd, const char* what);
  /// Before any work: an empty file name, or one file for --trace-out and the graph dump (given
  /// or MINFER_GRAPH_DUMP), throws minfer::Error naming them; then op timing and the trace
  /// events are turned on for the process (graph::set_op_timing, graph::set_trace_out, which
  /// checks the trace file's name and folder). The graph dump's name and folder are checked by
  /// the Engine that writes it.
  void apply() const;
};

struct ModelArgs {
  std::string model;
  std::string device = "cpu";
  int threads = 0;
  int64_t ctx = 0;
  int32_t ubatch = 0;  ///< 0: default_ubatch(device)
  std::string cache_type;  ///< "" = MINFER_CACHE_TYPE or f16
  std::string cache_type_k, cache_type_v;  ///< -ctk / -ctv ("": --cache-type's)
  std::string gpu_layers;  ///< -ngl as given ("": not given)
  std::string flash_attn = "auto";  ///< -fa on|off|auto
  int64_t batch = 0;       ///< -b: llama.cpp's logical batch; caps the ubatch (0: not given)
  bool no_warmup = false;  ///< --no-warmup: accepted (minfer runs no warm-up pass)
  ObservabilityArgs observe;  ///< --graph-dump, --profile, --trace-out
  const CLI::Option* device_opt = nullptr;  ///< set by add(): was --device given?

  /// Adds -m/--model, --device, -t/--threads, -c/--ctx-size, -ub/--ubatch-size, --cache-type,
  /// -ctk/-ctv, -ngl/--n-gpu-layers, -fa/--flash-attn, -b/--batch-size, --no-warmup, --graph-dump, --profile, --trace-out.
  void add(CLI::App* cmd);
  /// The engine's configuration from the option values, checked, before the model is known (the
  /// device and ubatch are final only after place()). Throws minfer::Error for a bad value and for
  /// K and V cache types that differ (the attention kernels read one KV format), and what
  /// ObservabilityArgs::apply() refuses (which it runs).
  EngineConfig checked_config() const;
  /// Completes `c` (from checked_config) for a model of `n_layer` layers. A given -ngl chooses the
  /// device: 0 the CPU, n_layer or more ("all", -1) CUDA; anything in between throws
  /// minfer::Error (a model is placed all or nothing), as does an -ngl that contradicts a given
  /// --device. With `n_layer` < 0 (before the load) only what does not need the layer count is
  /// checked. Then -b caps the ubatch.
  void place(EngineConfig& c, int64_t n_layer) const;
};

/// -ngl VALUE: a whole number >= 0, or "all" / -1 (every layer: returned as INT64_MAX).
/// Throws minfer::Error naming the option and the value. Shared with bench's -ngl lists.
int64_t parse_gpu_layers(const std::string& value);

/// -fa VALUE (llama.cpp: on|off|auto, also 1|0|true|false, any case) as "on", "off" or "auto".
/// Throws minfer::Error naming the value.
std::string parse_flash_attn(const std::string& value);

/// Applies -fa to the backends created next: on CUDA "off" takes the prefill attention off the
/// flash-attention kernel (MINFER_CUDA_NO_FLASH_ATTN=1), "on" puts it back, "auto" leaves the
/// environment's choice; the CPU backend has one attention path, so there it changes nothing.
void apply_flash_attn(const std::string& fa);

/// llama-cli's -e/--escape processing of prompt text: \n \r \t \\ \' \" \a \b \f \v
/// and \xHH become the bytes they name; any other backslash is kept as it is.
std::string process_escapes(std::string_view text);

/// One stderr line naming the seed of a sampled run (temp > 0), so that --seed repeats it
/// (llama.cpp prints its sampler seed likewise). Nothing for greedy decoding.
void report_seed(const SamplerParams& p);

struct SamplingArgs {
  float temp = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t repeat_last_n = 64;
  std::string seed = "-1";  ///< as given: parse_seed_option (CLI11 would take "0x10", "+5", clamp 2^70)

  void add(CLI::App* cmd);
  SamplerParams params() const;
};

/// --seed VALUE: a decimal whole number 0..2^64-1 and nothing else (no sign, hex, spaces or
/// exponent). With allow_random, "-1" means "pick a random seed" (returns std::nullopt).
/// Throws minfer::Error naming the option and the value otherwise.
std::optional<uint64_t> parse_seed_option(const std::string& value, bool allow_random);

/// A whole-number option taken as text, decimal digits with an optional leading '-' only (CLI11
/// would read "010" as octal, "0x10" as hex, "" as 0, and clamp 10^22 to 2^63 - 1 before the
/// range check could name it). Throws minfer::Error "<option> '<value>' is not a whole number
/// (<range>)" or, beyond 64 bits, "<option> <value> is out of range: <range>".
int64_t parse_int_option(const std::string& value, std::string_view option, std::string_view range);

/// Chat rendering options from --think / --no-think (neither: the template's default).
chat::ChatOptions chat_options(bool think, bool no_think);

/// The --chat-template of run and chat, read and parsed now, before the model loads, so that a
/// missing, unreadable or unparsable file is reported at once: minfer::Error naming the option
/// and the file (chat::select_chat_template, chat::ChatTemplate). Empty `override_value`:
/// nullopt, the model's own template is used (chat_template_for).
std::optional<chat::ChatTemplate> chat_template_override(const std::string& override_value);

/// The template run and chat render with: `override_template` when set, else `model_template`
/// (the model's tokenizer.chat_template; minfer::Error naming `model_path` and suggesting
/// --chat-template chatml when it is empty, or when it does not parse).
chat::ChatTemplate chat_template_for(std::optional<chat::ChatTemplate> override_template,
                                     std::string_view model_template, const std::string& model_path);

/// --keep and --no-context-shift (run, chat): what a Session does when the context is full.
struct ContextArgs {
  int32_t keep = -1;   ///< tokens kept at the start (-1: the chat template's preamble, or 0)
  bool shift = true;   ///< false: --no-context-shift

  /// Adds --keep N and --no-context-shift.
  void add(CLI::App* cmd);
  /// The tokens to keep for a context of `n_ctx` cells: --keep when given, else `preamble`.
  /// Throws minfer::Error when a given --keep leaves fewer than 2 tokens to shift out (context
  /// shift could then never make room), naming both values.
  int32_t keep_for(int64_t n_ctx, int32_t preamble) const;
};

/// Tokens at the start of every conversation rendered by `tmpl` with `system` (the system prompt
/// and the template's preamble up to the first user message's text): the longest common prefix
/// of two one-message conversations. The default --keep of chat and run --chat.
int32_t preamble_tokens(const tok::Tokenizer& tk, const chat::ChatTemplate& tmpl, const chat::ChatOptions& opt,
                        const std::string& system);

struct LoadedModel {
  std::shared_ptr<const Model> model;
  std::unique_ptr<Engine> engine;
};
/// Loads the model (one line on stderr: name, architecture, size, device) and creates its
/// engine. Throws minfer::Error with a one-line message on any failure.
LoadedModel load_model(const ModelArgs& args);

// ---- speculative decoding (run, chat) ----

/// -md/--model-draft, --spec-draft-n-max/-n-min/-p-min (and the older --draft-max, --draft-min,
/// --draft-p-min), --lookup N, --spec-type, --device-draft: llama.cpp 80fb11ac's spellings.
struct SpeculativeArgs {
  std::string draft_model;
  std::string device;       ///< "" = the target's --device
  std::string n_max, n_min, p_min, lookup, type;  ///< as given ("" = default)

  /// Adds the options to `cmd`.
  void add(CLI::App* cmd);
  /// The parameters, checked (minfer::Error naming the option and value); `enabled` false when
  /// neither a draft model nor lookup was asked for.
  SpeculativeParams params(bool* enabled) const;
};

/// Loads the draft model `args.draft_model` (non-empty) with the target's options, context
/// (`target`'s engine cells) and threads, on --device-draft when given, and checks its
/// vocabulary against the target's (one-line minfer::Error naming the first differing token).
LoadedModel load_draft(const SpeculativeArgs& args, const ModelArgs& target_args, const LoadedModel& target);

/// What run and chat keep alive for speculation: the draft model and engine (absent for
/// lookup) and the Speculator (absent when speculation is off).
struct SpeculativeSetup {
  LoadedModel draft;
  std::unique_ptr<Speculator> speculator;
};
/// Loads the draft (checking its vocabulary against the target's: one-line minfer::Error naming
/// the first differing token) with the target's threads, context and KV type, or sets up
/// lookup; nothing when speculation is off. `sampling` is the target's sampler parameters.
SpeculativeSetup make_speculator(const SpeculativeArgs& args, const ModelArgs& target_args, const LoadedModel& target,
                                 const SamplerParams& sampling);

}  // namespace minfer::cli
