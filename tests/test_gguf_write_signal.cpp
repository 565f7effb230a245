// A GGUF write ended part way by any signal whose default action ends the process leaves no
// hidden temporary file (".minfer-write-XXXXXX") beside the output, and the process still ends
// by that signal.
//
// No sleeps and no races: a forked child writes a file whose second tensor's producer tells the
// parent over a pipe that the write is under way and then blocks reading another pipe; the
// parent sees the temporary file, sends the signal, and waits for the child to end. The
// `minfer quantize` test uses the MINFER_TEST_WRITE_SIGNAL hook, which makes the writer raise
// the signal itself after the first tensor.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string.h>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "core/error.h"
#include "core/signal_cleanup.h"
#include "gguf/gguf_writer.h"
#include "synth_model.h"
#include "test_util.h"

namespace minfer {
namespace {

bool ignored_here(int sig) {
  struct sigaction old {};
  ::sigaction(sig, nullptr, &old);
  return (old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_IGN;
}

struct Ended {
  int status = 0;                  ///< waitpid's status
  size_t temporaries_seen = 0;     ///< temporary files beside the output while the child was writing
};

/// Forks a child that writes `out` (two tensors) and blocks inside the second tensor's producer;
/// sends `sig` to it then, and returns how it ended. With `ignore`, the child ignores `sig`
/// before it starts writing.
Ended write_and_signal(const std::filesystem::path& out, int sig, bool ignore = false) {
  int ready[2], hold[2];
  if (::pipe(ready) != 0 || ::pipe(hold) != 0) {
    ADD_FAILURE() << "pipe: " << std::strerror(errno);
    return {};
  }
  const pid_t pid = ::fork();
  if (pid == 0) {  // the child: no gtest macros, only _exit
    ::close(ready[0]);
    ::close(hold[1]);
    ::alarm(60);  // never hang the test run, whatever happens
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);  // SIGQUIT / SIGXFSZ would dump core
    if (ignore) ::signal(sig, SIG_IGN);
    int code = 0;
    try {
      gguf::GgufWriter w;
      w.add_tensor_bytes("first", TensorType::I8, std::vector<int64_t>{4}, std::vector<uint8_t>{1, 2, 3, 4});
      w.add_tensor("second", TensorType::I8, std::vector<int64_t>{4}, [&](uint8_t* dst, size_t n) {
        std::memset(dst, 7, n);
        const char c = 'w';
        if (::write(ready[1], &c, 1) != 1) ::_exit(4);
        char x;
        while (::read(hold[0], &x, 1) < 0 && errno == EINTR) {
        }  // until the parent closes its end
      });
      w.write(out.string());
    } catch (...) {
      code = 3;
    }
    ::_exit(code);
  }
  ::close(ready[1]);
  ::close(hold[0]);
  Ended e;
  char c = 0;
  const bool writing = ::read(ready[0], &c, 1) == 1;
  EXPECT_TRUE(writing) << "the child did not reach the second tensor";
  if (writing) {
    e.temporaries_seen = test::write_temporaries(out.parent_path()).size();
    ::kill(pid, sig);
  }
  ::close(hold[1]);  // lets a child that survived the signal finish its write
  ::close(ready[0]);
  while (::waitpid(pid, &e.status, 0) < 0 && errno == EINTR) {
  }
  return e;
}

class GgufWriteSignal : public ::testing::TestWithParam<int> {};

TEST_P(GgufWriteSignal, signal_during_write_removes_the_temporary_file_and_ends_the_process_by_it) {
  const int sig = GetParam();
  if (ignored_here(sig)) GTEST_SKIP() << strsignal(sig) << " is ignored in this process (a background job?)";
  const std::filesystem::path dir = test::temp_dir();
  const Ended e = write_and_signal(dir / "out.gguf", sig);
  EXPECT_EQ(e.temporaries_seen, 1u);  // the write was under way when the signal came
  EXPECT_TRUE(WIFSIGNALED(e.status)) << "status " << e.status;
  if (WIFSIGNALED(e.status)) {
    EXPECT_EQ(WTERMSIG(e.status), sig) << strsignal(WTERMSIG(e.status));
  }
  EXPECT_EQ(test::write_temporaries(dir), std::vector<std::string>{});
  EXPECT_FALSE(std::filesystem::exists(dir / "out.gguf"));
}

// Every signal whose default action ends the process, from signal(7) (written out here, not
// taken from core/signal_cleanup.h, so that a signal missing there fails here), and every
// real-time signal the C library leaves to programs. SIGKILL cannot be caught; SIGSTOP, SIGTSTP,
// SIGTTIN and SIGTTOU stop the process and SIGCHLD, SIGCONT, SIGURG, SIGWINCH are ignored by
// default, so they leave the write going.
std::vector<int> ending_signals() {
  std::vector<int> v = {SIGHUP,  SIGINT,  SIGQUIT, SIGILL,    SIGTRAP, SIGABRT,   SIGBUS,  SIGFPE,
                        SIGUSR1, SIGSEGV, SIGUSR2, SIGPIPE,   SIGALRM, SIGTERM,   SIGSTKFLT, SIGXCPU,
                        SIGXFSZ, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSYS};
  for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) v.push_back(sig);
  return v;
}

std::string signal_name(int sig) {
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) return "SIGRTMIN_plus_" + std::to_string(sig - SIGRTMIN);
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal_" + std::to_string(sig);
}

