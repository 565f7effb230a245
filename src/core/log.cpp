#include "core/log.h"

#include "core/printable.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "core/env.h"
#include "core/error.h"

namespace minfer {
namespace {

LogLevel level_from_env() {
  const std::string& v = env_string("MINFER_LOG");
  if (v == "error") return LogLevel::Error;
  if (v == "warn") return LogLevel::Warn;
  if (v == "info" || v.empty()) return LogLevel::Info;
  if (v == "debug") return LogLevel::Debug;
  fail("MINFER_LOG={} is not a log level (error, warn, info, debug)", v);
}

std::atomic<int>& level_slot() {
  static std::atomic<int> slot{static_cast<int>(level_from_env())};
  return slot;
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_slot().load(std::memory_order_relaxed)); }

void set_log_level(LogLevel level) { level_slot().store(static_cast<int>(level)); }

void log_line(LogLevel level, std::string_view message) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  const char* tag = level == LogLevel::Error  ? "error: "
                    : level == LogLevel::Warn ? "warning: "
                                              : "";
  // Messages quote file data and arguments (paths, metadata, tensor names): escaped so that a
  // line stays one line and cannot drive the terminal.
  const std::string safe = printable(message);
  std::fprintf(stderr, "minfer: %s%s\n", tag, safe.c_str());
}

}  // namespace minfer
