// `minfer chat`: interactive multi-turn chat. Each turn re-renders the conversation with the
// chat template, and the Session reuses the KV cache for the part that is already there, so only
// the new turn is processed. Works with piped stdin (one user message per line).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <utility>

#include "commands.h"
#include "core/error.h"
#include "core/read_file.h"
#include "core/printable.h"
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
  ContextArgs context;
  std::string session_file;
  SpeculativeArgs spec;
};

/// The text `tmpl` puts after an assistant reply (as generated: without its end-of-turn token)
/// up to the next reply: the end of that turn, the user message `user` and the generation
/// prompt, with the ranges that came from the caller marked (so `user` stays plain text when
/// tokenized). nullopt when the template does not render a conversation as a growing text.
std::optional<chat::RenderedChat> next_turn_text(const chat::ChatTemplate& tmpl, const chat::ChatOptions& copt,
                                                 const std::string& system, const std::string& user) {
  static const std::string kReply = "minfer-reply-marker";
  std::vector<chat::ChatMessage> h;
  if (!system.empty()) h.push_back({"system", system});
  h.push_back({"user", "minfer-user-marker"});
  h.push_back({"assistant", kReply});
  chat::ChatOptions closed = copt;
  closed.add_generation_prompt = false;
  const std::string base = tmpl.render(h, closed);
  h.push_back({"user", user});
  const chat::RenderedChat full = tmpl.render_marked(h, copt);
  const size_t at = base.rfind(kReply);
  if (at == std::string::npos || full.text.compare(0, base.size(), base) != 0) return std::nullopt;
  // The turn is full.text from `from` on; the caller's ranges after it move with it.
  const size_t from = at + kReply.size();
  chat::RenderedChat turn;
  turn.text = full.text.substr(from);
  for (const tok::Tokenizer::Range& r : full.data) {
    if (r.end <= from) continue;
    turn.data.push_back({std::max(r.begin, from) - from, r.end - from});
  }
  return turn;
}

