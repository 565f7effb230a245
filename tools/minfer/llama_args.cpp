#include "llama_args.h"

#include <algorithm>
#include <cctype>
#include <string_view>

#include "commands.h"
#include "core/ascii.h"
#include "core/error.h"
#include "core/printable.h"

namespace minfer::cli {
namespace {

/// llama.cpp options minfer does not offer, and what to use instead (one line each).
struct Refusal {
  std::string_view name, why;
};
constexpr std::string_view kNoDownload = "minfer does not download models: fetch the GGUF file yourself and give it with -m FILE";
constexpr std::string_view kOneDevice = "minfer places the whole model on one device: use --device cpu or --device cuda (or -ngl)";
constexpr Refusal kRefusals[] = {
    {"-hf", kNoDownload},           {"-hfr", kNoDownload},        {"--hf-repo", kNoDownload},
    {"-hff", kNoDownload},          {"--hf-file", kNoDownload},   {"-hft", kNoDownload},
    {"--hf-token", kNoDownload},    {"-mu", kNoDownload},         {"--model-url", kNoDownload},
    {"-hfd", kNoDownload},          {"-hfrd", kNoDownload},       {"--hf-repo-draft", kNoDownload},
    {"--mlock", "minfer maps the model file read-only and does not lock it in memory"},
    {"--no-mmap", "minfer always maps the model file (on CUDA the weights are then copied to the GPU)"},
    {"-nkvo", "the KV cache always lives on the model's device (--device)"},
    {"--no-kv-offload", "the KV cache always lives on the model's device (--device)"},
    {"-sm", kOneDevice},            {"--split-mode", kOneDevice}, {"-ts", kOneDevice},
    {"--tensor-split", kOneDevice}, {"-mg", kOneDevice},          {"--main-gpu", kOneDevice},
    {"-ot", kOneDevice},            {"--override-tensor", kOneDevice},
    {"-cmoe", kOneDevice},          {"--cpu-moe", kOneDevice},    {"-ncmoe", kOneDevice},
    {"--n-cpu-moe", kOneDevice},
    {"-tb", "minfer uses the -t threads for the prompt and for generation"},
    {"--threads-batch", "minfer uses the -t threads for the prompt and for generation"},
    {"-oe", "bench writes one format, to stdout (-o md|json|jsonl|csv|sql)"},
    {"--output-err", "bench writes one format, to stdout (-o md|json|jsonl|csv|sql)"},
    {"-if", "use -cnv (chat mode: without -p it waits for your first message)"},
    {"--interactive-first", "use -cnv (chat mode: without -p it waits for your first message)"},
    {"-gan", "group attention (self-extend) is not supported; use --keep and context shift"},
    {"-gaw", "group attention (self-extend) is not supported; use --keep and context shift"},
};

/// -fa's values (llama.cpp: on|off|auto; older versions took -fa alone, and 0/1 in llama-bench).
bool is_fa_value(std::string_view v) {
  const std::string s = ascii_lower(v);
  // A bench list ("0,1") is a value too.
  return s == "on" || s == "off" || s == "auto" || s == "0" || s == "1" || s == "true" || s == "false" ||
         s.find(',') != std::string::npos;
}

/// A number such as "-1", "-0.5": a value, never an option.
bool is_negative_number(std::string_view a) {
  return a.size() >= 2 && a[0] == '-' && (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.');
}

const CLI::App* find_subcommand(const CLI::App& app, const std::string& name) {
  const std::vector<const CLI::App*> subs =
      app.get_subcommands([&](const CLI::App* s) { return s->check_name(name); });
  return subs.empty() ? nullptr : subs.front();
}

/// Does `arg` (an option as given, "--prompt" or "-p") take a value in `cmd`? "--opt=value" has its value.
bool takes_value(const CLI::App* cmd, const std::string& arg) {
  if (cmd == nullptr || arg.size() < 2 || arg[0] != '-' || arg.find('=') != std::string::npos) return false;
  const CLI::Option* o = cmd->get_option_no_throw(arg);
  return o != nullptr && o->get_expected_min() > 0;
}

}  // namespace

void rewrite_llama_args(const CLI::App& app, std::vector<std::string>& args) {
  const auto command = std::find_if(args.begin(), args.end(), [](const std::string& a) { return a.empty() || a[0] != '-'; });
  const std::string command_name = command != args.end() ? *command : std::string();
  const CLI::App* cmd = find_subcommand(app, command_name);
  const std::string help = cmd != nullptr ? "minfer " + command_name + " --help" : "minfer --help";
  for (size_t i = 0; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--") break;
    if (i > 0 && takes_value(cmd, args[i - 1])) continue;  // a value ("-p -sys" is a prompt)
    for (const Refusal& r : kRefusals)
      if (a == r.name) fail("{} is not supported: {}", a, r.why);
    const bool multi_short = a.size() > 2 && a[0] == '-' && a[1] != '-' && !is_negative_number(a);
    bool mapped = false;
    for (const auto& [shrt, lng] : kLlamaStyleOptions)
      if (a == shrt) {
        if (cmd != nullptr && cmd->get_option_no_throw(lng) == nullptr)
          fail("{} ({}) is not an option of minfer {} (see '{}')", a, lng, command_name, help);
        a = lng;
        mapped = true;
        break;
      }
    if (a == "--flash-attn" && (i + 1 == args.size() || (!is_fa_value(args[i + 1]) && args[i + 1].rfind('-', 0) == 0))) {
      args.insert(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, "on");
      ++i;
      continue;
    }
    if (mapped || !multi_short) continue;
    // "-t8": a one-letter option of the command with a number attached is CLI11's (and getopt's) form.
    const std::string letter = a.substr(0, 2);
    const bool attached_number = takes_value(cmd, letter) &&
                                 std::all_of(a.begin() + 2, a.end(), [](char c) {
                                   return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == ',';
                                 });
    if (attached_number) continue;
    fail("unknown option '{}': minfer's single-dash options have one letter (see '{}')", printable(a), help);
  }
}

}  // namespace minfer::cli
