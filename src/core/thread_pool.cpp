#include "core/thread_pool.h"

#include <algorithm>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MINFER_CPU_RELAX() _mm_pause()
#else
#define MINFER_CPU_RELAX() ((void)0)
#endif

namespace minfer {
namespace {
// Spin iterations before sleeping: ~tens of microseconds, enough to bridge two back-to-back ops.
constexpr int kSpinIterations = 20000;
// The most threads MINFER_THREADS gives (a larger value is lowered to this).
constexpr int64_t kMaxEnvThreads = 1024;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  MINFER_CHECK(n_threads >= 1 && n_threads <= 1024, "thread count {} is out of range (1..1024)", n_threads);
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run(const std::function<void(int)>& job) {
  if (n_threads_ == 1) {
    job(0);
    return;
  }
  job_ = &job;
  error_ = nullptr;
  remaining_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  try {
    job(0);
  } catch (...) {
    std::lock_guard lock(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
  int spins = 0;
  for (;;) {
    const int left = remaining_.load(std::memory_order_acquire);
    if (left == 0) break;
    if (++spins < kSpinIterations) {
      MINFER_CPU_RELAX();
    } else {
      remaining_.wait(left, std::memory_order_acquire);
    }
  }
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(int index) {
  // Start from the generation the pool was built with (0), not from a fresh load: a run()
  // issued before this thread first looks must still be seen as new work.
  uint32_t seen = 0;
  for (;;) {
    int spins = 0;
    uint32_t now;
    while ((now = generation_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpinIterations) {
        MINFER_CPU_RELAX();
      } else {
        generation_.wait(seen, std::memory_order_acquire);
      }
    }
    seen = now;
    if (stop_.load()) return;
    try {
      (*job_)(index);
    } catch (...) {
      std::lock_guard lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_one();
  }
}

int default_thread_count() {
  const int64_t v = env_int("MINFER_THREADS", 0);  // >= 0: the table's range
  if (v > 0) return static_cast<int>(std::min(v, kMaxEnvThreads));
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

int resolve_thread_count(int64_t requested, std::string_view option) {
  if (requested < 0) fail("{} {} must be positive (or 0 for the default)", option, requested);
  const unsigned hw_raw = std::thread::hardware_concurrency();
  const int64_t hw = hw_raw == 0 ? 1 : static_cast<int64_t>(hw_raw);
  const int64_t n = requested == 0 ? default_thread_count() : requested;
  // The count as the user gave it ("-t 5000", "MINFER_THREADS=5000"), not as lowered.
  const int64_t given = requested == 0 ? env_int("MINFER_THREADS", 0) : requested;
  const std::string what =
      requested == 0 ? fmt::format("MINFER_THREADS={}", given) : fmt::format("{} {}", option, given);
  if (n > hw) {
    log_warn("{} exceeds the {} hardware threads of this machine; using {}", what, hw, hw);
    return static_cast<int>(hw);
  }
  if (given > n) log_warn("{} is above the limit of {} threads; using {}", what, kMaxEnvThreads, n);
  return static_cast<int>(n);
}

}  // namespace minfer
