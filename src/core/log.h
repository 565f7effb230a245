// Logging to stderr. The level comes from MINFER_LOG (error, warn, info, debug; any case) or
// set_log_level.
// Lines are prefixed "minfer: " (warnings "minfer: warning: ") so they read well beside a
// command's own output, which goes to stdout.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace minfer {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

/// The level of a lower-case name: "error", "warn", "info" or "debug" (what env_choice returns
/// for MINFER_LOG). Throws minfer::Error naming any other name.
LogLevel log_level_from_name(std::string_view name);

LogLevel log_level();
void set_log_level(LogLevel level);
void log_line(LogLevel level, std::string_view message);

template <typename... Args>
void log_error(fmt::format_string<Args...> f, Args&&... a) {
  if (log_level() >= LogLevel::Error) log_line(LogLevel::Error, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... a) {
  if (log_level() >= LogLevel::Warn) log_line(LogLevel::Warn, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... a) {
  if (log_level() >= LogLevel::Info) log_line(LogLevel::Info, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... a) {
  if (log_level() >= LogLevel::Debug) log_line(LogLevel::Debug, fmt::format(f, std::forward<Args>(a)...));
}

}  // namespace minfer
