// `minfer run`: generate text from a prompt, streamed as it is produced, then one summary line.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <optional>
#include <utility>

#include "commands.h"
#include "core/error.h"
#include "core/read_file.h"
#include "engine/generate.h"
#include "options.h"
#include "chat/chat.h"

namespace minfer::cli {
namespace {

struct RunArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string prompt;
  std::string file;
  std::string system;
  int32_t n_predict = 256;
  bool chat = false;
  bool no_display_prompt = false;
  std::vector<std::string> stop;
  std::string chat_template;
  bool think = false;
  bool no_think = false;
};

void run(const RunArgs& a) {
  // Option values are checked before the (possibly multi-gigabyte) model is loaded.
  const SamplerParams sampling = a.sampling.params();
  std::optional<chat::ChatTemplate> template_override;
  chat::ChatOptions copt;
  if (a.chat) {
    copt = chat_options(a.think, a.no_think);
    template_override = chat_template_override(a.chat_template);
  }
  std::string prompt = a.prompt;
  if (!a.file.empty()) prompt = read_file_bytes(a.file, "prompt file");
  // The model (and its device, thread and cache options) loads before a '-' prompt is read, so
  // none of their errors waits for the end of stdin.
  LoadedModel lm = load_model(a.model);
  if (a.file.empty() && prompt == "-") prompt.assign(std::istreambuf_iterator<char>(std::cin), {});
  const tok::Tokenizer& tk = *lm.model->tokenizer();
  std::string text = prompt;
  if (a.chat) {
    std::vector<chat::ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", prompt});
    const chat::ChatTemplate tmpl =
        chat_template_for(std::move(template_override), tk.chat_template(), a.model.model);
    text = tmpl.render(msgs, with_special_texts(copt, tk));
  }
  const std::vector<int32_t> ids =
      a.chat ? tokenize_chat_prompt(tk, text) : tk.encode(text, /*add_special=*/true, /*parse_special=*/true);
  if (ids.empty()) fail("the prompt is empty");
  Sampler sampler(sampling);
  Session session(*lm.engine, tk);
  GenerateOptions opt;
  opt.max_tokens = a.n_predict;
  opt.stop = a.stop;
  if (!a.no_display_prompt && !a.chat) {
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    std::fflush(stdout);
  }
  GenerateStats st;
  session.generate(ids, sampler, opt, [](const std::string& piece) {
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  }, &st);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  std::fprintf(stderr,
               "minfer: prompt %d token%s, %.1f t/s | generated %d token%s, %.1f t/s | stop: %s\n",
               st.prompt_tokens, st.prompt_tokens == 1 ? "" : "s", st.prefill_tps(), st.generated_tokens,
               st.generated_tokens == 1 ? "" : "s", st.decode_tps(),
               st.stop_reason.c_str());
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  args->model.add(cmd);
  args->sampling.add(cmd);
  cmd->add_option("-p,--prompt", args->prompt, "prompt text ('-' reads stdin)");
  cmd->add_option("-f,--file", args->file, "read the prompt from a file");
  cmd->add_option("-n,--n-predict", args->n_predict, "tokens to generate (-1: until the context is full)")->capture_default_str();
  auto* chat = cmd->add_flag("--chat", args->chat, "format the prompt with the model's chat template (one user turn)");
  // These only shape the chat template's input: without --chat they would be ignored, so they
  // are usage errors ("--think requires --chat"); --help shows "Needs: --chat" beside each.
  cmd->add_option("--system", args->system, "system prompt")->needs(chat);
  cmd->add_option("--chat-template", args->chat_template, "override the chat template: 'chatml' (built-in) or a Jinja template file")->needs(chat);
  cmd->add_flag("--think", args->think, "Qwen3: enable_thinking=true (the template's default when neither flag is given)")->needs(chat);
  cmd->add_flag("--no-think", args->no_think, "Qwen3: enable_thinking=false (an empty think block)")->needs(chat);
  cmd->add_option("--stop", args->stop, "stop string (repeatable)");
  cmd->add_flag("--no-display-prompt", args->no_display_prompt, "do not echo the prompt");
  cmd->callback([args] {
    if (args->prompt.empty() && args->file.empty()) fail("give a prompt with -p TEXT or -f FILE");
    run(*args);
  });
}

}  // namespace minfer::cli
