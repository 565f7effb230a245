// Removing half-written temporary files when the process is ended by Ctrl-C (SIGINT), a plain
// kill (SIGTERM), a closed terminal (SIGHUP), Ctrl-\ (SIGQUIT) or a file-size limit (SIGXFSZ).
// Exceptions and normal returns are handled by the owners' destructors; these signals would
// otherwise end the process without running them and leave the file behind.
#pragma once

#include <cstddef>
#include <string>

namespace minfer {

/// While armed, the file at a path is removed (unlink) if the process receives SIGINT, SIGTERM,
/// SIGHUP, SIGQUIT or SIGXFSZ; the signal then ends the process with its default action, so the
/// exit status still says which signal it was (a shell shows 130 / 143 for SIGINT / SIGTERM).
///
/// The handler is installed for a signal on the first arm() only when that signal's disposition
/// is the default one: a signal the process ignores (SIG_IGN, e.g. SIGINT of a background job
/// started by a non-interactive shell) stays ignored, and a handler installed by a host program
/// is left in place (the host then owns the cleanup). The handler only calls async-signal-safe
/// functions: it reads paths from static buffers and calls unlink(), sigaction() and raise().
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

}  // namespace minfer
