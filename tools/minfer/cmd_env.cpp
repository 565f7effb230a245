// `minfer env`: lists every MINFER_* environment variable, its value now and what it means.
#include <cstdio>

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
  });
}

}  // namespace minfer::cli
