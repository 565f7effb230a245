#include "options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "core/ascii.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "core/printable.h"
#include "core/thread_pool.h"
#include "graph/op_timing.h"
#include "quant/quant.h"

namespace minfer::cli {

std::string default_cache_type() {
  const std::string env = env_choice("MINFER_CACHE_TYPE");
  return env.empty() ? "f16" : env;
}

void ModelArgs::add(CLI::App* cmd) {
  cmd->add_option("-m,--model", model, "GGUF model file")->required();
  device_opt = cmd->add_option("--device", device, "cpu or cuda (also -dev)")->capture_default_str();
  cmd->add_option("-t,--threads", threads, "CPU threads (default: all cores)");
  cmd->add_option("-c,--ctx-size", ctx, "context size in tokens (default: min(training context, 4096))");
  cmd->add_option("-u,--ubatch-size", ubatch, "most tokens per forward pass (default: 512 on the CPU, 2048 on CUDA; also -ub)");
  cmd->add_option("--cache-type", cache_type, "KV cache format: f32, f16 or q8_0 (default: $MINFER_CACHE_TYPE or f16)");
  cmd->add_option("--cache-type-k", cache_type_k, "K cache format (also -ctk; default: --cache-type's)");
  cmd->add_option("--cache-type-v", cache_type_v, "V cache format (also -ctv; default: -ctk's, else --cache-type's); must equal K's");
  cmd->add_option("--n-gpu-layers,--gpu-layers", gpu_layers,
                  "llama.cpp's -ngl: 0 runs on the CPU, the layer count or more (or 'all') on CUDA; a model is placed whole");
  cmd->add_option("--flash-attn", flash_attn, "on, off or auto (also -fa): off takes CUDA prefill off the flash-attention kernel")
      ->capture_default_str();
  cmd->add_option("-b,--batch-size", batch, "llama.cpp's logical batch: the ubatch is at most this (0: no limit)");
  cmd->add_flag("--no-warmup", no_warmup, "accepted for llama.cpp command lines (minfer runs no warm-up pass)");
  observe.add(cmd, "command");
}

int64_t parse_gpu_layers(const std::string& value) {
  if (value == "all" || value == "-1") return std::numeric_limits<int64_t>::max();
  const int64_t v = parse_int_option(value, "-ngl", "0 for the CPU, or the layer count or more / all for the GPU");
  if (v < 0) fail("-ngl {} must be 0 (CPU), or the layer count or more, or all (GPU)", value);
  return v;
}

std::string parse_flash_attn(const std::string& value) {
  const std::string v = ascii_lower(value);
  if (v == "on" || v == "1" || v == "true") return "on";
  if (v == "off" || v == "0" || v == "false") return "off";
  if (v == "auto") return "auto";
  fail("-fa/--flash-attn '{}' is not one of on, off, auto", value);
}

void apply_flash_attn(const std::string& fa) {
  env_override("MINFER_CUDA_NO_FLASH_ATTN",
               fa == "off" ? std::optional<std::string>("1") : fa == "on" ? std::optional<std::string>("0") : std::nullopt);
}

void ObservabilityArgs::add(CLI::App* cmd, const char* what) {
  dump_opt = cmd->add_option("--graph-dump", graph_dump,
                             "write the prepared compute graphs (one per ubatch shape, at most 8; after fusion and "
                             "device assignment) to FILE: Graphviz DOT for .dot, JSON for .json (also MINFER_GRAPH_DUMP)");
  cmd->add_flag("--profile", profile,
                fmt::format("time every graph node and print a per-op table (prefill and decode: count, total, mean, "
                            "share of the forward) when the {} ends (also MINFER_OP_TIMING=1; CUDA: events, graphs off)",
                            what));
  trace_opt = cmd->add_option("--trace-out", trace_out,
                              fmt::format("write a Chrome/Perfetto trace-event file (.json) of every forward and graph "
                                          "node when the {} ends (opens in ui.perfetto.dev; times nodes as --profile does)",
                                          what));
}

void ObservabilityArgs::apply() const {
  for (const auto& [opt, value] : {std::pair{dump_opt, &graph_dump}, std::pair{trace_opt, &trace_out}})
    if (opt != nullptr && opt->count() > 0 && value->empty())
      fail("{} needs a file name (it was given an empty one)", opt->get_name());
  const std::string dump = graph_dump.empty() ? env_string("MINFER_GRAPH_DUMP") : graph_dump;
  if (!dump.empty() && !trace_out.empty()) {
    std::error_code ec;
    const auto full = [&ec](const std::string& f) {  // absolute first: "x.json" and "./x.json" meet
      return std::filesystem::weakly_canonical(std::filesystem::absolute(f, ec), ec);
    };
    if (full(dump) == full(trace_out))
      fail("--trace-out {} and {} {} name the same file: give them two", trace_out,
           graph_dump.empty() ? "MINFER_GRAPH_DUMP" : "--graph-dump", dump);
  }
  if (profile) graph::set_op_timing(true);
  if (!trace_out.empty()) graph::set_trace_out(trace_out);
}

EngineConfig ModelArgs::checked_config() const {
  EngineConfig c;
  c.device = parse_device(device);
  c.n_threads = resolve_thread_count(threads, "-t");
  if (ctx < 0) fail("context size {} is negative", ctx);
  c.n_ctx = ctx;
  if (ubatch < 0) fail("-u/--ubatch-size {} must be positive (or 0 for the device's default)", ubatch);
  c.n_ubatch = ubatch;
  if (batch < 0) fail("-b/--batch-size {} must be positive (or 0: no limit)", batch);
  // K and V: -ctk / -ctv, else --cache-type, else MINFER_CACHE_TYPE or f16; V follows a given -ctk.
  const std::string base = cache_type.empty() ? default_cache_type() : cache_type;
  const std::string k = cache_type_k.empty() ? base : cache_type_k;
  const std::string v = !cache_type_v.empty() ? cache_type_v : !cache_type.empty() ? cache_type : k;
  c.kv_type = parse_kv_type(k);
  if (parse_kv_type(v) != c.kv_type)
    fail("K cache type {} and V cache type {} differ: minfer's attention kernels read one KV format, give the "
         "same type to both (-ctk/-ctv, or --cache-type)", k, v);
  (void)parse_flash_attn(flash_attn);
  observe.apply();
  c.graph_dump = observe.graph_dump;
  return c;
}

void ModelArgs::place(EngineConfig& c, int64_t n_layer) const {
  if (!gpu_layers.empty()) {
    const int64_t ngl = parse_gpu_layers(gpu_layers);
    const bool device_given = device_opt != nullptr && device_opt->count() > 0;
    if (ngl == 0) {
      if (device_given && c.device != graph::BackendKind::Cpu)
        fail("-ngl 0 puts the model on the CPU but --device is {}: give one of them", device);
      c.device = graph::BackendKind::Cpu;
    } else if (n_layer >= 0) {
      if (ngl < n_layer)
        fail("-ngl {}: the model has {} layers and minfer places a model whole, never split between CPU and GPU: "
             "give -ngl 0 (CPU) or -ngl {} or more (GPU)", gpu_layers, n_layer, n_layer);
      if (device_given && c.device != graph::BackendKind::Cuda)
        fail("-ngl {} puts the model on the GPU but --device is {}: give one of them", gpu_layers, device);
      c.device = graph::BackendKind::Cuda;
    }
  }
  if (batch > 0) c.n_ubatch = static_cast<int32_t>(std::min<int64_t>(c.n_ubatch > 0 ? c.n_ubatch : default_ubatch(c.device), batch));
}

std::string process_escapes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto hex = [](char ch) -> int {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char e = text[i + 1];
    char byte = 0;
    switch (e) {
      case 'n': byte = '\n'; break;
      case 'r': byte = '\r'; break;
      case 't': byte = '\t'; break;
      case 'a': byte = '\a'; break;
      case 'b': byte = '\b'; break;
      case 'f': byte = '\f'; break;
      case 'v': byte = '\v'; break;
      case '\\': byte = '\\'; break;
      case '\'': byte = '\''; break;
      case '"': byte = '"'; break;
      case 'x':
        if (i + 3 < text.size() && hex(text[i + 2]) >= 0 && hex(text[i + 3]) >= 0) {
          out += static_cast<char>(hex(text[i + 2]) * 16 + hex(text[i + 3]));
          i += 3;
          continue;
        }
        out += text[i];
        continue;
      default:
        out += text[i];  // not an escape: the backslash stays
        continue;
    }
    out += byte;
    ++i;
  }
  return out;
}

