#include "core/signal_cleanup.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace minfer {
namespace {

// A slot's life: free -> filling (one thread copies its data in) -> armed -> free. The handler
// reads only armed slots, whose data is complete (release/acquire on the state).
enum SlotState : int { kFree = 0, kFilling = 1, kArmed = 2 };

struct Slot {
  std::atomic<int> state{kFree};
  char path[RemoveOnSignal::kMaxPathBytes + 1] = {};
};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler reads the slot states");

struct MapSlot {
  std::atomic<int> state{kFree};
  uintptr_t base = 0;
  size_t size = 0;
  char path[RemoveOnSignal::kMaxPathBytes + 1] = {};
};

Slot g_slots[RemoveOnSignal::kMaxArmed];
MapSlot g_maps[kMaxWatchedMappings];

// Async-signal-safe text output: a fixed buffer filled with strings and decimal numbers.
struct Line {
  char buf[RemoveOnSignal::kMaxPathBytes + 512];
  size_t n = 0;
  void add(const char* s) {
    while (*s != '\0' && n < sizeof buf - 1) buf[n++] = *s++;
  }
  void add(uint64_t v) {
    char digits[24];
    size_t k = 0;
    do {
      digits[k++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (k > 0 && n < sizeof buf - 1) buf[n++] = digits[--k];
  }
  void write_to(int fd) {
    buf[n++] = '\n';  // n < sizeof buf: add() leaves one byte
    size_t off = 0;
    while (off < n) {
      const ssize_t w = ::write(fd, buf + off, n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;
      off += static_cast<size_t>(w);
    }
  }
};

// Async-signal-safe only: atomic loads, unlink, write, sigaction, raise, _exit.
void on_ending_signal(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == kArmed) ::unlink(s.path);
  // si_code > 0: raised by the kernel for a fault (BUS_ADRERR for a page past the end of the
  // file), not sent by kill() or raise(), so si_addr is the faulting address.
  if (sig == SIGBUS && info != nullptr && info->si_code > 0) {
    const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
    for (MapSlot& m : g_maps) {
      if (m.state.load(std::memory_order_acquire) != kArmed) continue;
      if (addr < m.base || addr - m.base >= m.size) continue;
      Line line;
      line.add("minfer: error: ");
      line.add(m.path);
      line.add(": reading byte ");
      line.add(static_cast<uint64_t>(addr - m.base));
      line.add(" of the ");
      line.add(static_cast<uint64_t>(m.size));
      line.add(" mapped failed (the file was truncated while in use, or a read error); a model file must not be "
               "truncated or rewritten while minfer uses it");
      line.write_to(STDERR_FILENO);
      ::_exit(kExitMappedFileChanged);
    }
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  errno = saved_errno;
  // The signal is blocked while this handler runs; it is delivered again, with the default
  // action (ending the process), when the handler returns. A fault signal (SIGSEGV, SIGBUS...)
  // raised by an instruction would also come back when the instruction runs again.
  ::raise(sig);
}

void install_one(int sig, const sigset_t& mask) {
  struct sigaction old {};
  if (::sigaction(sig, nullptr, &old) != 0) return;
  // Ignored (SIG_IGN) or handled by someone else: left as it is.
  if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) return;
  struct sigaction sa {};
  sa.sa_sigaction = on_ending_signal;
  sa.sa_flags = SA_SIGINFO;
  sa.sa_mask = mask;
  ::sigaction(sig, &sa, nullptr);
}

void install_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    sigset_t mask;  // one cleanup at a time
    sigemptyset(&mask);
    for (const int sig : kEndingSignals) sigaddset(&mask, sig);
    for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) sigaddset(&mask, sig);
    for (const int sig : kEndingSignals) install_one(sig, mask);
    for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) install_one(sig, mask);
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

bool watch_mapped_file(const void* base, size_t size, const std::string& path) noexcept {
  if (base == nullptr || path.size() > RemoveOnSignal::kMaxPathBytes) return false;
  try {
    install_handlers();
  } catch (...) {  // std::call_once may throw std::system_error
    return false;
  }
  for (MapSlot& m : g_maps) {
    int expected = kFree;
    if (!m.state.compare_exchange_strong(expected, kFilling, std::memory_order_acq_rel)) continue;
    m.base = reinterpret_cast<uintptr_t>(base);
    m.size = size;
    std::memcpy(m.path, path.c_str(), path.size() + 1);
    m.state.store(kArmed, std::memory_order_release);
    return true;
  }
  return false;
}

void unwatch_mapped_file(const void* base) noexcept {
  if (base == nullptr) return;
  for (MapSlot& m : g_maps)
    if (m.state.load(std::memory_order_acquire) == kArmed && m.base == reinterpret_cast<uintptr_t>(base)) {
      m.state.store(kFree, std::memory_order_release);
      return;
    }
}

}  // namespace minfer
