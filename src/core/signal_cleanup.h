// What happens when a signal ends the process. Two jobs, one handler for every signal whose
// default action ends the process (signal(7): SIGHUP SIGINT SIGQUIT SIGILL SIGTRAP SIGABRT SIGBUS
// SIGFPE SIGUSR1 SIGSEGV SIGUSR2 SIGPIPE SIGALRM SIGTERM SIGSTKFLT SIGXCPU SIGXFSZ SIGVTALRM SIGPROF
// SIGIO SIGPWR SIGSYS and the real-time signals; SIGKILL cannot be caught):
//  - half-written temporary files are removed (RemoveOnSignal). Exceptions and normal returns are
//    handled by the owners' destructors; a signal would otherwise end the process without running
//    them and leave the file behind.
//  - a SIGBUS raised by reading a mapped model file that was truncated while in use becomes one
//    line naming the file and exit status kExitMappedFileChanged (watch_mapped_file), not a bare
//    "Bus error" (docs/adr/0005-model-files-must-not-change-while-mapped.md).
#pragma once

#include <csignal>
#include <cstddef>
#include <string>

namespace minfer {

/// Every signal whose default action ends the process, as listed above (the real-time signals
/// SIGRTMIN..SIGRTMAX are not in this list: they are numbered at run time). Exposed for tests.
inline constexpr int kEndingSignals[] = {SIGHUP,  SIGINT,  SIGQUIT,   SIGILL,  SIGTRAP, SIGABRT,
                                          SIGBUS,  SIGFPE,  SIGUSR1,   SIGSEGV, SIGUSR2, SIGPIPE,
                                          SIGALRM, SIGTERM, SIGSTKFLT, SIGXCPU, SIGXFSZ, SIGVTALRM,
                                          SIGPROF, SIGIO,   SIGPWR,    SIGSYS};

/// Exit status of a process whose read of a mapped file faulted because the file shrank under
/// the mapping: sysexits.h's EX_IOERR ("an error occurred while doing I/O on some file").
inline constexpr int kExitMappedFileChanged = 74;

/// While armed, the file at a path is removed (unlink) if the process receives a signal whose
/// default action ends it (see above); the signal then ends the process with its default action,
/// so the exit status still says which signal it was (a shell shows 130 / 143 for SIGINT /
/// SIGTERM). A SIGBUS inside a watched mapping (watch_mapped_file) removes the files too, then
/// exits with kExitMappedFileChanged.
///
/// The handler is installed for a signal on the first arm() (of either class) only when that signal's disposition
/// is the default one: a signal the process ignores (SIG_IGN, e.g. SIGINT of a background job
/// started by a non-interactive shell) stays ignored, and a handler installed by a host program
/// is left in place (the host then owns the cleanup). The handler only calls async-signal-safe
/// functions: it reads paths from static buffers and calls unlink(), write(), sigaction(),
/// raise() and _exit().
///
/// Up to kMaxArmed paths can be armed at once (one per file being written, across threads).
/// A signal in the microseconds between creating a file and arming its path is not covered.
class RemoveOnSignal {
 public:
  static constexpr size_t kMaxArmed = 32;
  /// Longest path that can be armed, in bytes (PATH_MAX - 1 on Linux: longer paths cannot be
  /// created in the first place).
  static constexpr size_t kMaxPathBytes = 4095;

  RemoveOnSignal() = default;
  /// Arms `path` at once (see arm()).
  explicit RemoveOnSignal(const std::string& path) { arm(path); }
  /// Disarms.
  ~RemoveOnSignal() { disarm(); }
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;

  /// Registers `path` (copied) for removal on those signals, replacing the path this object
  /// had armed. Throws minfer::Error naming the path when it is longer than kMaxPathBytes or
  /// when kMaxArmed paths are already armed.
  void arm(const std::string& path);
  /// Forgets the path (call it once the file is renamed or removed). No effect when not armed.
  void disarm() noexcept;
  bool armed() const { return slot_ >= 0; }

 private:
  int slot_ = -1;  // index into the static table, -1 when not armed
};

/// Most mappings watched at once by watch_mapped_file.
inline constexpr size_t kMaxWatchedMappings = 64;

/// Watches the mapping [base, base + size) of `path`: while watched, a SIGBUS whose fault address
/// lies in it is reported as one line on stderr, "minfer: error: <path>: reading byte <offset>
/// of the <size> mapped failed (the file was truncated while in use, or a read error); a model
/// file must not be truncated or rewritten while minfer uses it", and the process exits with
/// kExitMappedFileChanged (after removing the files armed by RemoveOnSignal). Any other SIGBUS
/// keeps its default action. MappedFile watches every mapping it makes.
///
/// Returns false, and watches nothing, when kMaxWatchedMappings mappings are watched already or
/// the path is longer than RemoveOnSignal::kMaxPathBytes (such a path cannot be opened anyway);
/// a fault in that mapping ends the process with SIGBUS as before. Never throws.
bool watch_mapped_file(const void* base, size_t size, const std::string& path) noexcept;

/// Stops watching the mapping that starts at `base` (call it before munmap). No effect when that
/// mapping is not watched.
void unwatch_mapped_file(const void* base) noexcept;

}  // namespace minfer
