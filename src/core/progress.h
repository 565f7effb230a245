// A progress bar on stderr, drawn only when stderr is a terminal (quiet otherwise, so logs and
// pipes stay clean). Thread-safe: workers may call advance() concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace minfer {

class ProgressBar {
 public:
  /// `total` is in the caller's units (bytes, tensors, ...); `label` is printed before the bar.
  ProgressBar(std::string label, uint64_t total);
  ~ProgressBar();  // finishes the line
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void advance(uint64_t amount);
  /// Replaces the text shown after the bar (e.g. the current tensor name).
  void set_detail(const std::string& detail);
  void finish();

  /// True when stderr is a terminal (and the bar will draw).
  static bool enabled();

  /// The detail text as drawn in `room` bytes (room > 0): printable() escapes control bytes and
  /// bidi controls (details are tensor names from model files), then it is cut to at most `room`
  /// bytes without splitting a UTF-8 character.
  static std::string fit_detail(const std::string& detail, int room);

 private:
  void draw(bool force);

  std::string label_;
  std::string detail_;
  uint64_t total_;
  std::atomic<uint64_t> done_{0};
  bool enabled_;
  bool finished_ = false;
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace minfer
