// llama.cpp's command-line spellings on minfer's command line. llama.cpp's tools take
// multi-letter single-dash options (-ngl, -ctk, -cnv, -sys ...), which CLI11 reads as a short
// option plus a value ("-sys" would be "-s ys", "-hf" would be "-h"). A pre-pass over argv maps
// the known ones to minfer's long names and refuses the rest with one line, before CLI11 sees them.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace minfer::cli {

/// Rewrites `args` (argv without the program name; args[0] is normally the command) in place:
/// - a known llama.cpp multi-letter single-dash option becomes its minfer long name
///   ("-ngl" -> "--n-gpu-layers");
/// - `-fa` / `--flash-attn` followed by nothing or by an option (llama.cpp's older flag form) gets "on";
/// - a llama.cpp option minfer does not offer (-hf, -mu, --mlock, --no-mmap, -sm ...) throws
///   minfer::Error naming it and what minfer offers instead;
/// - any other multi-letter single-dash argument throws minfer::Error naming it, unless it is the
///   value of the option before it (a prompt "-sys"), a negative number, or a one-letter option
///   of the command with a number attached ("-t8").
/// Arguments after "--" are left alone. `app` is the full app (its subcommands say which options
/// take values).
void rewrite_llama_args(const CLI::App& app, std::vector<std::string>& args);

}  // namespace minfer::cli
