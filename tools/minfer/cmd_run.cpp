// `minfer run`: generate text from a prompt, streamed as it is produced, then one summary line.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <optional>
#include <utility>

#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/printable.h"
#include "core/read_file.h"
#include "engine/generate.h"
#include "options.h"
#include "chat/chat.h"
#include "chat_mode.h"

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
  ContextArgs context;
  std::string prompt_cache;
  bool prompt_cache_all = false;
  bool prompt_cache_ro = false;
  bool conversation = false;     ///< -cnv/-i: the interactive chat (chat_mode.h)
  bool single_turn = false;      ///< -st: one chat turn, as --chat
  bool escape = true;            ///< -e/--escape: the default, accepted
  bool no_conversation = false;  ///< -no-cnv: accepted (run is one prompt)
  bool no_escape = false;        ///< --no-escape (-e/--escape, the default, processes \n and the like)
  bool color = false;
  bool ignore_eos = false;
  SpeculativeArgs spec;
};

/// One stderr line: "minfer: prompt cache: <verb> N tokens, B bytes, T ms (G GB/s): FILE".
void report_session_io(const char* verb, size_t tokens, const std::string& path, std::chrono::steady_clock::time_point t0) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path, ec);
  std::fprintf(stderr, "minfer: prompt cache: %s %zu tokens, %llu bytes, %.1f ms (%.2f GB/s): %s\n", verb, tokens,
               static_cast<unsigned long long>(ec ? 0 : bytes), s * 1e3, s > 0 && !ec ? static_cast<double>(bytes) / s / 1e9 : 0.0,
               printable(path).c_str());
}

/// Saves the prompt cache and reports it; a save that fails (an unwritable folder, a path that is
/// a folder or a device, a full disk) is one warning line and the run goes on, as a refused cache
/// file is on the way in (the previous file, if any, is left as it was).
void save_prompt_cache(const Session& session, const std::string& path) {
  try {
    const auto t0 = std::chrono::steady_clock::now();
    session.save(path);
    report_session_io("saved", session.tokens().size(), path, t0);
  } catch (const Error& e) {
    log_warn("prompt cache not saved: {}", e.what());
  }
}

/// run -cnv / -i: llama-cli's conversation mode is `minfer chat`, with -p (or -f) as the first
/// message when given.
void run_conversation(const RunArgs& a) {
  ChatArgs c;
  c.model = a.model;
  c.sampling = a.sampling;
  c.system = a.system;
  c.chat_template = a.chat_template;
  c.n_predict = a.n_predict;
  c.think = a.think;
  c.no_think = a.no_think;
  c.context = a.context;
  c.stop = a.stop;
  c.ignore_eos = a.ignore_eos;
  c.color = a.color;
  c.spec = a.spec;
  c.first_message = a.prompt;
  if (!a.file.empty()) c.first_message = read_file_bytes(a.file, "prompt file", kPromptLimitBytes);
  if (c.first_message == "-") fail("-p - (stdin) cannot be the first message of -cnv: stdin is the conversation");
  run_chat(c);
}

