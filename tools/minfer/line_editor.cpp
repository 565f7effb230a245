#include "line_editor.h"

#include <histedit.h>
#include <langinfo.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "core/read_file.h"

namespace minfer {
namespace {

constexpr int kHistoryLines = 1000;
/// Marks the start and end of prompt bytes that take no room on the screen (colour escapes):
/// libedit's EL_PROMPT_ESC, the same byte as readline's RL_PROMPT_START_IGNORE.
constexpr char kPromptIgnore = '\1';

/// A TERM that names a terminal libedit can drive: set, and not "dumb" (Emacs' shell buffers,
/// some CI terminals), where it would draw escape codes or warn that it has no termcap entry.
bool term_supports_editing() {
  const char* term = std::getenv("TERM");
  return term != nullptr && *term != '\0' && std::string_view(term) != "dumb";
}

/// libedit decodes the keys typed as multi-byte characters of the LC_CTYPE locale: without one
/// (the "C" locale every program starts in), a letter such as "é" would reach the line as octal
/// escapes. Only LC_CTYPE is set, so number formatting stays as it was; the user's locale when it
/// is UTF-8, C.UTF-8 otherwise (model text is UTF-8). Byte classification (isalpha and the like
/// on single bytes, as the template interpreter uses them) is the same in both: only ASCII bytes
/// are letters or digits.
void use_utf8_ctype() {
  const auto is_utf8 = [] {
    const char* cs = nl_langinfo(CODESET);
    return cs != nullptr && (std::strcmp(cs, "UTF-8") == 0 || std::strcmp(cs, "utf8") == 0);
  };
  if (std::setlocale(LC_CTYPE, "") != nullptr && is_utf8()) return;
  if (std::setlocale(LC_CTYPE, "C.UTF-8") == nullptr) std::setlocale(LC_CTYPE, "C");
}

}  // namespace

struct ChatInput::Impl {
  bool interactive = false;
  size_t limit = 0;
  std::optional<LineReader> plain;  // when not editing
  EditLine* el = nullptr;
  History* hist = nullptr;
  std::FILE* quiet = nullptr;  // /dev/null: libedit's messages
  HistEvent ev{};
  std::string prompt;  // what the prompt callback shows
  size_t line_no = 0;

  static char* prompt_text(EditLine* e) {
    void* data = nullptr;
    el_get(e, EL_CLIENTDATA, &data);
    return static_cast<Impl*>(data)->prompt.data();
  }

  ~Impl() {
    if (el != nullptr) el_end(el);  // restores the terminal's settings
    if (hist != nullptr) history_end(hist);
    if (quiet != nullptr) std::fclose(quiet);
  }
};

ChatInput::ChatInput(bool interactive, size_t limit) : impl_(std::make_unique<Impl>()) {
  impl_->interactive = interactive;
  impl_->limit = limit;
  if (interactive && term_supports_editing()) {
    use_utf8_ctype();
    // libedit's own messages (a TERM without a terminfo entry: "using dumb terminal settings",
    // where editing still works; a bad ~/.editrc line) are not the chat's business.
    impl_->quiet = std::fopen("/dev/null", "w");
    // With stdout redirected to a file, the prompt and the line being edited go to the terminal
    // on stderr, so the file holds only the replies.
    std::FILE* screen = isatty(STDOUT_FILENO) == 1 || isatty(STDERR_FILENO) != 1 ? stdout : stderr;
    impl_->el = el_init("minfer", stdin, screen, impl_->quiet != nullptr ? impl_->quiet : stderr);
  }
  if (impl_->el == nullptr) {
    impl_->plain.emplace(stdin, "stdin", limit);
    return;
  }
  EditLine* el = impl_->el;
  impl_->hist = history_init();
  history(impl_->hist, &impl_->ev, H_SETSIZE, kHistoryLines);
  history(impl_->hist, &impl_->ev, H_SETUNIQUE, 1);  // a line repeated at once is kept once
  el_set(el, EL_CLIENTDATA, impl_.get());
  el_set(el, EL_PROMPT_ESC, &Impl::prompt_text, kPromptIgnore);
  el_set(el, EL_EDITOR, "emacs");
  el_set(el, EL_HIST, history, impl_->hist);
  // libedit catches the signals that end or stop the process while it reads, puts the terminal
  // back into its normal mode, and passes the signal on to the handler that was there before
  // (chat's Ctrl-C handler) or to the default action.
  el_set(el, EL_SIGNAL, 1);
  // Home and End as the terminals that do not match their TERM entry send them (the console,
  // PuTTY, screen and tmux: ESC [ 1 ~ and ESC [ 4 ~; rxvt: ESC [ 7 ~ and ESC [ 8 ~), besides
  // what terminfo lists for TERM.
  for (const char* home : {"\033[1~", "\033[7~", "\033[H", "\033OH"}) el_set(el, EL_BIND, home, "ed-move-to-beg", nullptr);
  for (const char* end : {"\033[4~", "\033[8~", "\033[F", "\033OF"}) el_set(el, EL_BIND, end, "ed-move-to-end", nullptr);
  el_set(el, EL_BIND, "\033[3~", "ed-delete-next-char", nullptr);
  el_source(el, nullptr);  // the user's ~/.editrc, when there is one (key bindings)
}

ChatInput::~ChatInput() = default;

bool ChatInput::editing() const { return impl_->el != nullptr; }

bool ChatInput::next(std::string& line, const char* prompt, bool color) {
  Impl& s = *impl_;
  if (s.el == nullptr) {
    if (s.interactive) {
      if (color) std::fputs("\033[32m", stdout);
      std::fputs(prompt, stdout);
      if (color) std::fputs("\033[0m", stdout);
      std::fflush(stdout);
    }
    return s.plain->next(line);
  }
  // In colour, the prompt's last character (its space) comes after the reset: libedit drops an
  // invisible sequence that ends the prompt, which would leave the typed text green.
  const std::string_view p(prompt);
  s.prompt = color && !p.empty()
                 ? std::string{kPromptIgnore} + "\033[32m" + kPromptIgnore + std::string(p.substr(0, p.size() - 1)) +
                       kPromptIgnore + "\033[0m" + kPromptIgnore + p.back()
                 : std::string(p);
  for (;;) {
    std::fflush(stdout);
    int count = 0;
    errno = 0;
    const char* got = el_gets(s.el, &count);
    if (got == nullptr || count <= 0) {
      if (count < 0 && errno == EINTR) continue;  // a signal that did not end the process
      if (count < 0) fail("stdin line {}: read error ({})", s.line_no + 1, std::strerror(errno));
      return false;  // Ctrl-D at an empty line, or the terminal closed
    }
    ++s.line_no;
    line.assign(got);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    if (line.size() > s.limit) {
      std::fprintf(stderr, "minfer: line not sent: %zu bytes, over the %zu-byte limit of a line\n", line.size(),
                   s.limit);
      continue;
    }
    if (!line.empty()) history(s.hist, &s.ev, H_ENTER, line.c_str());
    return true;
  }
}

}  // namespace minfer
