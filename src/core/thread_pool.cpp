#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <string>

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
// The most threads MINFER_THREADS gives (a larger value is lowered to this).
constexpr int64_t kMaxEnvThreads = 1024;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Waits until `ready()` holds: spins for up to `spin_ns` (checking the clock every 64 pauses),
/// then sleeps on `word` (std::atomic::wait) while it still reads the value `ready` rejected.
template <typename Word, typename Ready>
auto spin_then_wait(const std::atomic<Word>& word, int64_t spin_ns, Ready ready) {
  Word v = word.load(std::memory_order_acquire);
  if (ready(v)) return v;
  const int64_t until = spin_ns > 0 ? now_ns() + spin_ns : 0;
  for (int i = 1; spin_ns > 0; ++i) {
    MINFER_CPU_RELAX();
    v = word.load(std::memory_order_acquire);
    if (ready(v)) return v;
    if ((i & 63) == 0 && now_ns() >= until) break;
  }
  for (;;) {
    word.wait(v, std::memory_order_acquire);
    v = word.load(std::memory_order_acquire);
    if (ready(v)) return v;
  }
}

constexpr uint64_t pack_ticket(uint32_t job, uint64_t n_pieces, uint64_t next) {
  return (uint64_t{job} << 32) | (n_pieces << 16) | next;
}
}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads),
      chunks_per_thread_(static_cast<int>(env_int("MINFER_POOL_CHUNKS", 4))),
      spin_ns_(env_int("MINFER_POOL_SPIN_US", 50) * 1000),
      backoff_ns_(env_int("MINFER_POOL_BACKOFF_MS", 100) * 1'000'000),
      backoff_cur_ns_(backoff_ns_) {
  MINFER_CHECK(n_threads >= 1 && n_threads <= 1024, "thread count {} is out of range (1..1024)", n_threads);
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(2);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::publish(bool broadcast) {
  const uint32_t g = generation_.load(std::memory_order_relaxed);
  generation_.store(((g & ~1u) + 2) | (broadcast ? 1u : 0u), std::memory_order_release);
  generation_.notify_all();
}

void ThreadPool::note_error() noexcept {
  std::lock_guard lock(error_mu_);
  if (!error_) error_ = std::current_exception();
}

void ThreadPool::run(const std::function<void(int)>& job) {
  if (n_threads_ == 1) {
    job(0);
    return;
  }
  job_ = &job;
  error_ = nullptr;
  remaining_.store(n_threads_ - 1, std::memory_order_relaxed);
  publish(/*broadcast=*/true);
  try {
    job(0);
  } catch (...) {
    note_error();
  }
  spin_then_wait(remaining_, spin_ns_, [](int left) { return left == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::run_pieces(int64_t n_pieces, PieceFn fn) {
  MINFER_CHECK(n_pieces >= 1 && n_pieces <= kMaxPieces, "parallel loop of {} pieces (1..{})", n_pieces, kMaxPieces);
  if (solo_until_ns_ != 0) {
    const int64_t now = now_ns();
    if (now < solo_until_ns_) {
      run_pieces_solo(n_pieces, fn);
      return;
    }
    // The back-off is over. The cores were shared when it began, so the first straggle right
    // after it counts as the second one (see the header).
    solo_until_ns_ = 0;
    solo_end_ns_ = now;
    last_straggle_end_ns_ = now;
  }
  pieces_ = fn;
  error_ = nullptr;
  pieces_done_.store(0, std::memory_order_relaxed);
  ++job_number_;
  // Release: a thread whose claim reads this word (or a later claim's) sees pieces_ and the reset
  // counter above.
  ticket_.store(pack_ticket(job_number_, static_cast<uint64_t>(n_pieces), 0), std::memory_order_release);
  const int64_t start = backoff_ns_ > 0 ? now_ns() : 0;
  publish(/*broadcast=*/false);
  claim_pieces(0);
  const auto total = static_cast<uint32_t>(n_pieces);
  const int64_t own_done = backoff_ns_ > 0 ? now_ns() : 0;
  spin_then_wait(pieces_done_, spin_ns_, [total](uint32_t done) { return done == total; });
  if (backoff_ns_ > 0) {
    const int64_t end = now_ns(), waited = end - own_done;
    if (waited > kStraggleNs && waited > own_done - start) {
      if (start - last_straggle_end_ns_ < kStraggleGapNs) {
        // Backing off again right after a back-off ended: twice as long as the last one (up to
        // kMaxBackoffFactor times the base); else the base time.
        backoff_cur_ns_ = start - solo_end_ns_ < kRepeatNs ? std::min(backoff_cur_ns_ * 2, backoff_ns_ * kMaxBackoffFactor)
                                                           : backoff_ns_;
        solo_until_ns_ = end + backoff_cur_ns_;
      }
      last_straggle_end_ns_ = end;
    }
  }
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::run_pieces_solo(int64_t n_pieces, PieceFn fn) {
  ++solo_loops_;
  error_ = nullptr;
  for (int64_t p = 0; p < n_pieces; ++p) {
    try {
      fn.call(fn.obj, p, 0);
    } catch (...) {
      note_error();
    }
  }
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::claim_pieces(int ith) {
  uint64_t t = ticket_.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t n_pieces = (t >> 16) & 0xffff, next = t & 0xffff;
    if (next >= n_pieces) return;
    // A successful claim holds the loop open (its caller waits for this piece), so pieces_ stays
    // valid until the piece is counted done.
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    try {
      pieces_.call(pieces_.obj, static_cast<int64_t>(next), ith);
    } catch (...) {
      note_error();
    }
    if (pieces_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_pieces) pieces_done_.notify_one();
    t = ticket_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop(int index) {
  // Start from the generation the pool was built with (0), not from a fresh load: a job issued
  // before this thread first looks must still be seen as new work.
  uint32_t seen = 0;
  for (;;) {
    seen = spin_then_wait(generation_, spin_ns_, [seen](uint32_t g) { return g != seen; });
    if (stop_.load()) return;
    if ((seen & 1u) != 0) {  // run(): every worker once
      try {
        (*job_)(index);
      } catch (...) {
        note_error();
      }
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_one();
    } else {
      claim_pieces(index);
    }
  }
}

int default_thread_count() {
  const int64_t v = env_int("MINFER_THREADS", 0);  // >= 0: the table's range
  if (v > 0) return static_cast<int>(std::min(v, kMaxEnvThreads));
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

int resolve_thread_count(int64_t requested, std::string_view option) {
  if (requested < -1) fail("{} {} must be positive (or 0 or -1 for the default)", option, requested);
  if (requested == -1) requested = 0;  // llama.cpp's -t -1: the default count
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
