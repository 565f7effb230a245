#include "core/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace minfer {
namespace {

const char* kind_name(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO or pipe";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// "<what> <path>" for messages; `what` may be empty.
std::string named(std::string_view what, const std::string& path) {
  return what.empty() ? path : fmt::format("{} {}", what, path);
}

// Appends what `fd` delivers to `out` until end of file; false when more than `limit` bytes
// came. Throws "<source>: read error (...)".
bool append_bounded(int fd, std::string& out, std::string_view source, size_t limit) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: read error ({})", source, std::strerror(errno));
    }
    if (static_cast<size_t>(n) > limit - out.size()) return false;
    out.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

std::string format_limit(size_t bytes) {
  if (bytes >= kMiB && bytes % kMiB == 0) return fmt::format("{} MiB", bytes / kMiB);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes / 1024);
  return fmt::format("{} bytes", bytes);
}

int open_regular_file(const std::string& path, std::string_view what) {
  const std::string name = named(what, path);
  // O_NONBLOCK: open() of a FIFO without a writer would otherwise wait forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("{}: cannot open ({})", name, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("{}: cannot stat ({})", name, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    if (S_ISDIR(st.st_mode)) fail("{}: is a directory, not a file", name);
    fail("{}: not a regular file ({})", name, kind_name(st.st_mode));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int e = errno;
    ::close(fd);
    fail("{}: cannot set blocking reads ({})", name, std::strerror(e));
  }
  return fd;
}

std::string read_file_bytes(const std::string& path, std::string_view what, size_t limit, FileKinds kinds) {
  const std::string name = named(what, path);
  int fd = -1;
  if (kinds == FileKinds::kRegular) {
    fd = open_regular_file(path, what);
  } else {
    // A blocking open: a named FIFO waits for its writer, as for any reader of it.
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open ({})", name, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      fail("{}: cannot stat ({})", name, std::strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      fail("{}: is a directory, not a file", name);
    }
  }
  std::string out;
  bool fits = false;
  try {
    fits = append_bounded(fd, out, name, limit);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (!fits) fail("{}: input is longer than the {} limit", name, format_limit(limit));
  return out;
}

std::string read_fd_bytes(int fd, std::string_view source, size_t limit) {
  std::string out;
  if (!append_bounded(fd, out, source, limit))
    fail("{}: input is longer than the {} limit", source, format_limit(limit));
  return out;
}

bool LineReader::next(std::string& line) {
  line.clear();
  const size_t n = line_no_ + 1;
  for (;;) {
    const int c = std::getc(stream_);
    if (c == EOF) {
      if (std::ferror(stream_)) {
        if (errno == EINTR) {
          std::clearerr(stream_);
          continue;
        }
        fail("{} line {}: read error ({})", source_, n, std::strerror(errno));
      }
      if (line.empty()) return false;
      break;
    }
    if (c == '\n') break;
    if (line.size() >= limit_) fail("{} line {}: longer than the {} limit", source_, n, format_limit(limit_));
    line.push_back(static_cast<char>(c));
  }
  line_no_ = n;
  return true;
}

}  // namespace minfer
