// `minfer chat`: interactive multi-turn chat. Each turn re-renders the conversation with the
// chat template, and the Session reuses the KV cache for the part that is already there, so only
// the new turn is processed. Works with piped stdin (one user message per line).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <utility>

#include "chat_mode.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/read_file.h"
#include "line_editor.h"
#include "core/printable.h"
#include "engine/generate.h"
#include "options.h"
#include "chat/chat.h"

namespace minfer::cli {
namespace {

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

constexpr const char* kChatHelp =
    "  /help          this list\n"
    "  /clear, /reset start a new conversation (the system prompt stays)\n"
    "  /save FILE     save the conversation's KV cache; /load FILE restores one\n"
    "  /bye, /exit    quit (also Ctrl-D; Ctrl-C at the prompt)\n"
    "  a line ending in \\ continues on the next line; \"\"\" starts and ends a multi-line message\n"
    "  Ctrl-C during a reply stops the reply and keeps the conversation\n";

volatile std::sig_atomic_t g_generating = 0;   ///< a reply is being generated
volatile std::sig_atomic_t g_interrupted = 0;  ///< Ctrl-C came during the reply

/// SIGINT in an interactive chat: during a reply it ends the reply (the token callback sees the
/// flag); at the prompt it ends the process, with a newline so that the shell prompt starts on a
/// line of its own, and the exit status of a SIGINT (the default action re-raised).
void on_interrupt(int sig) {
  if (g_generating != 0) {
    g_interrupted = 1;
    return;
  }
  const char nl = '\n';
  (void)!::write(STDOUT_FILENO, &nl, 1);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
}

/// The next user message: one line (a trailing '\r' of CRLF input dropped), lines joined while
/// they end in a backslash, or the lines between two lines of `"""`. False at end of input.
bool read_message(ChatInput& input, std::string& message, bool color) {
  const auto next = [&](std::string& line, const char* prompt) {
    if (!input.next(line, prompt, color)) return false;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  };
  std::string line;
  if (!next(line, "> ")) return false;
  if (line == "\"\"\"") {
    message.clear();
    bool first = true;
    for (;;) {
      if (!next(line, ". ") || line == "\"\"\"") return true;  // end of input closes the block
      message += (first ? "" : "\n") + line;
      first = false;
    }
  }
  message = line;
  while (!message.empty() && message.back() == '\\') {
    message.back() = '\n';
    if (!next(line, ". ")) break;
    message += line;
  }
  if (!message.empty() && message.back() == '\n') message.pop_back();
  return true;
}

}  // namespace

void run_chat(const ChatArgs& a) {
  // Option values are checked before the (possibly multi-gigabyte) model is loaded.
  const SamplerParams sampling = a.sampling.params();
  bool speculate = false;
  a.spec.params(&speculate);  // bad speculative options are reported before any model loads
  chat::ChatOptions copt = chat_options(a.think, a.no_think);
  std::optional<chat::ChatTemplate> template_override = chat_template_override(a.chat_template);
  LoadedModel lm = load_model(a.model);
  const SpeculativeSetup spec = make_speculator(a.spec, a.model, lm, sampling);
  report_seed(sampling);  // after the load: an error before it stays the only line
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
  if (interactive) {
    std::fprintf(stderr, "minfer chat: type a message (/help for commands, Ctrl-C stops a reply, /bye quits)\n");
    install_interrupt_handler();
  }
  std::string line;
  ChatInput input(interactive, kChatLineLimitBytes);
  bool pending_first = !a.first_message.empty();
  for (;;) {
    if (pending_first) {
      line = a.first_message;
      pending_first = false;
    } else {
      if (!read_message(input, line, a.color)) {
        if (interactive) std::fputc('\n', stdout);  // the shell prompt starts on a line of its own
        break;
      }
    }
    if (line == "/exit" || line == "/quit" || line == "/bye") break;
    if (line == "/help" || line == "/?") {
      std::fputs(kChatHelp, stdout);
      std::fflush(stdout);
      continue;
    }
    if (line == "/reset" || line == "/clear") {
      msgs.resize(a.system.empty() ? 0 : 1);
      session.reset();
      append = false;
      std::fputs("(conversation reset)\n", stdout);
      continue;
    }
    if (line == "/save" || line == "/load" || line.rfind("/save ", 0) == 0 || line.rfind("/load ", 0) == 0) {
      const std::string path = line.size() > 6 ? line.substr(6) : std::string();
      if (path.find_first_not_of(' ') == std::string::npos) {
        std::fprintf(stderr, "minfer: %s needs a file name (%s FILE)\n", line.substr(0, 5).c_str(), line.substr(0, 5).c_str());
        continue;
      }
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
    if (line[0] == '/' && line.rfind("//", 0) != 0) {
      const std::string word = line.substr(0, line.find(' '));
      std::fprintf(stderr, "minfer: unknown command %s (/help lists them; start a message with // to send a leading /)\n",
                   printable(word).c_str());
      continue;
    }
    if (line.rfind("//", 0) == 0) line.erase(0, 1);
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
    opt.stop = a.stop;
    opt.stop_at_eog = !a.ignore_eos;
    opt.speculator = spec.speculator.get();
    GenerateStats st;
    g_interrupted = 0;
    g_generating = 1;
    std::string reply;
    try {
      reply = session.generate(ids, sampler, opt, [](const std::string& piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        return g_interrupted == 0;  // Ctrl-C: this reply ends here, the conversation goes on
      }, &st);
    } catch (...) {
      g_generating = 0;
      throw;
    }
    g_generating = 0;
    if (g_interrupted != 0) st.stop_reason = "interrupted";
    std::fputc('\n', stdout);
    std::fflush(stdout);
    msgs.push_back({"assistant", reply});
    say_shift();
    if (!a.session_file.empty()) {
      // A session that cannot be saved (an unwritable folder, a full disk) is one warning line per
      // turn; the conversation goes on (the previous file, if any, is left as it was).
      try {
        session.save(a.session_file);
      } catch (const Error& e) {
        log_warn("session not saved: {}", e.what());
      }
    }
    std::fprintf(stderr,
                 "minfer: prompt %d new token%s (%d reused), %.1f t/s | generated %d token%s, %.1f t/s | stop: %s\n",
                 st.prompt_tokens, st.prompt_tokens == 1 ? "" : "s", st.reused_tokens, st.prefill_tps(),
                 st.generated_tokens, st.generated_tokens == 1 ? "" : "s", st.decode_tps(),
                 st.stop_reason.c_str());
  }
}


void add_chat_command(CLI::App& app) {
  auto args = std::make_shared<ChatArgs>();
  auto* cmd = app.add_subcommand("chat", "Interactive multi-turn chat (also reads piped stdin, one message per line)");
  args->model.add(cmd);
  args->sampling.add(cmd);
  cmd->add_option("--system,--system-prompt", args->system, "system prompt (also -sys)");
  cmd->add_option("--chat-template", args->chat_template, "override the chat template: 'chatml' (built-in) or a Jinja template file");
  cmd->add_option("-n,--n-predict", args->n_predict, "most tokens per reply")->capture_default_str();
  cmd->add_flag("--think", args->think, "Qwen3: enable_thinking=true (the template's default when neither flag is given)");
  cmd->add_flag("--no-think", args->no_think, "Qwen3: enable_thinking=false (an empty think block)");
  args->context.add(cmd);
  cmd->add_option("--session", args->session_file,
                  "KV session file: restore the conversation from it (when it exists) and save it after each turn");
  args->spec.add(cmd);
  cmd->add_option("--stop,-r,--reverse-prompt", args->stop, "stop string: a reply ends before it (repeatable)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "replies go on past the end-of-generation token (until -n)");
  cmd->add_flag("--color", args->color, "show the prompt in colour");
  // Accepted for llama-cli command lines: chat is interactive, and escapes are processed by default.
  auto no_escape = std::make_shared<bool>(false);
  auto accepted = std::make_shared<bool>(false);
  cmd->add_flag("-i,--interactive,--conversation", *accepted, "accepted for llama-cli command lines (chat is interactive)");
  cmd->add_flag("-e,--escape", *accepted, "process escapes (\\n, \\t, \\xHH ...) in --system and --stop (the default)");
  cmd->add_flag("--no-escape", *no_escape, "take --system and --stop literally");
  cmd->callback([args, no_escape, accepted] {
    ChatArgs a = *args;
    if (!*no_escape) {
      a.system = process_escapes(a.system);
      for (std::string& s : a.stop) s = process_escapes(s);
    }
    run_chat(a);
  });
}

}  // namespace minfer::cli
