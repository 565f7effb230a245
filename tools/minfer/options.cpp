#include "options.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "core/printable.h"
#include "core/thread_pool.h"
#include "quant/quant.h"

namespace minfer::cli {

std::string default_cache_type() {
  const std::string env = env_choice("MINFER_CACHE_TYPE");
  return env.empty() ? "f16" : env;
}

void ModelArgs::add(CLI::App* cmd) {
  cmd->add_option("-m,--model", model, "GGUF model file")->required();
  cmd->add_option("--device", device, "cpu or cuda")->capture_default_str();
  cmd->add_option("-t,--threads", threads, "CPU threads (default: all cores)");
  cmd->add_option("-c,--ctx-size", ctx, "context size in tokens (default: min(training context, 4096))");
  cmd->add_option("-u,--ubatch-size", ubatch, "most tokens per forward pass (default: 512 on the CPU, 2048 on CUDA)");
  cmd->add_option("--cache-type", cache_type, "KV cache format: f32, f16 or q8_0 (default: $MINFER_CACHE_TYPE or f16)");
}

EngineConfig ModelArgs::engine_config() const {
  EngineConfig c;
  c.device = parse_device(device);
  c.n_threads = resolve_thread_count(threads, "-t");
  if (ctx < 0) fail("context size {} is negative", ctx);
  c.n_ctx = ctx;
  if (ubatch < 0) fail("-u/--ubatch-size {} must be positive (or 0 for the device's default)", ubatch);
  c.n_ubatch = ubatch;
  c.kv_type = parse_kv_type(cache_type.empty() ? default_cache_type() : cache_type);
  return c;
}

void SamplingArgs::add(CLI::App* cmd) {
  cmd->add_option("--temp", temp, "temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--top-k", top_k, "top-k (0: off)")->capture_default_str();
  cmd->add_option("--top-p", top_p, "top-p (1: off)")->capture_default_str();
  cmd->add_option("--min-p", min_p, "min-p (0: off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", repeat_penalty, "repetition penalty (1: off)")->capture_default_str();
  cmd->add_option("--presence-penalty", presence_penalty, "presence penalty")->capture_default_str();
  cmd->add_option("--frequency-penalty", frequency_penalty, "frequency penalty")->capture_default_str();
  cmd->add_option("--repeat-last-n", repeat_last_n, "tokens the penalties look back over")->capture_default_str();
  cmd->add_option("-s,--seed", seed, "sampling seed, a whole number from 0 to 2^64-1 (-1: random)")
      ->capture_default_str();
}

std::optional<uint64_t> parse_seed_option(const std::string& value, bool allow_random) {
  if (allow_random && value == "-1") return std::nullopt;
  const std::string range = fmt::format("a whole number from 0 to {}{}", std::numeric_limits<uint64_t>::max(),
                                        allow_random ? " (or -1 for a random seed)" : "");
  if (!value.empty() && value[0] == '-') fail("--seed {}: the seed cannot be negative; give {}", value, range);
  uint64_t seed = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, seed);
  if (value.empty() || ec != std::errc() || ptr != end) fail("--seed {}: not a seed; give {}", value, range);
  return seed;
}

int64_t parse_int_option(const std::string& value, std::string_view option, std::string_view range) {
  int64_t v = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, v);  // base 10, no '+', no spaces
  if (ec == std::errc::result_out_of_range && ptr == end) fail("{} {} is out of range: {}", option, value, range);
  if (value.empty() || ec != std::errc() || ptr != end) fail("{} '{}' is not a whole number ({})", option, value, range);
  return v;
}

SamplerParams SamplingArgs::params() const {
  SamplerParams p;
  p.temp = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.repeat_penalty = repeat_penalty;
  p.presence_penalty = presence_penalty;
  p.frequency_penalty = frequency_penalty;
  p.penalty_last_n = repeat_last_n;
  const std::optional<uint64_t> s = parse_seed_option(seed, /*allow_random=*/true);
  p.seed = s ? *s : std::random_device{}();
  validate(p);
  return p;
}

