// minfer: run GGUF language models on the CPU and NVIDIA GPUs.
#include <cstdio>
#include <exception>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"minfer: run GGUF language models (Qwen2/Qwen2.5/Qwen3) on CPUs and NVIDIA GPUs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "minfer 0.1.0");
  minfer::cli::add_env_command(app);
  minfer::cli::add_inspect_command(app);
  minfer::cli::add_run_command(app);
  minfer::cli::add_chat_command(app);
  minfer::cli::add_quantize_command(app);
  minfer::cli::add_synth_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const minfer::Error& e) {
    std::fprintf(stderr, "minfer: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "minfer: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