void report_seed(const SamplerParams& p) {
  if (p.temp <= 0.0f) return;
  std::fprintf(stderr, "minfer: sampling seed %llu (--seed %llu repeats this run)\n",
               static_cast<unsigned long long>(p.seed), static_cast<unsigned long long>(p.seed));
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
  // The option values are checked (and the thread count resolved, once) before the model loads;
  // -ngl's placement needs the layer count.
  EngineConfig cfg = args.checked_config();
  {
    EngineConfig early = cfg;
    args.place(early, -1);
  }
  lm.model = Model::load(args.model);
  const Model& m = *lm.model;
  args.place(cfg, m.hparams().n_layer);
  apply_flash_attn(parse_flash_attn(args.flash_attn));
  if (!m.has_tokenizer()) fail("{}: the file has no tokenizer (tokenizer.ggml.* metadata)", args.model);
  // The tokenizer is being built on its own thread (Model::load): the weights are packed or
  // uploaded meanwhile, and a bad vocabulary is reported once that is done, before anything is
  // logged or run.
  lm.engine = std::make_unique<Engine>(lm.model, cfg);
  (void)m.tokenizer();
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
  const std::string kind = ascii_lower(type);  // choices are case-insensitive, as everywhere
  if (!kind.empty() && kind != "none" && kind != "draft" && kind != "ngram-simple")
    fail("--spec-type '{}' is not known (use none, draft or ngram-simple)", printable(type));
  if (kind == "none" && (!lookup.empty() || !draft_model.empty()))
    fail("--spec-type none turns speculation off, which contradicts {}",
         !lookup.empty() ? fmt::format("--lookup {}", p.lookup_n) : "-md/--model-draft");
  if (kind == "ngram-simple" && p.lookup_n == 0) p.lookup_n = 3;
  if (kind == "draft" && draft_model.empty()) fail("--spec-type draft needs a draft model (-md FILE)");
  if (!draft_model.empty() && p.lookup_n > 0)
    fail("-md/--model-draft and prompt lookup (--lookup, --spec-type ngram-simple) exclude each other");
  if (!device.empty()) parse_device(device);
  if (!draft_model.empty()) {
    // Before any model loads, so that a wrong path is the only line printed. Non-blocking: a FIFO
    // must be refused, not waited on.
    const int fd = ::open(draft_model.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open the draft model (-md): {}", printable(draft_model), std::strerror(errno));
    struct stat st {};
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    ::close(fd);
    if (!regular) fail("{}: the draft model (-md) is not a regular file", printable(draft_model));
  }
  validate(p);
  *enabled = !draft_model.empty() || p.lookup_n > 0;
  return p;
}

LoadedModel load_draft(const SpeculativeArgs& args, const ModelArgs& target_args, const LoadedModel& target) {
  ModelArgs d = target_args;
  d.model = args.draft_model;
  if (!args.device.empty()) d.device = args.device;
  d.ctx = target.engine->n_ctx();
  d.ubatch = 0;
  LoadedModel draft = load_model(d);
  check_vocab_compatible(*target.model->tokenizer(), *draft.model->tokenizer(), target_args.model, d.model);
  return draft;
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
  s.draft = load_draft(args, target_args, target);
  const double ratio = static_cast<double>(s.draft.model->weight_bytes()) /
                       static_cast<double>(std::max<uint64_t>(target.model->weight_bytes(), 1));
  s.speculator = std::make_unique<Speculator>(*s.draft.engine, s.draft.model->tokenizer()->n_vocab(), p, sampling,
                                              ratio);
  return s;
}

}  // namespace minfer::cli
