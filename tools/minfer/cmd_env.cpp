// `minfer env`: lists every MINFER_* environment variable, its value now and what it means, then
// the MINFER_* variables that are set but that minfer does not read (a misspelling, usually).
#include <cstdio>
#include <string>

#include "commands.h"
#include "core/env.h"
#include "core/printable.h"

namespace minfer::cli {

void add_env_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("env", "List the MINFER_* environment variables and their values");
  cmd->callback([] {
    for (const EnvVar& v : env_table()) {
      std::printf("%-28s = %-8s  %s\n", v.name, printable(env_string(v.name)).c_str(), v.meaning);
    }
    for (const UnknownEnvVar& u : env_unknown()) {
      const std::string hint = u.suggestion.empty() ? "" : "; did you mean " + u.suggestion + "?";
      std::printf("%-28s = %-8s  unknown: minfer does not read it%s\n", printable(u.name).c_str(),
                  printable(u.value).c_str(), hint.c_str());
    }
  });
}

}  // namespace minfer::cli
