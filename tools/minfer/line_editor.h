// Where `minfer chat` reads its lines: a terminal with line editing and history (libedit), or
// a stream read line by line (a pipe, a file, or a terminal whose TERM is unset or "dumb").
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace minfer {

/// The lines a chat reads. On a terminal (stdin a tty and TERM naming a real terminal) each line
/// is read with libedit: Emacs-style editing keys (or the user's ~/.editrc), and a history of the
/// session's lines on Up/Down (kept in memory, at most 1000, not written to disk). Otherwise the
/// lines come from stdin as they are (minfer::LineReader), the prompt printed only when stdin is
/// a terminal.
class ChatInput {
 public:
  /// `interactive`: stdin is a terminal (prompts are shown). `limit`: the longest line in bytes.
  /// Line editing is used when `interactive` and TERM is set to something other than "dumb".
  ChatInput(bool interactive, size_t limit);
  ~ChatInput();
  ChatInput(const ChatInput&) = delete;
  ChatInput& operator=(const ChatInput&) = delete;

  /// The next line into `line`, without its newline (a '\r' of CRLF input is left for the caller).
  /// `prompt` is shown first when interactive, in green when `color`. Returns false at the end of
  /// input (Ctrl-D at an empty line on a terminal). Throws minfer::Error "stdin line <n>: ..." for
  /// a read error, or for a line over the limit when not editing; while editing, a line over the
  /// limit is refused with one line on stderr and the prompt is shown again.
  bool next(std::string& line, const char* prompt, bool color);

  /// Whether lines are read with libedit.
  bool editing() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace minfer
