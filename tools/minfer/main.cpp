// minfer: run GGUF language models on the CPU and NVIDIA GPUs.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "commands.h"
#include "llama_args.h"
#include "core/env.h"
#include "core/error.h"
#include "core/printable.h"
#include "graph/op_timing.h"

namespace {

// CLI11 reports a command it does not know as "A subcommand is required". When the first
// argument that is not an option (the app itself has only flags, so that is the command) names
// no registered command, returns the error line that names it and lists the commands.
// An option before the command other than the app's own (--help, --version), '--' included,
// likewise gets a line that names it rather than CLI11's "A subcommand is required".
/// The first argument that is not an option: the command (the app itself has only flags).
std::span<const std::string>::iterator find_command(std::span<const std::string> args) {
  return std::find_if(args.begin(), args.end(), [](const std::string& a) { return a.empty() || a[0] != '-'; });
}

std::optional<std::string> unknown_command_error(const CLI::App& app, std::span<const std::string> args) {
  const std::vector<const CLI::App*> subs = app.get_subcommands([](const CLI::App*) { return true; });
  std::string names;
  for (const CLI::App* s : subs) names += (names.empty() ? "" : ", ") + s->get_name();
  const auto command = find_command(args);
  for (auto a = args.begin(); a != command; ++a)
    if (*a != "-h" && *a != "--help" && *a != "--version")
      return "unknown option '" + minfer::printable(*a) + "' before the command (usage: minfer COMMAND [OPTIONS]; commands: " +
             names + ")";
  if (command == args.end()) return std::nullopt;
  if (std::any_of(subs.begin(), subs.end(), [&](const CLI::App* s) { return s->check_name(*command); }))
    return std::nullopt;
  return "unknown command '" + minfer::printable(*command) + "' (commands: " + names + ")";
}

/// CLI11's words for arguments that no option or command took ("The following argument was not
/// expected: --bogus"), with them in command-line order.
std::string extras_error(const std::vector<std::string>& extras) {
  std::string s = extras.size() > 1 ? "The following arguments were not expected:" : "The following argument was not expected:";
  for (const std::string& a : extras) s += " " + a;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"minfer: run GGUF language models (Qwen2/Qwen2.5/Qwen3, Llama 2/3.x, Mistral) on CPUs and NVIDIA GPUs", "minfer"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "minfer 0.1.0");
  minfer::cli::add_env_command(app);
  minfer::cli::add_inspect_command(app);
  minfer::cli::add_run_command(app);
  minfer::cli::add_bench_command(app);
  minfer::cli::add_perplexity_command(app);
  minfer::cli::add_chat_command(app);
  minfer::cli::add_tokenize_command(app);
  minfer::cli::add_quantize_command(app);
  minfer::cli::add_synth_command(app);
  minfer::cli::add_serve_command(app);
  // llama.cpp's tools take multi-letter single-dash options (-ngl, -ctk, -sys ...), which CLI11
  // would split into a short option and a value: map the known ones to their long names, refuse
  // the rest (llama_args.h).
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    minfer::cli::rewrite_llama_args(app, args);
  } catch (const minfer::Error& e) {
    std::fprintf(stderr, "minfer: error: %s\n", minfer::printable(e.what()).c_str());
    return 1;
  }
  const std::span<const std::string> given(args.begin(), args.end());
  if (const std::optional<std::string> e = unknown_command_error(app, given)) {
    std::fprintf(stderr, "minfer: error: %s\n", e->c_str());
    return 1;
  }
  const auto command = find_command(given);
  const std::string command_name = command != given.end() ? *command : std::string();
  // Every MINFER_* variable that is set is parsed once the command line is (CLI11 runs this after
  // help, version, required options and extras, before the command's own callback), so a malformed
  // one is refused before any work; not for `minfer env` (it lists them as set), and help and
  // version output never get here (an argument "-h" that is an option's value does).
  app.parse_complete_callback([&command_name] {
    if (command_name != "env") minfer::env_check();
  });
  std::reverse(args.begin(), args.end());  // CLI11 wants the arguments in reverse order
  // Op timing (--profile, MINFER_OP_TIMING=1): the table goes to stderr when the command ends,
  // also when it ends with an error; then the --trace-out file is written (a failure to write it
  // is an error of the command: exit 1).
  const auto finish = [](int rc) {
    std::fflush(stdout);  // the command's own output first (perplexity's estimate, bench's table)
    try {
      if (minfer::graph::op_timing_enabled()) {
        const std::string t = minfer::graph::op_timing_table();
        if (!t.empty()) std::fputs(t.c_str(), stderr);
      }
    } catch (...) {  // a malformed MINFER_OP_TIMING was reported as the command's error
    }
    try {
      minfer::graph::write_trace_out();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "minfer: error: %s\n", minfer::printable(e.what()).c_str());
      return rc == 0 ? 1 : rc;
    }
    return rc;
  };
  const auto run_command = [&]() -> int {
    try {
      app.parse(args);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);  // --help: the usage text, exit 0
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() == 0) return app.exit(e);  // --version and the like
      // A usage error is one line like every other error, exit status 1.
      // An argument that nothing took is named first: CLI11 checks required options and converts
      // values before it looks at those, so `minfer bench --bogus` would say "--model is required".
      const std::vector<std::string> extras = app.remaining(/*recurse=*/true);
      const std::string what = extras.empty() ? std::string(e.what()) : extras_error(extras);
      // The hint names the command's own help when a command was given (an unknown one was refused
      // above).
      const std::string help = command_name.empty() ? "minfer --help" : "minfer " + command_name + " --help";
      std::fprintf(stderr, "minfer: error: %s (see '%s')\n", minfer::printable(what).c_str(), help.c_str());
      return 1;
    } catch (const minfer::Error& e) {
      // Messages quote file data (names, metadata, token texts): escaped so that the error stays
      // one line and cannot drive the terminal.
      std::fprintf(stderr, "minfer: error: %s\n", minfer::printable(e.what()).c_str());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "minfer: error: %s\n", minfer::printable(e.what()).c_str());
      return 1;
    }
    return 0;
  };
  return finish(run_command());
}