void run(const RunArgs& a) {
  // Option values are checked before the (possibly multi-gigabyte) model is loaded.
  const SamplerParams sampling = a.sampling.params();
  bool speculate = false;
  a.spec.params(&speculate);  // bad speculative options are reported before any model loads
  std::optional<chat::ChatTemplate> template_override;
  chat::ChatOptions copt;
  if (a.chat) {
    copt = chat_options(a.think, a.no_think);
    template_override = chat_template_override(a.chat_template);
  }
  std::string prompt = a.prompt;
  if (!a.file.empty()) prompt = read_file_bytes(a.file, "prompt file", kPromptLimitBytes);
  // The model (and its device, thread and cache options) loads before a '-' prompt is read, so
  // none of their errors waits for the end of stdin.
  LoadedModel lm = load_model(a.model);
  const SpeculativeSetup spec = make_speculator(a.spec, a.model, lm, sampling);
  report_seed(sampling);  // after the load: an error before it stays the only line
  if (a.file.empty() && prompt == "-") prompt = read_fd_bytes(STDIN_FILENO, "stdin (-p -)", kPromptLimitBytes);
  const tok::Tokenizer& tk = *lm.model->tokenizer();
  std::vector<int32_t> ids;
  std::optional<chat::ChatTemplate> chat_tmpl;
  if (a.chat) {
    std::vector<chat::ChatMessage> msgs;
    if (!a.system.empty()) msgs.push_back({"system", a.system});
    msgs.push_back({"user", prompt});
    chat_tmpl = chat_template_for(std::move(template_override), tk.chat_template(), a.model.model);
    ids = chat_tmpl->tokenize(tk, msgs, copt);  // the prompt and system text never become control tokens
  } else {
    ids = tk.encode(prompt, /*add_special=*/true, /*parse_special=*/true);
  }
  if (ids.empty()) fail("the prompt is empty");
  Sampler sampler(sampling);
  Session session(*lm.engine, tk);
  // -n -1 means "until the context is full": no shift there.
  if (a.context.shift && a.n_predict >= 0)
    session.set_context_shift(
        a.context.keep_for(lm.engine->n_ctx(), a.chat && a.context.keep < 0 ? preamble_tokens(tk, *chat_tmpl, copt, a.system) : 0));
  GenerateOptions opt;
  opt.max_tokens = a.n_predict;
  opt.stop = a.stop;
  opt.stop_at_eog = !a.ignore_eos;
  opt.speculator = spec.speculator.get();
  // --prompt-cache: the longest prefix the file shares with this prompt is reused (Session's
  // prefill keeps the common prefix); a file that is refused is one warning and is rewritten.
  std::vector<int32_t> cached;  // what the prompt cache file holds (when it was restored)
  if (!a.prompt_cache.empty()) {
    if (std::filesystem::exists(a.prompt_cache)) {
      try {
        const auto t0 = std::chrono::steady_clock::now();
        session.load(a.prompt_cache);
        cached = session.tokens();
        report_session_io("restored", session.tokens().size(), a.prompt_cache, t0);
      } catch (const Error& e) {
        log_warn("prompt cache ignored: {}", e.what());
      }
    }
    if (!a.prompt_cache_ro)
      opt.after_prefill = [&] {
        if (session.tokens() == cached) return;  // the file holds this state already
        save_prompt_cache(session, a.prompt_cache);
      };
  }
  if (!a.no_display_prompt && !a.chat) {
    if (a.color) std::fputs("\033[33m", stdout);  // llama-cli's --color: the prompt stands apart
    std::fwrite(prompt.data(), 1, prompt.size(), stdout);
    if (a.color) std::fputs("\033[0m", stdout);
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
  if (!a.prompt_cache.empty() && a.prompt_cache_all && !a.prompt_cache_ro) save_prompt_cache(session, a.prompt_cache);
  const std::string reused = st.reused_tokens > 0 ? fmt::format(" ({} reused)", st.reused_tokens) : std::string();
  std::fprintf(stderr,
               "minfer: prompt %d token%s%s, %.1f t/s | generated %d token%s, %.1f t/s | stop: %s\n",
               st.prompt_tokens, st.prompt_tokens == 1 ? "" : "s", reused.c_str(), st.prefill_tps(), st.generated_tokens,
               st.generated_tokens == 1 ? "" : "s", st.decode_tps(),
               st.stop_reason.c_str());
  if (spec.speculator)
    std::fprintf(stderr,
                 "minfer: speculative (%s): drafted %lld, accepted %lld (%.1f%%), %.2f tokens per target forward\n",
                 spec.draft.engine ? "draft model" : "prompt lookup", static_cast<long long>(st.drafted),
                 static_cast<long long>(st.accepted), 100.0 * st.acceptance(), st.tokens_per_forward());
  if (session.shifts() > 0)
    std::fprintf(stderr, "minfer: context shifted %d time%s (--no-context-shift stops at the full context instead)\n",
                 session.shifts(), session.shifts() == 1 ? "" : "s");
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
  cmd->add_flag("--chat", args->chat, "format the prompt with the model's chat template (one user turn; also -st)");
  cmd->add_flag("--single-turn", args->single_turn, "llama-cli's -st: as --chat");
  cmd->add_flag("-i,--interactive,--conversation", args->conversation,
                "interactive chat, as `minfer chat` (also -cnv); -p or -f is the first message");
  cmd->add_flag("--no-conversation", args->no_conversation, "llama-cli's -no-cnv: accepted (run is one prompt unless -cnv)");
  // These only shape the chat template's input: without --chat (or -cnv) they would be ignored,
  // so they are usage errors ("--think requires --chat"), checked in the callback.
  cmd->add_option("--system,--system-prompt", args->system, "system prompt (also -sys; needs --chat or -cnv)");
  cmd->add_option("--chat-template", args->chat_template, "override the chat template: 'chatml' (built-in) or a Jinja template file (needs --chat or -cnv)");
  cmd->add_flag("--think", args->think, "Qwen3: enable_thinking=true (the template's default when neither flag is given; needs --chat or -cnv)");
  cmd->add_flag("--no-think", args->no_think, "Qwen3: enable_thinking=false (an empty think block; needs --chat or -cnv)");
  cmd->add_option("--stop,-r,--reverse-prompt", args->stop, "stop string (repeatable)");
  cmd->add_flag("--no-display-prompt", args->no_display_prompt, "do not echo the prompt");
  cmd->add_flag("-e,--escape", args->escape, "process escapes (\\n, \\t, \\xHH ...) in -p, --system and --stop (the default)");
  cmd->add_flag("--no-escape", args->no_escape, "take -p, --system and --stop literally");
  cmd->add_flag("--color", args->color, "show the echoed prompt in colour");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "go on past the end-of-generation token (until -n or a stop string)");
  args->context.add(cmd);
  auto* pc = cmd->add_option("--prompt-cache", args->prompt_cache,
                             "KV session file: reuse the prefix it shares with the prompt, save it after the prompt");
  cmd->add_flag("--prompt-cache-all", args->prompt_cache_all, "also save the generated tokens to the prompt cache")->needs(pc);
  cmd->add_flag("--prompt-cache-ro", args->prompt_cache_ro, "use the prompt cache but never write it")->needs(pc);
  args->spec.add(cmd);
  cmd->callback([args] {
    RunArgs a = *args;
    a.chat = a.chat || a.single_turn;
    if (!a.chat && !a.conversation) {
      if (!a.system.empty()) fail("--system requires --chat (or -cnv)");
      if (!a.chat_template.empty()) fail("--chat-template requires --chat (or -cnv)");
      if (a.think) fail("--think requires --chat (or -cnv)");
      if (a.no_think) fail("--no-think requires --chat (or -cnv)");
    }
    if (!a.no_escape) {  // llama-cli's -e, on by default: not for -f files or stdin
      if (a.prompt != "-") a.prompt = process_escapes(a.prompt);
      a.system = process_escapes(a.system);
      for (std::string& s : a.stop) s = process_escapes(s);
    }
    if (a.conversation) return run_conversation(a);
    if (a.prompt.empty() && a.file.empty()) fail("give a prompt with -p TEXT or -f FILE");
    run(a);
  });
}

}  // namespace minfer::cli