void chat(const ChatArgs& a) {
  // Option values are checked before the (possibly multi-gigabyte) model is loaded.
  const SamplerParams sampling = a.sampling.params();
  bool speculate = false;
  a.spec.params(&speculate);  // bad speculative options are reported before any model loads
  chat::ChatOptions copt = chat_options(a.think, a.no_think);
  std::optional<chat::ChatTemplate> template_override = chat_template_override(a.chat_template);
  LoadedModel lm = load_model(a.model);
  const SpeculativeSetup spec = make_speculator(a.spec, a.model, lm, sampling);
  const tok::Tokenizer& tk = *lm.model->tokenizer();
  Sampler sampler(sampling);
  Session session(*lm.engine, tk);
  const int64_t n_ctx = lm.engine->n_ctx();
  const bool interactive = isatty(STDIN_FILENO) == 1;
  const chat::ChatTemplate tmpl =
      chat_template_for(std::move(template_override), tk.chat_template(), a.model.model);
  std::vector<chat::ChatMessage> msgs;
  if (!a.system.empty()) msgs.push_back({"system", a.system});
  const int32_t keep =
      a.context.keep_for(lm.engine->n_ctx(), a.context.keep < 0 ? preamble_tokens(tk, tmpl, copt, a.system) : 0);
  if (a.context.shift) session.set_context_shift(keep);
  // Append mode: the cache is the conversation (restored from a file, or shifted), so a new turn
  // is appended to it as tokens instead of re-rendering every message.
  bool append = false;
  bool said_shift = false;
  const auto say_shift = [&] {
    if (said_shift || session.shifts() == 0) return;
    said_shift = true;
    append = true;
    std::fprintf(stderr,
                 "minfer: the context is full: keeping the first %d tokens and dropping the oldest half of the rest "
                 "(context shift; --no-context-shift refuses instead)\n", keep);
  };
  const auto load = [&](const std::string& path) {
    session.load(path);
    msgs.resize(a.system.empty() ? 0 : 1);
    append = !session.tokens().empty();
  };
  if (!a.session_file.empty() && std::filesystem::exists(a.session_file)) load(a.session_file);
  if (interactive)
    std::fprintf(stderr, "minfer chat: type a message, /reset to start over, /save FILE, /load FILE, /exit to quit\n");
  std::string line;
  LineReader input(stdin, "stdin", kChatLineLimitBytes);
  for (;;) {
    if (interactive) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
    }
    if (!input.next(line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      msgs.resize(a.system.empty() ? 0 : 1);
      session.reset();
      append = false;
      std::fputs("(conversation reset)\n", stdout);
      continue;
    }
    if (line.rfind("/save ", 0) == 0 || line.rfind("/load ", 0) == 0) {
      const std::string path = line.substr(6);
      try {
        if (line[1] == 's') session.save(path);
        else load(path);
        std::fprintf(stdout, "(%s %s: %zu tokens)\n", line[1] == 's' ? "saved to" : "loaded", path.c_str(),
                     session.tokens().size());
      } catch (const Error& e) {
        std::fprintf(stderr, "minfer: %s\n", printable(e.what()).c_str());
      }
      std::fflush(stdout);
      continue;
    }
    if (line.empty()) continue;
    msgs.push_back({"user", line});
    std::vector<int32_t> ids;
    if (!append) {
      ids = tmpl.tokenize(tk, msgs, copt);  // message text never becomes control tokens
      // Too long with the history: with context shift, go on from the cache instead.
      append = static_cast<int64_t>(ids.size()) >= n_ctx && session.context_shift() && !session.tokens().empty();
    }
    if (append) {
      const std::optional<chat::RenderedChat> turn = next_turn_text(tmpl, copt, a.system, line);
      if (!turn) {
        msgs.pop_back();
        std::fprintf(stderr, "minfer: message not sent: the chat template does not extend a conversation "
                             "turn by turn, so the context cannot be shifted; send /reset to start over\n");
        continue;
      }
      const std::vector<int32_t> add = chat::tokenize_chat(tk, *turn, /*add_special=*/false);
      // Room for the new turn and one generated token, by shifting as often as needed (not at
      // all when even the kept tokens and the turn would not fit: the message is refused below).
      const bool can_fit = static_cast<int64_t>(std::min<size_t>(static_cast<size_t>(keep), session.tokens().size()) +
                                                add.size()) + 1 < n_ctx;
      while (can_fit && static_cast<int64_t>(session.tokens().size() + add.size()) + 1 >= n_ctx &&
             session.context_shift() && session.shift_context()) {
      }
      say_shift();
      ids = session.tokens();
      ids.insert(ids.end(), add.begin(), add.end());
    }
    if (static_cast<int64_t>(ids.size()) >= n_ctx) {  // reject this message, keep the session
      msgs.pop_back();
      // Would it fit without the earlier turns? Then /reset helps; otherwise only a larger -c.
      std::vector<chat::ChatMessage> alone(msgs.begin(), msgs.begin() + (a.system.empty() ? 0 : 1));
      const bool has_history = msgs.size() > alone.size();
      alone.push_back({"user", line});
      const size_t n_alone = has_history ? tmpl.tokenize(tk, alone, copt).size() : ids.size();
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
    opt.speculator = spec.speculator.get();
    GenerateStats st;
    const std::string reply = session.generate(ids, sampler, opt, [](const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      return true;
    }, &st);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    msgs.push_back({"assistant", reply});
    say_shift();
    if (!a.session_file.empty()) session.save(a.session_file);
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
  args->context.add(cmd);
  cmd->add_option("--session", args->session_file,
                  "KV session file: restore the conversation from it (when it exists) and save it after each turn");
  args->spec.add(cmd);
  cmd->callback([args] { chat(*args); });
}

}  // namespace minfer::cli
