// The `minfer` subcommands. Each cmd_<name>.cpp defines add_<name>_command, which adds its
// subcommand (options + callback) to the app; main.cpp calls them all. A callback reports
// failure by throwing minfer::Error: main prints it as one line and exits 1.
#pragma once

#include <CLI/CLI.hpp>

namespace minfer::cli {

/// llama.cpp-style single-dash multi-letter options and the long option each one means
/// (llama.cpp's common/arg.cpp and llama-bench spellings; rewrite_llama_args applies them).
inline constexpr std::pair<const char*, const char*> kLlamaStyleOptions[] = {
    {"-ub", "--ubatch-size"}, {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"},
    {"-pg", "--pg"},          {"-ngl", "--n-gpu-layers"}, {"-fa", "--flash-attn"},
    {"-np", "--parallel"},
    {"-cnv", "--conversation"}, {"-no-cnv", "--no-conversation"}, {"-st", "--single-turn"},
    {"-sys", "--system-prompt"}, {"-co", "--color"}, {"-mmp", "--mmap"}, {"-dev", "--device"},
    {"-md", "--model-draft"}, {"-npl", "--n-parallel"},
};

void add_env_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_quantize_command(CLI::App& app);
void add_synth_command(CLI::App& app);
void add_serve_command(CLI::App& app);

}  // namespace minfer::cli
