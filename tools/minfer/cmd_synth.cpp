// `minfer synth --arch A --preset P --type T --seed N --vocab FILE -o OUT`: write a model with a
// public model's exact shape and metadata and seeded random weights (src/convert/synth.h).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "commands.h"
#include "convert/synth.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "options.h"

namespace minfer::cli {
namespace {

struct SynthArgs {
  std::string arch;
  std::string preset;
  std::string type;
  std::string vocab;
  std::string output;
  std::string seed = "0";  ///< as given: parse_seed_option (CLI11 would wrap "-5" to 2^64 - 5)
  int threads = 0;
  bool pure = false;
  bool ascii_output = false;
  std::string layers = "0";         ///< as given: parse_int_option
  std::string distinct_rows = "0";  ///< as given: parse_int_option
};

std::string preset_list() {
  std::string s;
  for (const convert::SynthPreset& p : convert::synth_presets())
    s += fmt::format("{}{} {}", s.empty() ? "" : ", ", p.arch, p.name);
  return s;
}

void run(const SynthArgs& a) {
  convert::SynthOptions opt;
  opt.arch = a.arch;
  opt.preset = a.preset;
  opt.ftype = parse_file_type(a.type);
  opt.seed = *parse_seed_option(a.seed, /*allow_random=*/false);
  (void)convert::find_synth_preset(a.arch, a.preset);  // fail fast on a bad name
  opt.vocab = a.vocab;
  opt.output = a.output;
  opt.n_threads = resolve_thread_count(a.threads, "-t");
  opt.pure = a.pure;
  opt.ascii_output = a.ascii_output;
  opt.n_layer = parse_int_option(a.layers, "--layers", "1..1024, or 0 for the preset's");
  opt.distinct_rows =
      parse_int_option(a.distinct_rows, "--distinct-rows", "1..2147483648, or 0 for every row distinct");
  const auto t0 = std::chrono::steady_clock::now();
  const convert::SynthReport r = convert::synth_model(opt);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string rows =
      opt.distinct_rows > 0 ? fmt::format(", {} distinct rows per matrix", opt.distinct_rows) : std::string();
  if (opt.ascii_output) rows += ", ASCII output";
  log_info("wrote {} ({} {}, {} layers, {}): {} parameters, {:.2f} MiB of tensors, vocab {} tokens padded to "
           "{}, seed {}{}, in {:.1f} s",
           a.output, r.preset->arch, r.preset->name, r.n_layer, file_type_name(opt.ftype), r.n_params,
           static_cast<double>(r.bytes) / 1048576.0, r.vocab_tokens, r.preset->n_vocab, opt.seed, rows, s);
}

}  // namespace

void add_synth_command(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  auto* cmd = app.add_subcommand(
      "synth", "Write a model with a public model's shape and seeded random weights");
  cmd->add_option("--arch", args->arch, "qwen2, qwen3 or llama")->required();
  cmd->add_option("--preset", args->preset, "shape: " + preset_list())->required();
  cmd->add_option("--type", args->type, "weight type: " + file_type_names())->required();
  cmd->add_option("--vocab", args->vocab, "tokenizer source: a GGUF with tokenizer.* keys or a tokenizer.json")
      ->required();
  cmd->add_option("-o,--output", args->output, "GGUF file to write")->required();
  cmd->add_option("--seed", args->seed, "random seed, a whole number from 0 to 2^64-1")->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "threads (default: all cores)");
  cmd->add_flag("--pure", args->pure, "no per-tensor mix rules: every matrix gets the base type");
  cmd->add_option("--layers", args->layers,
                  "write this many layers instead of the preset's (1..1024; a shallower model with the "
                  "real layer shapes, for profiling)")
      ->type_name("INT");
  cmd->add_option("--distinct-rows", args->distinct_rows,
                  "generate and quantize only this many rows per matrix (1..2^31; 0: all) and repeat them in a "
                  "seeded order (same shapes and bytes per row, written in seconds: for speed benchmarks)")
      ->type_name("INT");
  cmd->add_flag("--ascii-output", args->ascii_output,
                "zero the output rows of tokens that are not plain ASCII text, so greedy decoding writes "
                "printable ASCII (for serving benchmarks: servers end streams of malformed UTF-8)");
  cmd->callback([args] { run(*args); });
}

}  // namespace minfer::cli
