// `minfer chat` on a terminal (a pseudo-terminal from forkpty): Ctrl-C during a reply stops the
// reply and keeps the conversation, a """ block is one message, /help and unknown commands
// answer without the model, and Ctrl-C at the prompt quits with the shell prompt on a new line.
#include <gtest/gtest.h>

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "test_util.h"

namespace minfer {
namespace {

constexpr const char* kModel = "fixtures/models/mistral-tiny-Q8_0.gguf";

/// A child process on a pseudo-terminal, its output collected with bounded waits. TERM is set to
/// `term` ("dumb": chat reads plain lines, without libedit), and the child starts with no signal
/// blocked and SIGINT at its default action, whatever the test runner passed on.
class PtyChild {
 public:
  explicit PtyChild(const std::vector<std::string>& argv, const char* term = "xterm") {
    pid_ = forkpty(&fd_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      signal(SIGINT, SIG_DFL);
      setenv("TERM", term, 1);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~PtyChild() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  bool started() const { return pid_ > 0; }
  void send(const std::string& s) { ASSERT_EQ(write(fd_, s.data(), s.size()), static_cast<ssize_t>(s.size())); }
  /// Reads until `text` appears in the output after `from` (true), or `seconds` pass (false).
  bool wait_for(const std::string& text, size_t from, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (out_.find(text, from) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) return out_.find(text, from) != std::string::npos;  // EIO: the child closed the terminal
      out_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  /// The exit status (or 128 + signal), waiting at most `seconds`; -1 when still running.
  int wait_exit(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      wait_for("\x01never\x01", out_.size(), 0.05);  // keep draining the terminal
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
    }
    return -1;
  }
  const std::string& out() const { return out_; }

 private:
  int fd_ = -1;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string out_;
};

TEST(CliChatPty, ctrl_c_stops_a_reply_and_keeps_the_conversation) {
  MINFER_REQUIRE_SHARED(kModel);
  const std::string tmpl = std::string(MINFER_SOURCE_DIR) + "/tests/data/chat_templates/mistral-instruct.jinja";
  PtyChild c({test::minfer_bin(), "chat", "-m", test::shared_path(kModel).string(), "-t", "1", "-c", "4096", "-n", "3000",
              "--ignore-eos", "--temp", "0", "--chat-template", tmpl});
  ASSERT_TRUE(c.started());
  ASSERT_TRUE(c.wait_for("> ", 0, 30)) << c.out();
  // /help and an unknown command answer at once; neither reaches the model.
  size_t at = c.out().size();
  c.send("/help\r");
  ASSERT_TRUE(c.wait_for("/clear", at, 10)) << c.out();
  at = c.out().size();
  c.send("/nosuch thing\r");
  ASSERT_TRUE(c.wait_for("unknown command /nosuch", at, 10)) << c.out();
  // The next prompt first: a line typed before it would be echoed by the terminal ahead of the
  // prompt, and the prompt's space would pass for the reply's first text below.
  ASSERT_TRUE(c.wait_for("> ", c.out().find("unknown command /nosuch", at), 10)) << c.out();
  // A long reply, interrupted once it streams: the session goes on.
  at = c.out().size();
  c.send("Hello\r");
  ASSERT_TRUE(c.wait_for("Hello\r\n", at, 10)) << c.out();
  const size_t reply = c.out().size();
  ASSERT_TRUE(c.wait_for(" ", reply, 30)) << c.out();  // some of the reply has come
  c.send("\x03");
  ASSERT_TRUE(c.wait_for("stop: interrupted", reply, 30)) << c.out();
  ASSERT_TRUE(c.wait_for("> ", c.out().find("stop: interrupted", reply), 10)) << c.out();
  // The next turn reuses the conversation's cache (the first turn is kept), and a """ block is
  // one message of two lines.
  at = c.out().size();
  c.send("\"\"\"\rfirst line\rsecond line\r\"\"\"\r");
  // The block's three continuation prompts, each at the start of a line (libedit draws each
  // prompt, then echoes the line typed after it).
  size_t prompts = at;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.wait_for("\n. ", prompts, 10)) << c.out();
    prompts = c.out().find("\n. ", prompts) + 1;
  }
  // The closing """ echoed, then some of the reply (3000 tokens of the tiny model take well under
  // a second now, so the interrupt follows the first text rather than a fixed wait).
  ASSERT_TRUE(c.wait_for("\"\"\"\r\n", prompts, 10)) << c.out();
  const size_t reply2 = c.out().find("\"\"\"\r\n", prompts) + 5;
  ASSERT_TRUE(c.wait_for(" ", reply2, 30)) << c.out();
  c.send("\x03");
  ASSERT_TRUE(c.wait_for("stop: interrupted", at, 30)) << c.out();
  const size_t stop = c.out().find("stop: interrupted", at);
  ASSERT_TRUE(c.wait_for("> ", stop, 10)) << c.out();
  // The block was one message: one reply (a line-by-line reading would have sent """ first).
  size_t replies = 0;
  for (size_t p = c.out().find("stop: ", at); p != std::string::npos; p = c.out().find("stop: ", p + 1)) ++replies;
  EXPECT_EQ(replies, 1u) << c.out();
  // A reused count above 0: the first (interrupted) exchange was still in the session.
  const size_t open = c.out().rfind("(", stop);
  ASSERT_NE(open, std::string::npos);
  EXPECT_NE(c.out().compare(open, 3, "(0 "), 0) << c.out().substr(open, 20);
  EXPECT_NE(c.out().substr(open, 20).find(" reused)"), std::string::npos) << c.out().substr(open, 20);
  // Ctrl-C at the prompt quits, with a newline after the prompt.
  at = c.out().size();
  c.send("\x03");
  const int status = c.wait_exit(10);
  EXPECT_EQ(status, 128 + SIGINT) << c.out();
  EXPECT_NE(c.out().find("\n", at), std::string::npos) << c.out();
}

TEST(CliChatPty, bye_quits_and_ends_the_prompt_line) {
  MINFER_REQUIRE_SHARED(kModel);
  const std::string tmpl = std::string(MINFER_SOURCE_DIR) + "/tests/data/chat_templates/mistral-instruct.jinja";
  PtyChild c({test::minfer_bin(), "chat", "-m", test::shared_path(kModel).string(), "-t", "1", "-n", "2", "--temp", "0",
              "--chat-template", tmpl});
  ASSERT_TRUE(c.started());
  ASSERT_TRUE(c.wait_for("> ", 0, 30)) << c.out();
  // A line ending in a backslash continues the message.
  size_t at = c.out().size();
  c.send("one \\\rtwo\r");
  ASSERT_TRUE(c.wait_for("new token", at, 30)) << c.out();
  ASSERT_TRUE(c.wait_for("> ", c.out().find("new token", at), 10)) << c.out();
  c.send("/bye\r");
  EXPECT_EQ(c.wait_exit(10), 0) << c.out();
  // Ctrl-D at an empty prompt quits too, and the prompt line is ended; here on a terminal without
  // line editing (TERM=dumb), where the lines are read as they come.
  PtyChild d({test::minfer_bin(), "chat", "-m", test::shared_path(kModel).string(), "-t", "1", "--chat-template", tmpl},
             "dumb");
  ASSERT_TRUE(d.wait_for("> ", 0, 30)) << d.out();
  at = d.out().size();
  d.send("\x04");
  EXPECT_EQ(d.wait_exit(10), 0) << d.out();
  EXPECT_NE(d.out().find("\n", at), std::string::npos) << d.out();
}

// Line editing (libedit): the arrow keys move in the line, Up recalls the previous line, and a
// UTF-8 letter typed arrives as itself. The unknown-command answer shows the line as chat got it.
TEST(CliChatPty, lines_are_edited_and_recalled) {
  MINFER_REQUIRE_SHARED(kModel);
  const std::string tmpl = std::string(MINFER_SOURCE_DIR) + "/tests/data/chat_templates/mistral-instruct.jinja";
  PtyChild c({test::minfer_bin(), "chat", "-m", test::shared_path(kModel).string(), "-t", "1", "-n", "2",
              "--chat-template", tmpl});
  ASSERT_TRUE(c.started());
  ASSERT_TRUE(c.wait_for("> ", 0, 30)) << c.out();
  size_t at = c.out().size();
  c.send("/xyz\x1b[D\x1b[DQ\r");  // Left twice, then Q: "/xQyz"
  ASSERT_TRUE(c.wait_for("unknown command /xQyz ", at, 10)) << c.out();
  at = c.out().find("unknown command /xQyz ", at) + 1;
  c.send("\x1b[A\r");  // Up: the same line again
  ASSERT_TRUE(c.wait_for("unknown command /xQyz ", at, 10)) << c.out();
  at = c.out().find("unknown command /xQyz ", at) + 1;
  c.send("/x\x02\x02\x05y\r");  // Ctrl-B twice, Ctrl-E (end of line), y: "/xy"
  ASSERT_TRUE(c.wait_for("unknown command /xy ", at, 10)) << c.out();
  at = c.out().find("unknown command /xy ", at) + 1;
  c.send("orld\x1b[1~/w\x1b[4~!\r");  // Home and End as the console and tmux send them: "/world!"
  ASSERT_TRUE(c.wait_for("unknown command /world! ", at, 10)) << c.out();
  at = c.out().find("unknown command /world! ", at) + 1;
  c.send("/caf\xc3\xa9\r");  // "/café" in UTF-8
  ASSERT_TRUE(c.wait_for("unknown command /caf\xc3\xa9 ", at, 10)) << c.out();
  c.send("/bye\r");
  EXPECT_EQ(c.wait_exit(10), 0) << c.out();
}

// --color: the prompt is green and the colour is reset before the text typed after it.
TEST(CliChatPty, colored_prompt_resets_the_color_before_the_input) {
  MINFER_REQUIRE_SHARED(kModel);
  const std::string tmpl = std::string(MINFER_SOURCE_DIR) + "/tests/data/chat_templates/mistral-instruct.jinja";
  PtyChild c({test::minfer_bin(), "chat", "-m", test::shared_path(kModel).string(), "-t", "1", "-n", "2", "--color",
              "--chat-template", tmpl});
  ASSERT_TRUE(c.started());
  ASSERT_TRUE(c.wait_for("\x1b[32m>", 0, 30)) << c.out();
  const size_t green = c.out().find("\x1b[32m>");
  ASSERT_TRUE(c.wait_for("\x1b[0m ", green, 10)) << c.out();
  c.send("/bye\r");
  EXPECT_EQ(c.wait_exit(10), 0) << c.out();
}

}  // namespace
}  // namespace minfer
