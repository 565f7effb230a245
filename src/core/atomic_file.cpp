#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace minfer {

namespace {

/// `path` with its symbolic links followed to the file they name (which may not exist yet), so
/// that the rename replaces that file and the links stay links. At most 40 links (the kernel's
/// MAXSYMLINKS); a longer chain (or a loop) is left to the rename, which then replaces the link.
std::string follow_links(const std::string& path) {
  std::filesystem::path p = path;
  for (int i = 0; i < 40; ++i) {
    std::error_code ec;
    if (!std::filesystem::is_symlink(std::filesystem::symlink_status(p, ec)) || ec) return p.string();
    const std::filesystem::path t = std::filesystem::read_symlink(p, ec);
    if (ec) return p.string();
    p = t.is_absolute() ? t : p.parent_path() / t;
  }
  return path;
}

}  // namespace

void check_output_path(const std::string& path) {
  if (path.empty()) fail("cannot write a file with an empty path");
  const std::string target = follow_links(path);
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) fail("{}: exists and is not a regular file (a folder, device or pipe): not overwritten", path);
    if (::access(target.c_str(), W_OK) != 0) fail("{}: exists and is not writable ({})", path, std::strerror(errno));
  }
  const size_t slash = target.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : target.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0) fail("{}: its folder {} cannot be used: {}", path, dir, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) fail("{}: {} is not a folder", path, dir);
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail("{}: cannot create a file in {}: {}", path, dir, std::strerror(errno));
  // What the write will do: a new file in that folder (root passes access() where the file
  // system still refuses, e.g. /proc).
  std::string probe = (dir == "/" ? std::string() : dir) + "/.minfer-write-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) fail("{}: cannot create a file in {}: {}", path, dir, std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

AtomicFile::AtomicFile(std::string final_path) : final_(std::move(final_path)) {
  if (final_.empty()) fail("cannot write a file with an empty path");
  target_ = follow_links(final_);
  struct stat st {};
  if (::stat(target_.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      fail("{}: exists and is not a regular file (a folder, device or pipe): not overwritten", final_);
    // Replaced by a rename, which only needs the folder writable: refuse what an open for
    // writing would refuse, and keep the file's permissions.
    if (::access(target_.c_str(), W_OK) != 0)
      fail("{}: exists and is not writable ({}): not overwritten", final_, std::strerror(errno));
    keep_mode_ = true;
    mode_ = st.st_mode & 07777;
  }
  const size_t slash = target_.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : target_.substr(0, slash + 1);
  std::string templ = (slash == std::string::npos ? std::string() : dir) + ".minfer-write-XXXXXX";
  const int fd = ::mkstemp(templ.data());
  if (fd < 0) fail("{}: cannot create a temporary file in {}: {}", final_, dir, std::strerror(errno));
  tmp_ = templ;
  try {
    on_signal_.arm(tmp_);  // a signal that ends the process removes it too
  } catch (...) {
    ::close(fd);
    ::unlink(tmp_.c_str());
    throw;
  }
  f_ = ::fdopen(fd, "wb");
  if (!f_) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp_.c_str());
    fail("{}: cannot open {}: {}", final_, tmp_, std::strerror(e));
  }
}
AtomicFile::~AtomicFile() {
  if (f_) std::fclose(f_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, f_) != n)
    fail("{}: write failed after {} bytes: {}", final_, written_, std::strerror(errno));
  written_ += n;
}
void AtomicFile::pad_to(uint64_t alignment) {
  static const uint8_t zeros[256] = {};
  while (written_ % alignment != 0) {
    const uint64_t n = std::min<uint64_t>(alignment - written_ % alignment, sizeof zeros);
    write(zeros, static_cast<size_t>(n));
  }
}

void AtomicFile::start_writeback() {
#ifdef __linux__
  if (written_ == writeback_ || std::fflush(f_) != 0) return;
  // SYNC_FILE_RANGE_WRITE starts the writeback of dirty pages in the range and returns.
  (void)::sync_file_range(::fileno(f_), static_cast<off_t>(writeback_), static_cast<off_t>(written_ - writeback_),
                          SYNC_FILE_RANGE_WRITE);
  writeback_ = written_;
#endif
}

void AtomicFile::commit() {
  if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0)
    fail("{}: cannot flush {}: {}", final_, tmp_, std::strerror(errno));
  // mkstemp makes the file 0600; give it the replaced file's permissions, else those a plain
  // fopen would give (0666 & ~umask).
  mode_t mode = mode_;
  if (!keep_mode_) {
    const mode_t mask = ::umask(0);  // umask can only be read by setting it
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  if (::fchmod(::fileno(f_), mode) != 0)
    fail("{}: cannot set the permissions of {}: {}", final_, tmp_, std::strerror(errno));
  const int rc = std::fclose(f_);
  f_ = nullptr;
  if (rc != 0) fail("{}: cannot close {}: {}", final_, tmp_, std::strerror(errno));
  if (std::rename(tmp_.c_str(), target_.c_str()) != 0)
    fail("{}: cannot rename {} to it: {}", final_, tmp_, std::strerror(errno));
  committed_ = true;
  on_signal_.disarm();
}


}  // namespace minfer