INSTANTIATE_TEST_SUITE_P(EndingSignals, GgufWriteSignal, ::testing::ValuesIn(ending_signals()),
                         [](const ::testing::TestParamInfo<int>& p) { return signal_name(p.param); });

TEST(GgufWriteSignalIgnored, an_ignored_signal_stays_ignored_and_the_write_completes) {
  const std::filesystem::path dir = test::temp_dir();
  const Ended e = write_and_signal(dir / "out.gguf", SIGINT, /*ignore=*/true);
  EXPECT_EQ(e.temporaries_seen, 1u);
  ASSERT_TRUE(WIFEXITED(e.status)) << "status " << e.status;
  EXPECT_EQ(WEXITSTATUS(e.status), 0);
  EXPECT_EQ(test::write_temporaries(dir), std::vector<std::string>{});
  EXPECT_TRUE(std::filesystem::exists(dir / "out.gguf"));
}

TEST(RemoveOnSignal, arming_a_too_long_path_or_more_than_kMaxArmed_paths_is_an_error_naming_the_path) {
  RemoveOnSignal a;
  const std::string long_path(RemoveOnSignal::kMaxPathBytes + 1, 'x');
  EXPECT_THROW(a.arm(long_path), Error);
  EXPECT_FALSE(a.armed());
  std::vector<RemoveOnSignal> many(RemoveOnSignal::kMaxArmed);
  for (size_t i = 0; i < many.size(); ++i) many[i].arm("/nonexistent/minfer-arm-" + std::to_string(i));
  try {
    a.arm("/nonexistent/one-too-many");
    ADD_FAILURE() << "arming more than kMaxArmed paths was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/one-too-many: "), std::string::npos) << e.what();
  }
  many.back().disarm();  // a freed slot is reused
  a.arm("/nonexistent/one-too-many");
  EXPECT_TRUE(a.armed());
}

// Before: SIGUSR1 and SIGALRM (like every signal but the five first covered) left the temporary file.
class GgufWriteSignalCli : public ::testing::TestWithParam<int> {};

TEST_P(GgufWriteSignalCli, quantize_and_synth_ended_by_the_signal_leave_no_temporary_file) {
  const int sig = GetParam();
  if (ignored_here(sig)) GTEST_SKIP() << strsignal(sig) << " is ignored in this process";
  const std::filesystem::path dir = test::temp_dir();
  test::SynthSpec spec;
  spec.type = TensorType::F32;
  const std::string in = test::write_synth_model(spec, dir).string();
  const std::string out = (dir / "out.gguf").string();
  const std::string hook = "MINFER_TEST_WRITE_SIGNAL=" + std::to_string(sig) + " exec ";
  const std::string quantize = test::minfer_bin() + " quantize " + in + " " + out + " --type q4_0 -t 1";
  std::vector<std::string> commands = {quantize};
  const std::filesystem::path vocab = test::shared_path("fixtures/tokenizer/ggml-vocab-qwen2.gguf");
  if (std::filesystem::exists(vocab))  // synth needs a full-size vocabulary (the reference data's)
    commands.push_back(test::minfer_bin() + " synth --arch qwen2 --preset tiny --type q8_0 -t 1 --vocab " +
                       vocab.string() + " -o " + out);
  for (const std::string& cmd : commands) {
    // `exec`: the shell becomes minfer, so the status popen reports is minfer's own.
    const test::CommandResult r = test::run_shell(hook + cmd);
    EXPECT_EQ(r.signal, sig) << cmd << ": status " << r.status << ": " << r.out;
    EXPECT_EQ(test::write_temporaries(dir), std::vector<std::string>{}) << cmd;
    EXPECT_FALSE(std::filesystem::exists(out)) << cmd;
    // Without the hook the same command writes the file (the hook, not the input, ended it).
    const test::CommandResult ok = test::run_shell(cmd);
    EXPECT_EQ(ok.status, 0) << cmd << ": " << ok.out;
    EXPECT_TRUE(std::filesystem::exists(out)) << cmd;
    std::filesystem::remove(out);
  }
}

INSTANTIATE_TEST_SUITE_P(SomeEndingSignals, GgufWriteSignalCli, ::testing::Values(SIGTERM, SIGUSR1, SIGALRM, SIGPIPE),
                         [](const ::testing::TestParamInfo<int>& p) { return signal_name(p.param); });

}  // namespace
}  // namespace minfer
