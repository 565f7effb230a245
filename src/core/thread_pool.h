// A persistent thread pool for CPU kernels: threads are created once and reused for every op,
// so a decode step with hundreds of small ops pays no thread creation. Workers spin for a
// bounded time after each job (ops arrive back to back), then sleep on a futex
// (std::atomic::wait).
//
// A parallel loop is cut into a few pieces per thread that the threads claim one at a time, so
// when the cores are shared (a server's HTTP threads, a second engine, another program) and a
// worker is not running, the threads that do run take its pieces: an op waits only for pieces
// already started, never for a thread that has not been scheduled (with one fixed range per
// thread, every op waited a whole time slice for it).
//
// A piece already started by a worker that is then descheduled still holds its loop for the
// rest of that worker's time slice. A loop whose caller waits for other threads' pieces longer
// than it worked itself (and over kStraggleNs) straggled. When a loop straggles less than
// kStraggleGapNs after the previous straggling loop ended, the cores are taken to be shared: the
// next loops run all their pieces on the caller, waking no worker, for a back-off time
// (MINFER_POOL_BACKOFF_MS, 100 ms by default, 0: never), then the workers are tried again; a
// straggle just after that backs off at once, for twice as long as the last time (up to 16x:
// under a busy competitor the workers are tried at 0.1, 0.3, 0.7 ... s instead of every
// 0.1 s, and each try costs a straggle). One
// straggle alone does not back off: on an otherwise idle VM a worker is descheduled for 1-3 ms a
// few times a second, and 100 ms on one thread costs far more than those waits (measured
// 2026-12-08: 3-18 back-offs in a 64-token decode, and 6% less median tg). The pieces and their order of
// boundaries are the same either way, so results do not change.
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

  /// Loops since construction that ran on the caller alone because of the back-off (for tests
  /// and benchmarks).
  int64_t solo_loops() const { return solo_loops_; }

  /// Runs job(thread_index) once on every thread (the caller is index 0) and returns when all
  /// have finished. An exception thrown by any thread is rethrown here (the first one).
  /// Not reentrant: a job must not call run() on the same pool.
  void run(const std::function<void(int)>& job);

  /// Splits [0, n) into contiguous pieces of at least `grain` items (MINFER_POOL_CHUNKS pieces per
  /// thread at most, 4 by default) and calls fn(begin, end, thread_index) once for each non-empty
  /// piece, on whichever thread claims it; a thread may take several pieces, one after the other.
  /// Returns when all are done. With one thread, or a single piece, fn(0, n, 0) runs on the
  /// caller. An exception thrown by fn is rethrown here (the first one; the other pieces still
  /// run). Not reentrant, like run().
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    const int64_t max_parts = grain > 0 ? (n + grain - 1) / grain : n;
    const int64_t parts = std::min<int64_t>({max_parts, int64_t{n_threads_} * chunks_per_thread_, kMaxPieces});
    if (parts <= 1 || n_threads_ == 1) {
      fn(int64_t{0}, n, 0);
      return;
    }
    auto piece = [&](int64_t p, int ith) {
      const int64_t begin = n * p / parts;
      const int64_t end = n * (p + 1) / parts;
      if (begin < end) fn(begin, end, ith);
    };
    run_pieces(parts, PieceFn{&piece, [](void* f, int64_t p, int ith) { (*static_cast<decltype(piece)*>(f))(p, ith); }});
  }

 private:
  static constexpr int64_t kMaxPieces = 0xffff;  // the ticket's 16-bit piece fields
  /// A caller's wait for other threads' pieces counts as a straggler only above this (and above
  /// the caller's own time in the loop): an idle machine's wake-up and cache-miss delays are
  /// tens of microseconds, a descheduled thread's wait is a time slice (milliseconds).
  static constexpr int64_t kStraggleNs = 200'000;
  /// Two straggles this close (from the end of one straggling loop to the start of the next) mean
  /// the cores are shared. A worker that shares its core with a busy program loses it every
  /// scheduler slice (a few milliseconds), so its straggles come well within this; an idle
  /// machine's occasional preemptions, a few a second, rarely do.
  static constexpr int64_t kStraggleGapNs = 20'000'000;
  /// A back-off that starts this soon after the previous one ended (the first straggle once the
  /// workers are back) lasts twice as long as that one, up to kMaxBackoffFactor times the base.
  static constexpr int64_t kRepeatNs = 50'000'000;
  static constexpr int64_t kMaxBackoffFactor = 16;
  /// A borrowed callable of one piece: call(obj, piece, thread_index).
  struct PieceFn {
    void* obj = nullptr;
    void (*call)(void*, int64_t, int) = nullptr;
  };
  void run_pieces(int64_t n_pieces, PieceFn fn);
  /// Runs every piece of a loop on the caller (thread index 0), in order.
  void run_pieces_solo(int64_t n_pieces, PieceFn fn);
  /// Claims and runs pieces of the current parallel loop until none is left unclaimed.
  void claim_pieces(int ith);
  /// Wakes the workers for a new job; `broadcast`: run() (every worker once), else pieces.
  void publish(bool broadcast);
  void note_error() noexcept;
  void worker_loop(int index);

  int n_threads_;
  int chunks_per_thread_;
  int64_t spin_ns_;  ///< how long a thread spins before it sleeps
  int64_t backoff_ns_;  ///< how long loops stay on the caller after a straggler (0: never)
  int64_t solo_until_ns_ = 0;  ///< loops run on the caller alone until this steady-clock time
  int64_t backoff_cur_ns_;  ///< the length of the last back-off
  int64_t last_straggle_end_ns_ = -kStraggleGapNs;  ///< when the last straggling loop ended
  int64_t solo_end_ns_ = -kRepeatNs;  ///< when the last back-off ended
  int64_t solo_loops_ = 0;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;  // run()'s job
  PieceFn pieces_{};                               // parallel_for's job
  // The words that idle workers spin on and the words that every claim writes sit on cache
  // lines of their own, so a claim does not invalidate the line the sleepers-to-be are reading.
  /// Bumped by 2 for every job; bit 0 tells its kind (1: run(), 0: pieces), so a worker that
  /// sees a value knows which job it is for.
  alignas(64) std::atomic<uint32_t> generation_{0};
  std::atomic<bool> stop_{false};
  alignas(64) std::atomic<int> remaining_{0};  // run(): workers still running the job
  /// parallel_for's claim counter: job number (bits 32..63), piece count (16..31) and the next
  /// unclaimed piece (0..15). A claim is one compare-and-swap on the whole word, so a thread that
  /// read an earlier loop's word can never claim a piece of a later one.
  alignas(64) std::atomic<uint64_t> ticket_{0};
  alignas(64) std::atomic<uint32_t> pieces_done_{0};
  uint32_t job_number_ = 0;
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
/// -1 means the default too (llama.cpp's spelling).
/// Throws minfer::Error "<option> <n> must be positive ..." for a count below -1.
int resolve_thread_count(int64_t requested, std::string_view option);

}  // namespace minfer
