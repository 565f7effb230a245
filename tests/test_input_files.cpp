// core/read_file.h and core/mapped_file.h with inputs that do not behave: reads stop at their
// limit (exactly the limit is accepted, one byte more is an error naming the source and the
// limit); a FIFO is refused without waiting; a mapped file truncated while in use ends the
// process with one line naming the file and exit status kExitMappedFileChanged, not SIGBUS.
//
// What could block or fault runs in a forked child bounded by alarm(); the parent reads the
// child's stderr through a pipe and its status through waitpid.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/read_file.h"
#include "core/signal_cleanup.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"

namespace minfer {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

struct ChildEnd {
  int status = 0;
  std::string err;  ///< what the child wrote to stderr
};

/// Runs `body` in a forked child with stderr going to a pipe, at most 20 s (SIGALRM), no core
/// file. `body` returns the child's exit status.
ChildEnd in_child(const std::function<int()>& body) {
  int err[2];
  if (::pipe(err) != 0) {
    ADD_FAILURE() << "pipe: " << std::strerror(errno);
    return {};
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {  // no gtest macros here, only _exit
    ::close(err[0]);
    ::dup2(err[1], STDERR_FILENO);
    ::alarm(20);
    const rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    int code = 0;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "exception: %s\n", e.what());
      code = 3;
    }
    std::fflush(stderr);
    ::_exit(code);
  }
  ::close(err[1]);
  ChildEnd end;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(err[0], buf, sizeof buf)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    end.err.append(buf, static_cast<size_t>(n));
  }
  ::close(err[0]);
  while (::waitpid(pid, &end.status, 0) < 0 && errno == EINTR) {
  }
  return end;
}

std::string write_bytes(const std::filesystem::path& p, size_t n, char c) {
  std::ofstream(p, std::ios::binary) << std::string(n, c);
  return p.string();
}

TEST(ReadFile, a_file_of_exactly_the_limit_is_read_and_one_byte_more_is_an_error_naming_it_and_the_limit) {
  const auto dir = test::temp_dir();
  const std::string at = write_bytes(dir / "at.txt", 4096, 'x');
  const std::string over = write_bytes(dir / "over.txt", 4097, 'x');
  EXPECT_EQ(read_file_bytes(at, "prompt file", 4096), std::string(4096, 'x'));
  EXPECT_EQ(error_of([&] { read_file_bytes(over, "prompt file", 4096); }),
            "prompt file " + over + ": input is longer than the 4 KiB limit");
  EXPECT_EQ(error_of([&] { read_file_bytes("/dev/zero", "text file", 3 * kMiB); }),
            "text file /dev/zero: input is longer than the 3 MiB limit");
  EXPECT_EQ(error_of([&] { read_file_bytes("/dev/zero", "x", kMiB, FileKinds::kRegular); }),
            "x /dev/zero: not a regular file (a character device)");
  EXPECT_EQ(error_of([&] { read_file_bytes(dir.string(), "prompt file", kMiB); }),
            "prompt file " + dir.string() + ": is a directory, not a file");
}

TEST(ReadFile, a_descriptor_is_read_to_its_end_within_the_limit_and_past_it_is_an_error_naming_the_source) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ASSERT_EQ(::write(p[1], "abcdef", 6), 6);
  ::close(p[1]);
  EXPECT_EQ(read_fd_bytes(p[0], "stdin", 6), "abcdef");
  ::close(p[0]);
  ASSERT_EQ(::pipe(p), 0);
  ASSERT_EQ(::write(p[1], "abcdefg", 7), 7);
  ::close(p[1]);
  EXPECT_EQ(error_of([&] { read_fd_bytes(p[0], "stdin (-p -)", 6); }),
            "stdin (-p -): input is longer than the 6 bytes limit");
  ::close(p[0]);
}

TEST(ReadFile, lines_are_read_up_to_the_limit_and_a_longer_line_is_named_by_its_number) {
  const auto dir = test::temp_dir();
  const std::string path = (dir / "lines.txt").string();
  std::ofstream(path, std::ios::binary) << "one\n\n" << std::string(8, 'b') << "\n" << std::string(9, 'c') << "\nlast";
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  LineReader in(f, "stdin", 8);
  std::string line;
  ASSERT_TRUE(in.next(line));
  EXPECT_EQ(line, "one");
  ASSERT_TRUE(in.next(line));
  EXPECT_EQ(line, "");
  ASSERT_TRUE(in.next(line));
  EXPECT_EQ(line, std::string(8, 'b'));  // exactly the limit
  EXPECT_EQ(in.line_number(), 3u);
  EXPECT_EQ(error_of([&] { in.next(line); }), "stdin line 4: longer than the 8 bytes limit");
  std::fclose(f);
  std::ofstream(path, std::ios::binary) << "a\nno newline at the end";
  f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  LineReader tail(f, "stdin", 100);
  ASSERT_TRUE(tail.next(line));
  ASSERT_TRUE(tail.next(line));
  EXPECT_EQ(line, "no newline at the end");
  EXPECT_FALSE(tail.next(line));
  std::fclose(f);
}

