// Environment gates: the one table of every MINFER_* variable (name, default, meaning). Each
// variable is read once, on first use, and the answer is kept for the life of the process
// (tests that change the environment call env_reload()). Asking for a name that is not in the
// table is an internal error, so a gate cannot exist without its row.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace minfer {

/// How a variable's value is read: env_flag, env_int, or env_string (free text, or a choice
/// the reader checks).
enum class EnvKind { Flag, Int, Text };

/// One row of the table.
struct EnvVar {
  const char* name;           ///< e.g. "MINFER_NO_CUDA_GRAPH"
  const char* default_value;  ///< value used when the variable is unset ("" = unset)
  const char* meaning;        ///< one line for `minfer env` and the README
  EnvKind kind;               ///< the accessor that reads it (env_flag / env_int check it)
};

/// Every MINFER_* variable the project reads (src/core/env.cpp holds the rows).
std::span<const EnvVar> env_table();

/// The variable's value, or its default when unset. Throws minfer::Error for a name that is not
/// in the table.
const std::string& env_string(std::string_view name);

/// Boolean gate: "1", "true", "yes", "on" are true; "0", "false", "no", "off" and "" are false
/// (case-insensitive). Any other value throws minfer::Error naming the variable and the value.
bool env_flag(std::string_view name);

/// Integer gate; "" gives `fallback`. A value that is not a base-10 integer throws
/// minfer::Error naming the variable and the value.
int64_t env_int(std::string_view name, int64_t fallback);

/// Parses every variable of the table that is set, by its kind, so that a malformed value is
/// refused when a command starts rather than at its first use (which may be deep inside a run,
/// e.g. at the first CUDA matmul). Throws minfer::Error naming the first malformed variable and
/// its value, as env_flag / env_int would.
void env_check();

/// Forgets the cached values so the next read sees the current environment (tests only).
void env_reload();

}  // namespace minfer
