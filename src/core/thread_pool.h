// A persistent thread pool for CPU kernels: threads are created once and reused for every op,
// so a decode step with hundreds of small ops pays no thread creation. Workers spin briefly
// after each job (ops arrive back to back), then sleep on a futex (std::atomic::wait).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace minfer {

class ThreadPool {
 public:
  /// `n_threads` >= 1 counts the calling thread: a pool of 4 starts 3 workers.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  /// Runs job(thread_index) once on every thread (the caller is index 0) and returns when all
  /// have finished. An exception thrown by any thread is rethrown here (the first one).
  /// Not reentrant: a job must not call run() on the same pool.
  void run(const std::function<void(int)>& job);

  /// Splits [0, n) into contiguous chunks of at least `grain` items, one range per thread at
  /// most, and calls fn(begin, end, thread_index) for each non-empty range.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    const int64_t max_parts = grain > 0 ? (n + grain - 1) / grain : n;
    const int parts = static_cast<int>(std::min<int64_t>(n_threads_, max_parts));
    if (parts <= 1) {
      fn(int64_t{0}, n, 0);
      return;
    }
    run([&](int ith) {
      if (ith >= parts) return;
      const int64_t begin = n * ith / parts;
      const int64_t end = n * (ith + 1) / parts;
      if (begin < end) fn(begin, end, ith);
    });
  }

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> remaining_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mu_;
  std::exception_ptr error_;
};

/// Default thread count: MINFER_THREADS if set and not 0 (a larger value than 1024 gives 1024),
/// else the number of online cores.
/// Throws minfer::Error naming MINFER_THREADS and its value when it is negative or not a
/// base-10 integer.
int default_thread_count();

/// The thread count a command uses for a user's request `requested` given with `option` (e.g.
/// "-t"): 0 means default_thread_count(); a count above the machine's hardware threads
/// (std::thread::hardware_concurrency) is lowered to that number with one warning on stderr,
/// because spinning workers that share cores make every parallel step wait for descheduled
/// threads. The warning names the count as given ("MINFER_THREADS=5000 exceeds the 16 hardware
/// threads of this machine; using 16"), also when MINFER_THREADS was above the 1024 cap.
/// Throws minfer::Error "<option> <n> must be positive ..." for a negative count.
int resolve_thread_count(int64_t requested, std::string_view option);

}  // namespace minfer
