// Environment gates: the one table of every MINFER_* variable (name, default, meaning). Each
// variable is read once, on first use, and the answer is kept for the life of the process
// (tests that change the environment call env_reload()). Asking for a name that is not in the
// table is an internal error, so a gate cannot exist without its row.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace minfer {

/// How a variable's value is read: env_flag, env_int, or text: env_choice for a row with
/// `choices`, env_string for free text.
enum class EnvKind { Flag, Int, Text };

/// One row of the table.
struct EnvVar {
  const char* name;           ///< e.g. "MINFER_NO_CUDA_GRAPH"
  const char* default_value;  ///< value used when the variable is unset ("" = unset)
  const char* meaning;        ///< one line for `minfer env` and the README
  EnvKind kind;               ///< the accessor that reads it (env_flag / env_int check it)
  /// The values allowed, '|'-separated: for Text compared case-insensitively (an empty value
  /// is always allowed and means the default); for Int whole numbers. nullptr: any value (Text:
  /// free text, never checked; Int: any in [min, max]).
  const char* choices = nullptr;
  int64_t min = std::numeric_limits<int64_t>::min();  ///< Int: the smallest value allowed
  int64_t max = std::numeric_limits<int64_t>::max();  ///< Int: the largest value allowed
};

/// Every MINFER_* variable the project reads (src/core/env.cpp holds the rows).
std::span<const EnvVar> env_table();

/// The variable's value, or its default when unset. Throws minfer::Error for a name that is not
/// in the table.
const std::string& env_string(std::string_view name);

/// Makes the process read `value` for the variable from now on (std::nullopt: the environment's
/// value again), for command-line options that mirror one (-fa off is MINFER_CUDA_NO_FLASH_ATTN=1).
/// Call it before creating what reads the variable, never while another thread may read it.
/// Throws minfer::Error for a name that is not in the table.
void env_override(std::string_view name, std::optional<std::string> value);

/// Boolean gate: "1", "true", "yes", "on" are true; "0", "false", "no", "off" and "" are false
/// (case-insensitive). Any other value throws minfer::Error naming the variable and the value.
bool env_flag(std::string_view name);

/// Integer gate; "" gives `fallback`. A value that is not a base-10 integer, or one outside the
/// row's range or choices (a number too large for 64 bits included), throws minfer::Error
/// naming the variable, the value and what is allowed.
int64_t env_int(std::string_view name, int64_t fallback);

/// Text gate with a fixed set of values (a row with `choices`): the value in lower case, or the
/// row's default when it is unset or empty. A value that is not one of the choices (in any
/// case) throws minfer::Error naming the variable, the value and the choices.
std::string env_choice(std::string_view name);

/// A MINFER_* variable set in the environment that the table does not have (a misspelling, or
/// one that another version of minfer reads): minfer ignores it.
struct UnknownEnvVar {
  std::string name;        ///< as set, e.g. "MINFER_NO_CUDA_GRAPHS"
  std::string value;       ///< its value
  /// The table name nearest to `name` in upper case (at most 3 edits, and fewer than half the
  /// length of the part after "MINFER_"; on a tie the first by name), or "" when none is that near.
  std::string suggestion;
};

/// Every variable of the environment whose name starts with "MINFER_" (in any case) and is not
/// in the table, sorted by name. MINFER_CUDA_ARCHS, which the build scripts read, is not one.
std::vector<UnknownEnvVar> env_unknown();

/// The warning for an unknown variable, one line without the "minfer: warning: " prefix, e.g.
/// "environment variable MINFER_NO_CUDA_GRAPHS is unknown and ignored; did you mean
/// MINFER_NO_CUDA_GRAPH? ('minfer env' lists the known ones)".
std::string env_unknown_message(const UnknownEnvVar& v);

/// Parses every variable of the table that is set, by its kind (flags, integers with their
/// ranges, text with its choices; free text is not checked), so that a malformed value is
/// refused when a command starts rather than at its first use (which may be deep inside a run,
/// e.g. at the first CUDA matmul). Throws minfer::Error naming the first malformed variable, its
/// value and what is allowed, as env_flag / env_int / env_choice would. Then logs one warning
/// (env_unknown_message) for each unknown MINFER_* variable; those never fail.
void env_check();

/// Parses the value of one table variable by its kind, as env_check does for each one that is
/// set (flags, integers with their ranges, text with its choices; free text is not parsed).
/// Throws the accessor's minfer::Error for a malformed value.
void env_check_value(const EnvVar& v);

/// Forgets the cached values so the next read sees the current environment (tests only).
void env_reload();

}  // namespace minfer
