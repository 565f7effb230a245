// Errors: every failure in minfer is a minfer::Error (or a subclass) whose message names what was
// being done, to which file / tensor / node / request, and the offending value. Errors are thrown
// where the fact is known; callers add context with rethrow_with_context when useful.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace minfer {

/// The one exception type of the project. `what()` is a single line meant for the user.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A device (or host) allocation that could not be satisfied. Separate type so callers can tell
/// an out-of-memory from a malformed input (e.g. to print a hint about smaller contexts).
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

/// Throws minfer::Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

/// Throws minfer::Error with a fmt-formatted message when `cond` is false. For input
/// validation, not for invariants that only a bug could break (use MINFER_ASSERT for those).
/// A macro, so the message arguments are evaluated only on failure (hot paths stay cheap).
#define MINFER_CHECK(cond, ...)                     \
  do {                                              \
    if (!(cond)) ::minfer::fail(__VA_ARGS__);       \
  } while (0)

/// Internal invariant: active in every build type (never compiled out), throws with the
/// location so a bug is reported as an error instead of undefined behaviour.
#define MINFER_ASSERT(cond)                                                                   \
  do {                                                                                        \
    if (!(cond))                                                                              \
      throw ::minfer::Error(::fmt::format("internal error: {} failed at {}:{}", #cond,        \
                                          __FILE__, __LINE__));                               \
  } while (0)

}  // namespace minfer
