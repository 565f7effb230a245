#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/read_file.h"
#include "core/signal_cleanup.h"

namespace minfer {

// The file must not be truncated or rewritten while it is mapped: a read past a truncation ends
// the process with one line naming the file and exit status 74 (watch_mapped_file,
// docs/adr/0005-model-files-must-not-change-while-mapped.md). A FIFO is refused without waiting
// for a writer (open_regular_file).
MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = open_regular_file(path, "");  // refuses FIFOs, devices and folders without blocking
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(e));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    // Shared and read-only: the pages are the page cache's, shared with every other reader of the
    // file. MAP_PRIVATE would not help: its pages not yet copied still follow the file, and a
    // page past a truncation faults the same (docs/adr/0005-model-files-must-not-change-while-mapped.md).
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      fail("{}: cannot mmap {} bytes: {}", path, size_, std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
    watch_mapped_file(data_, size_, path_);  // a fault after a truncation names the file
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  unwatch_mapped_file(data_);
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}  // the watch is keyed by the address: it moves along

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unwatch_mapped_file(data_);
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace minfer