chat::ChatOptions chat_options(bool think, bool no_think) {
  if (think && no_think) fail("--think and --no-think contradict each other");
  chat::ChatOptions o;
  o.add_generation_prompt = true;
  if (think) o.enable_thinking = true;
  if (no_think) o.enable_thinking = false;
  return o;
}

std::optional<chat::ChatTemplate> chat_template_override(const std::string& override_value) {
  if (override_value.empty()) return std::nullopt;
  return chat::ChatTemplate(chat::select_chat_template({}, override_value, {}),
                            chat::chat_template_origin(override_value, {}));
}

chat::ChatTemplate chat_template_for(std::optional<chat::ChatTemplate> override_template,
                                     std::string_view model_template, const std::string& model_path) {
  if (override_template) return std::move(*override_template);
  return chat::ChatTemplate(chat::select_chat_template(model_template, {}, model_path),
                            chat::chat_template_origin({}, model_path));
}

LoadedModel load_model(const ModelArgs& args) {
  LoadedModel lm;
  const EngineConfig cfg = args.engine_config();
  lm.model = Model::load(args.model);
  const Model& m = *lm.model;
  if (m.tokenizer() == nullptr) fail("{}: the file has no tokenizer (tokenizer.ggml.* metadata)", args.model);
  lm.engine = std::make_unique<Engine>(lm.model, cfg);
  const HParams& h = m.hparams();
  log_info("loaded {} ({} {}, {} params, {:.1f} MiB) on {}, context {}, KV {}",
           printable(h.name.empty() ? args.model : h.name), printable(h.arch_name), size_class(m.n_params()),
           m.n_params(), static_cast<double>(m.weight_bytes()) / (1024.0 * 1024.0),
           lm.engine->backend().describe(), lm.engine->n_ctx(), type_name(cfg.kv_type));
  return lm;
}

void ContextArgs::add(CLI::App* cmd) {
  cmd->add_option("--keep", keep,
                  "tokens kept at the start when the context is full and the oldest half of the rest is dropped "
                  "(default: the system prompt and chat-template preamble)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return !v.empty() && v[0] == '-' ? "--keep must be 0 or more, not " + v : std::string();
          },
          "N>=0", "non-negative"));
  cmd->add_flag("--no-context-shift", [this](int64_t) { shift = false; },
                "stop (or refuse the message) when the context is full instead of dropping old tokens");
}

int32_t ContextArgs::keep_for(int64_t n_ctx, int32_t preamble) const {
  if (keep < 0) return preamble;
  if (shift && keep + 2 > n_ctx)
    fail("--keep {} leaves no tokens to drop in a context of {} (give a smaller --keep, a larger -c, or "
         "--no-context-shift)", keep, n_ctx);
  return keep;
}

int32_t preamble_tokens(const tok::Tokenizer& tk, const chat::ChatTemplate& tmpl, const chat::ChatOptions& opt,
                        const std::string& system) {
  const auto ids = [&](const char* text) {
    std::vector<chat::ChatMessage> msgs;
    if (!system.empty()) msgs.push_back({"system", system});
    msgs.push_back({"user", text});
    return tmpl.tokenize(tk, msgs, opt);
  };
  const std::vector<int32_t> a = ids("A"), b = ids("B");
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return static_cast<int32_t>(n);
}

// ---- speculative decoding (run, chat) ----

void SpeculativeArgs::add(CLI::App* cmd) {
  cmd->add_option("--model-draft", draft_model, "draft model for speculative decoding (same vocabulary)");
  cmd->add_option("--spec-draft-n-max,--draft-max,--draft-n", n_max, "most tokens drafted per step (default 16)");
  cmd->add_option("--spec-draft-n-min,--draft-min,--draft-n-min", n_min, "fewer drafted tokens than this: no verify (default 0)");
  cmd->add_option("--spec-draft-p-min,--draft-p-min", p_min,
                  "stop drafting where the draft's top probability is below this (default 0.75)");
  cmd->add_option("--lookup", lookup, "prompt lookup speculation with N-grams (no draft model)");
  cmd->add_option("--spec-type", type, "none, draft (with -md) or ngram-simple (prompt lookup, default N 3)");
  cmd->add_option("--device-draft", device, "device of the draft model: cpu or cuda (default: --device)");
}

