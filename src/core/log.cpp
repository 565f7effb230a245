#include "core/log.h"

#include "core/printable.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "core/env.h"
#include "core/error.h"

namespace minfer {
namespace {

std::atomic<int>& level_slot() {
  static std::atomic<int> slot{static_cast<int>(log_level_from_name(env_choice("MINFER_LOG")))};
  return slot;
}

}  // namespace

LogLevel log_level_from_name(std::string_view name) {
  if (name == "error") return LogLevel::Error;
  if (name == "warn") return LogLevel::Warn;
  if (name == "info") return LogLevel::Info;
  if (name == "debug") return LogLevel::Debug;
  fail("'{}' is not a log level (error, warn, info, debug)", name);
}

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