// Before: open() of a FIFO without a writer blocked forever (the check came after the open).
TEST(ReadFile, a_fifo_is_refused_without_waiting_for_a_writer_where_a_regular_file_is_required) {
  const auto dir = test::temp_dir();
  const std::string fifo = (dir / "model.gguf").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const ChildEnd e = in_child([&] {
    for (const auto& f : std::vector<std::function<void()>>{
             [&] { MappedFile m(fifo); },
             [&] { (void)gguf::GgufFile::open(fifo); },
             [&] { ::close(open_regular_file(fifo, "vocab file")); },
             [&] { read_file_bytes(fifo, "--chat-template", kMiB, FileKinds::kRegular); }}) {
      try {
        f();
        return 1;
      } catch (const Error& err) {
        std::fprintf(stderr, "%s\n", err.what());
      }
    }
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(e.status)) << "status " << e.status << " (SIGALRM: it waited for a writer)\n" << e.err;
  EXPECT_EQ(WEXITSTATUS(e.status), 0) << e.err;
  EXPECT_EQ(e.err, fifo + ": not a regular file (a FIFO or pipe)\n" +
                       fifo + ": not a regular file (a FIFO or pipe)\n" +
                       "vocab file " + fifo + ": not a regular file (a FIFO or pipe)\n" +
                       "--chat-template " + fifo + ": not a regular file (a FIFO or pipe)\n");
}

// The contract (docs/adr/0005-model-files-must-not-change-while-mapped.md): a file truncated under
// a mapping is reported by name when a read reaches the missing pages.
TEST(MappedFileFault, a_read_past_a_truncation_ends_the_process_with_one_line_naming_the_file_and_status_74) {
  const auto dir = test::temp_dir();
  const long page = ::sysconf(_SC_PAGESIZE);
  const std::string path = write_bytes(dir / "model.gguf", static_cast<size_t>(3 * page), 'w');
  const ChildEnd e = in_child([&] {
    MappedFile m(path);
    volatile uint8_t sum = m.data()[0];  // readable while the file is whole
    if (::truncate(path.c_str(), page) != 0) return 2;
    sum = static_cast<uint8_t>(sum + m.data()[2 * page + 10]);  // past the new end: SIGBUS
    return sum == 0 ? 4 : 5;
  });
  ASSERT_TRUE(WIFEXITED(e.status)) << "ended by " << (WIFSIGNALED(e.status) ? strsignal(WTERMSIG(e.status)) : "?")
                                   << "; stderr: " << e.err;
  EXPECT_EQ(WEXITSTATUS(e.status), kExitMappedFileChanged) << e.err;
  EXPECT_EQ(e.err, "minfer: error: " + path + ": reading byte " + std::to_string(2 * page + 10) + " of the " +
                       std::to_string(3 * page) +
                       " mapped failed (the file was truncated while in use, or a read error); a model file must "
                       "not be truncated or rewritten while minfer uses it\n");
}

TEST(MappedFileFault, a_tensor_read_of_a_truncated_gguf_names_the_gguf_file) {
  const auto dir = test::temp_dir();
  const std::string path = (dir / "weights.gguf").string();
  gguf::GgufWriter w;
  w.add_tensor_bytes("big", TensorType::I8, std::vector<int64_t>{1 << 16}, std::vector<uint8_t>(1 << 16, 3));
  w.write(path);
  const ChildEnd e = in_child([&] {
    const auto f = gguf::GgufFile::open(path);
    const gguf::TensorInfo* t = f->find_tensor("big");
    if (t == nullptr) return 2;
    if (::truncate(path.c_str(), 4096) != 0) return 2;
    const volatile uint8_t* p = t->data;
    return p[(1 << 16) - 1] == 3 ? 4 : 5;
  });
  ASSERT_TRUE(WIFEXITED(e.status)) << "ended by " << (WIFSIGNALED(e.status) ? strsignal(WTERMSIG(e.status)) : "?")
                                   << "; stderr: " << e.err;
  EXPECT_EQ(WEXITSTATUS(e.status), kExitMappedFileChanged) << e.err;
  EXPECT_EQ(e.err.rfind("minfer: error: " + path + ": reading byte ", 0), 0u) << e.err;
  EXPECT_EQ(std::count(e.err.begin(), e.err.end(), '\n'), 1) << e.err;
}

// Only a fault inside a watched mapping is reported as a changed file: a SIGBUS sent by kill()
// while a file is mapped still ends the process by SIGBUS.
TEST(MappedFileFault, a_sigbus_that_is_no_read_fault_keeps_its_default_action) {
  const auto dir = test::temp_dir();
  const std::string path = write_bytes(dir / "model.gguf", 8192, 'w');
  const ChildEnd e = in_child([&] {
    MappedFile m(path);
    ::kill(::getpid(), SIGBUS);
    return 0;
  });
  ASSERT_TRUE(WIFSIGNALED(e.status)) << "status " << e.status << ": " << e.err;
  EXPECT_EQ(WTERMSIG(e.status), SIGBUS);
  EXPECT_EQ(e.err, "");
}

}  // namespace
}  // namespace minfer
