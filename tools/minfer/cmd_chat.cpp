// `minfer chat`: interactive multi-turn chat. Each turn re-renders the conversation with the
// chat template, and the Session reuses the KV cache for the part that is already there, so only
// the new turn is processed. Works with piped stdin (one user message per line).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <utility>

#include "commands.h"
#include "core/error.h"
#include "engine/generate.h"
#include "options.h"
#include "chat/chat.h"

namespace minfer::cli {
namespace {

struct ChatArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string system;
  std::string chat_template;
  int32_t n_predict = 1024;
  bool think = false;
  bool no_think = false;
};

void chat(const ChatArgs& a) {
  // Option values are checked before the (possibly multi-gigabyte) model is loaded.
  const SamplerParams sampling = a.sampling.params();
  chat::ChatOptions copt = chat_options(a.think, a.no_think);
  std::optional<chat::ChatTemplate> template_override = chat_template_override(a.chat_template);
  LoadedModel lm = load_model(a.model);
  const tok::Tokenizer& tk = *lm.model->tokenizer();
  copt = with_special_texts(copt, tk);
  Sampler sampler(sampling);
  Session session(*lm.engine, tk);
  const int64_t n_ctx = lm.engine->n_ctx();
  const bool interactive = isatty(STDIN_FILENO) == 1;
  const chat::ChatTemplate tmpl =
      chat_template_for(std::move(template_override), tk.chat_template(), a.model.model);
  std::vector<chat::ChatMessage> msgs;
  if (!a.system.empty()) msgs.push_back({"system", a.system});
  if (interactive) std::fprintf(stderr, "minfer chat: type a message, /reset to start over, /exit to quit\n");
  std::string line;
  for (;;) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      msgs.resize(a.system.empty() ? 0 : 1);
      session.reset();
      std::fputs("(conversation reset)\n", stdout);
      continue;
    }
    if (line.empty()) continue;
    msgs.push_back({"user", line});
    const std::string text = tmpl.render(msgs, copt);
    const std::vector<int32_t> ids = tokenize_chat_prompt(tk, text);
    if (static_cast<int64_t>(ids.size()) >= n_ctx) {  // reject this message, keep the session
      msgs.pop_back();
      // Would it fit without the earlier turns? Then /reset helps; otherwise only a larger -c.
      std::vector<chat::ChatMessage> alone(msgs.begin(), msgs.begin() + (a.system.empty() ? 0 : 1));
      const bool has_history = msgs.size() > alone.size();
      alone.push_back({"user", line});
      const size_t n_alone = has_history ? tokenize_chat_prompt(tk, tmpl.render(alone, copt)).size() : ids.size();
      if (static_cast<int64_t>(n_alone) < n_ctx)
        std::fprintf(stderr,
                     "minfer: message not sent: the conversation with it is %zu tokens, which does not fit "
                     "the context size %lld; send /reset to start over (or raise -c)\n",
                     ids.size(), static_cast<long long>(n_ctx));
      else
        std::fprintf(stderr,
                     "minfer: message not sent: it is %zu tokens with the chat template, which does not fit "
                     "the context size %lld (raise it with -c)\n",
                     n_alone, static_cast<long long>(n_ctx));
      continue;
    }
    GenerateOptions opt;
    opt.max_tokens = a.n_predict;
    GenerateStats st;
    const std::string reply = session.generate(ids, sampler, opt, [](const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    }, &st);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    msgs.push_back({"assistant", reply});
    std::fprintf(stderr,
                 "minfer: prompt %d new token%s (%d reused), %.1f t/s | generated %d token%s, %.1f t/s | stop: %s\n",
                 st.prompt_tokens, st.prompt_tokens == 1 ? "" : "s", st.reused_tokens, st.prefill_tps(),
                 st.generated_tokens, st.generated_tokens == 1 ? "" : "s", st.decode_tps(),
                 st.stop_reason.c_str());
  }
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto args = std::make_shared<ChatArgs>();
  auto* cmd = app.add_subcommand("chat", "Interactive multi-turn chat (also reads piped stdin, one message per line)");
  args->model.add(cmd);
  args->sampling.add(cmd);
  cmd->add_option("--system", args->system, "system prompt");
  cmd->add_option("--chat-template", args->chat_template, "override the chat template: 'chatml' (built-in) or a Jinja template file");
  cmd->add_option("-n,--n-predict", args->n_predict, "most tokens per reply")->capture_default_str();
  cmd->add_flag("--think", args->think, "Qwen3: enable_thinking=true (the template's default when neither flag is given)");
  cmd->add_flag("--no-think", args->no_think, "Qwen3: enable_thinking=false (an empty think block)");
  cmd->callback([args] { chat(*args); });
}

}  // namespace minfer::cli
