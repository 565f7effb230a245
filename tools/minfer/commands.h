// The `minfer` subcommands. Each cmd_<name>.cpp defines add_<name>_command, which adds its
// subcommand (options + callback) to the app; main.cpp calls them all. A callback reports
// failure by throwing minfer::Error: main prints it as one line and exits 1.
#pragma once

#include <CLI/CLI.hpp>

namespace minfer::cli {

void add_env_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_synth_command(CLI::App& app);

}  // namespace minfer::cli
