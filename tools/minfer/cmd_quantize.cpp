// `minfer quantize IN OUT --type T [--threads N] [--pure]` (or llama-quantize's positional form
// `minfer quantize IN OUT T [N]`): rewrite a GGUF model with its weight
// matrices in another type (llama-quantize's per-tensor policy; src/convert/quantize_model.h).
#include <chrono>
#include <memory>
#include <string>

#include "commands.h"
#include "convert/quantize_model.h"
#include "core/log.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "options.h"

namespace minfer::cli {
namespace {

struct QuantizeArgs {
  std::string input;
  std::string output;
  std::string type;
  std::string type_positional;     ///< llama-quantize's IN OUT TYPE [THREADS]
  std::string threads_positional;
  int threads = 0;
  bool pure = false;
};

void run(const QuantizeArgs& a) {
  convert::QuantizeOptions opt;
  opt.input = a.input;
  opt.output = a.output;
  if (!a.type.empty() && !a.type_positional.empty())
    fail("quantize: the type is given twice ('{}' and --type {}): give it once", a.type_positional, a.type);
  const std::string type = a.type.empty() ? a.type_positional : a.type;
  if (type.empty()) fail("quantize: give the target type: minfer quantize IN OUT TYPE, or --type TYPE ({})", file_type_names());
  opt.ftype = parse_file_type(type);  // before opening anything: a bad type fails at once
  int threads = a.threads;
  if (!a.threads_positional.empty()) {
    const int64_t n = parse_int_option(a.threads_positional, "quantize THREADS", "1 or more");
    if (n < 1 || n > 65536) fail("quantize: threads {} must be from 1 to 65536", a.threads_positional);
    if (threads != 0 && threads != n) fail("quantize: threads given twice ({} and -t {})", a.threads_positional, threads);
    threads = static_cast<int>(n);
  }
  opt.n_threads = resolve_thread_count(threads, "-t");
  opt.pure = a.pure;
  const auto t0 = std::chrono::steady_clock::now();
  const convert::QuantizeReport r = convert::quantize_model(opt);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_info("wrote {} ({}): {} tensors ({} converted, {} copied, {} fallback), {:.2f} MiB -> "
           "{:.2f} MiB in {:.1f} s",
           a.output, file_type_name(opt.ftype), r.n_tensors, r.n_converted, r.n_copied,
           r.n_fallback, static_cast<double>(r.bytes_in) / 1048576.0,
           static_cast<double>(r.bytes_out) / 1048576.0, s);
}

}  // namespace

void add_quantize_command(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  auto* cmd = app.add_subcommand("quantize", "Rewrite a GGUF model with its weights in another type");
  cmd->add_option("input", args->input, "GGUF model to read")->required();
  cmd->add_option("output", args->output, "GGUF file to write")->required();
  cmd->add_option("type", args->type_positional, "target type, as llama-quantize takes it (or --type)");
  cmd->add_option("threads", args->threads_positional, "threads, as llama-quantize takes them (or -t)");
  cmd->add_option("--type", args->type, "target: " + file_type_names() + " (any case)");
  cmd->add_option("-t,--threads", args->threads, "threads (default: all cores)");
  cmd->add_flag("--pure", args->pure, "no per-tensor mix rules: every matrix gets the base type");
  cmd->callback([args] { run(*args); });
}

}  // namespace minfer::cli
