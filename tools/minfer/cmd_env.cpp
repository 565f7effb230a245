// `minfer env`: lists every MINFER_* environment variable, its value now and what it means, then
// the MINFER_* variables that are set but that minfer does not read (a misspelling, usually).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "commands.h"
#include "core/env.h"
#include "core/error.h"
#include "core/printable.h"

namespace minfer::cli {
namespace {

/// Why every other command would refuse the value of `v` (the check env_check makes), or "".
std::string problem(const EnvVar& v) {
  try {
    env_check_value(v);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace

void add_env_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("env", "List the MINFER_* environment variables and their values");
  cmd->callback([] {
    // name = value, whether it is set or the default, meaning; the names padded to the longest.
    int w = 0;
    for (const EnvVar& v : env_table()) w = std::max(w, static_cast<int>(std::strlen(v.name)));
    const auto unknown = env_unknown();
    for (const UnknownEnvVar& u : unknown) w = std::max(w, static_cast<int>(printable(u.name).size()));
    for (const EnvVar& v : env_table()) {
      const char* origin = std::getenv(v.name) != nullptr ? "set" : "default";
      std::printf("%-*s = %-8s  %-7s  %s\n", w, v.name, printable(env_string(v.name)).c_str(), origin, v.meaning);
      if (const std::string why = problem(v); !why.empty())
        std::printf("%-*s   invalid: %s (other commands refuse it)\n", w, "", printable(why).c_str());
    }
    for (const UnknownEnvVar& u : unknown) {
      const std::string hint = u.suggestion.empty() ? "" : "; did you mean " + u.suggestion + "?";
      std::printf("%-*s = %-8s  %-7s  unknown: minfer does not read it%s\n", w, printable(u.name).c_str(),
                  printable(u.value).c_str(), "set", hint.c_str());
    }
  });
}

}  // namespace minfer::cli
