// Writing a file so that its name never shows a half-written file: the bytes go to a new
// temporary file in the same folder, which is flushed and renamed over the name once complete
// (a rename within one folder is atomic), and removed on an error, an exception or a signal.
// Used by the GGUF writer and the KV session files.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/signal_cleanup.h"

namespace minfer {

/// Checks now what AtomicFile(path) would refuse later, without creating anything: an empty
/// path, an existing output that is not a writable regular file, a folder that does not exist
/// or cannot take a new file. For outputs written at the end of a long run (--trace-out,
/// --graph-dump), so a bad name fails before the run. Throws minfer::Error naming the path and
/// the reason.
void check_output_path(const std::string& path);

/// RAII FILE* on a new temporary file beside the output, renamed over it on commit() and
/// removed otherwise: by the destructor, or by RemoveOnSignal's handler when a signal ends the
/// process while writing (core/signal_cleanup.h). The temporary file is created with mkstemp (a
/// fresh name in the output's folder, O_EXCL: never an existing file, never through a symbolic
/// link), so no other file (the input, a file that happens to be named OUT.tmp, a link target)
/// is ever truncated or removed. An output that is a symbolic link is followed to the file it
/// names: the temporary file goes beside that file and replaces it, and the link stays a link
/// (as writing through the link would do). An output that exists but is not a regular file (a folder, a
/// device, a FIFO) is refused before anything is written, and so is an existing output that is
/// not writable; an existing output's permission bits are kept. Every failure (a full disk, a
/// file-size limit, a failed rename) throws minfer::Error naming the output and the OS reason,
/// and leaves the file under the output's name as it was.
class AtomicFile {
 public:
  explicit AtomicFile(std::string final_path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* p, size_t n);
  /// Zero bytes up to the next multiple of `alignment` of the bytes written.
  void pad_to(uint64_t alignment);
  uint64_t written() const { return written_; }
  /// Asks the kernel to start writing what was written so far to the disk, without waiting
  /// (Linux sync_file_range; elsewhere nothing), so that commit()'s fsync waits only for the
  /// tail. Advisory: a failure here is ignored; commit() reports real write errors.
  void start_writeback();
  /// Flushes (fsync), sets the permissions and renames the temporary file over the output.
  void commit();

 private:
  std::string final_;   ///< the output as named (messages)
  std::string target_;  ///< final_ with its symbolic links followed: what the rename replaces
  bool keep_mode_ = false;  ///< the output existed: its permission bits are mode_
  mode_t mode_ = 0;
  std::string tmp_;
  std::FILE* f_ = nullptr;
  uint64_t written_ = 0;
  uint64_t writeback_ = 0;  ///< bytes start_writeback() has handed to the kernel
  bool committed_ = false;
  RemoveOnSignal on_signal_;  // destroyed after ~AtomicFile's unlink: disarmed once the file is gone
};

}  // namespace minfer
