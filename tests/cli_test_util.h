// Running the built `minfer` binary (or any shell command) from a test and keeping what it printed.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace minfer::test {

struct CommandResult {
  int status = -1;  ///< exit status; -1 when the command did not exit normally (a crash, a signal)
  int signal = 0;   ///< the signal that ended the command, 0 when it exited (with `exec`, the command's own)
  std::string out;  ///< stdout and stderr together
};

/// Runs `cmd` through the shell with stderr merged into stdout.
inline CommandResult run_shell(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
  return r;
}

}  // namespace minfer::test
