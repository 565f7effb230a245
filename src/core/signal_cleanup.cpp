#include "core/signal_cleanup.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace minfer {
namespace {

// A slot's life: free -> filling (one thread copies its path in) -> armed -> free. The handler
// reads only armed slots, whose path is complete (release/acquire on the state).
enum SlotState : int { kFree = 0, kFilling = 1, kArmed = 2 };

struct Slot {
  std::atomic<int> state{kFree};
  char path[RemoveOnSignal::kMaxPathBytes + 1] = {};
};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler reads the slot states");

Slot g_slots[RemoveOnSignal::kMaxArmed];

// Ctrl-C, kill, a closed terminal or SSH session, Ctrl-\, and a file-size limit (ulimit -f): each
// ends the process by default without running destructors.
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGXFSZ};

// Async-signal-safe only: atomic loads, unlink, sigaction, raise.
void remove_armed_files(int sig) {
  const int saved_errno = errno;
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == kArmed) ::unlink(s.path);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  errno = saved_errno;
  // The signal is blocked while this handler runs; it is delivered again, with the default
  // action (ending the process), when the handler returns.
  ::raise(sig);
}

void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const int sig : kSignals) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0) continue;
      // Ignored (SIG_IGN) or handled by someone else: left as it is.
      if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;
      struct sigaction sa {};
      sa.sa_handler = remove_armed_files;
      sigemptyset(&sa.sa_mask);
      for (const int other : kSignals) sigaddset(&sa.sa_mask, other);  // one cleanup at a time
      ::sigaction(sig, &sa, nullptr);
    }
  });
}

}  // namespace

void RemoveOnSignal::arm(const std::string& path) {
  disarm();
  MINFER_CHECK(path.size() <= kMaxPathBytes,
               "{}: the path is too long ({} bytes, at most {}) to be removed on a signal", path, path.size(),
               kMaxPathBytes);
  install_handlers();
  for (size_t i = 0; i < kMaxArmed; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kFilling, std::memory_order_acq_rel)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(kArmed, std::memory_order_release);
    slot_ = static_cast<int>(i);
    return;
  }
  fail("{}: cannot arm its removal on a signal: {} files are being written at once already", path, kMaxArmed);
}

void RemoveOnSignal::disarm() noexcept {
  if (slot_ < 0) return;
  g_slots[slot_].state.store(kFree, std::memory_order_release);
  slot_ = -1;
}

}  // namespace minfer