SpeculativeParams SpeculativeArgs::params(bool* enabled) const {
  SpeculativeParams p;
  const auto int_of = [](const std::string& v, const char* name, int64_t lo, int64_t hi) {
    const std::string range = fmt::format("{} to {}", lo, hi);
    const int64_t x = parse_int_option(v, name, range);
    if (x < lo || x > hi) fail("{} {} is out of range: {}", name, x, range);
    return static_cast<int32_t>(x);
  };
  if (!n_max.empty()) p.n_max = int_of(n_max, "--spec-draft-n-max", 1, 256);
  if (!n_min.empty()) p.n_min = int_of(n_min, "--spec-draft-n-min", 0, 256);
  if (!p_min.empty()) {
    size_t used = 0;
    float v = -1.0f;
    try {
      v = std::stof(p_min, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != p_min.size() || !(v >= 0.0f && v <= 1.0f))
      fail("--spec-draft-p-min '{}' is not a probability (a number from 0 to 1)", printable(p_min));
    p.p_min = v;
  }
  if (!lookup.empty()) p.lookup_n = int_of(lookup, "--lookup", 1, 64);
  if (!type.empty() && type != "none" && type != "draft" && type != "ngram-simple")
    fail("--spec-type '{}' is not known (use none, draft or ngram-simple)", printable(type));
  if (type == "ngram-simple" && p.lookup_n == 0) p.lookup_n = 3;
  if (type == "draft" && draft_model.empty()) fail("--spec-type draft needs a draft model (-md FILE)");
  if (!draft_model.empty() && p.lookup_n > 0)
    fail("-md/--model-draft and prompt lookup (--lookup, --spec-type ngram-simple) exclude each other");
  if (!device.empty()) parse_device(device);
  if (!draft_model.empty()) {
    // Before any model loads, so that a wrong path is the only line printed.
    std::FILE* f = std::fopen(draft_model.c_str(), "rb");
    if (f == nullptr) fail("{}: cannot open the draft model (-md): {}", printable(draft_model), std::strerror(errno));
    std::fclose(f);
  }
  validate(p);
  *enabled = type != "none" && (!draft_model.empty() || p.lookup_n > 0);
  return p;
}

SpeculativeSetup make_speculator(const SpeculativeArgs& args, const ModelArgs& target_args, const LoadedModel& target,
                                 const SamplerParams& sampling) {
  SpeculativeSetup s;
  bool enabled = false;
  SpeculativeParams p = args.params(&enabled);
  if (!enabled) return s;
  p.seed = sampling.seed ^ 0x9E3779B97F4A7C15ull;  // the draft's own stream, fixed by --seed
  if (p.lookup_n > 0) {
    s.speculator = std::make_unique<Speculator>(p, sampling);
    return s;
  }
  ModelArgs d = target_args;
  d.model = args.draft_model;
  if (!args.device.empty()) d.device = args.device;
  d.ctx = target.engine->n_ctx();
  d.ubatch = 0;
  s.draft = load_model(d);
  check_vocab_compatible(*target.model->tokenizer(), *s.draft.model->tokenizer(), target_args.model, d.model);
  const double ratio = static_cast<double>(s.draft.model->weight_bytes()) /
                       static_cast<double>(std::max<uint64_t>(target.model->weight_bytes(), 1));
  s.speculator = std::make_unique<Speculator>(*s.draft.engine, s.draft.model->tokenizer()->n_vocab(), p, sampling,
                                              ratio);
  return s;
}

}  // namespace minfer::cli
