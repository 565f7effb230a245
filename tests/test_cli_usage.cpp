// `minfer` usage mistakes, end to end through the built binary: each is refused with one line
// "minfer: error: ..." naming the option (or command, or file) and the wrong value, exit status 1,
// before any model is loaded. The model paths here do not exist on purpose: an error that names
// the model instead of the option shows that the option was checked too late (or not at all).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>

#include "cli_test_util.h"
#include "core/env.h"
#include "test_util.h"

namespace minfer {
namespace {

using Result = test::CommandResult;

const std::string kNoModel = "/nonexistent/minfer-test-model.gguf";

Result sh(const std::string& args) { return test::run_shell("timeout 60 " + test::minfer_bin() + " " + args); }

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

/// Runs `args` and expects exit status 1 with exactly one line, "minfer: error: " and `message` in it.
void expect_one_line_error(const std::string& args, const std::string& message) {
  const Result r = sh(args);
  EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
  EXPECT_EQ(r.out.rfind("minfer: error: ", 0), 0u) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(message), std::string::npos) << args << "\nwanted: " << message << "\ngot: " << r.out;
  EXPECT_EQ(lines(r.out), 1u) << args << "\n" << r.out;
}


TEST(CliUsage, chat_template_file_is_checked_before_the_model_loads) {
  const std::filesystem::path dir = test::temp_dir();
  const std::string missing = (dir / "missing.jinja").string();
  for (const std::string& cmd : {"run -m " + kNoModel + " -p hi --chat", "chat -m " + kNoModel}) {
    expect_one_line_error(cmd + " --chat-template " + missing,
                          "--chat-template " + missing + ": neither 'chatml' nor a readable template file");
    expect_one_line_error(cmd + " --chat-template " + dir.string(),
                          "--chat-template " + dir.string() + ": neither 'chatml' nor a readable template file (it is a directory)");
  }
  // A template that does not parse is reported before the model loads too, naming the file.
  const std::string broken = (dir / "broken.jinja").string();
  test::run_shell("printf '{%% for m in messages %%}' > " + broken);
  expect_one_line_error("run -m " + kNoModel + " -p hi --chat --chat-template " + broken, broken + ": chat template line 1: ");
}

TEST(CliUsage, synth_seed_must_be_a_whole_number_from_0_to_2_pow_64_minus_1) {
  const std::filesystem::path dir = test::temp_dir();
  const std::string synth = "synth --arch qwen2 --preset tiny --type q8_0 --vocab /nonexistent/vocab.json -o " +
                            (dir / "out.gguf").string() + " --seed ";
  expect_one_line_error(synth + "-5", "--seed -5: ");
  expect_one_line_error(synth + "-5", "negative");
  expect_one_line_error(synth + "abc", "--seed abc: ");
  expect_one_line_error(synth + "12x", "--seed 12x: ");
  expect_one_line_error(synth + "0x10", "--seed 0x10: ");  // decimal only (strtoull read this as 16)
  expect_one_line_error(synth + "18446744073709551616", "--seed 18446744073709551616: ");
  // The largest seed is accepted: the error is then the missing vocabulary file's.
  const Result r = sh(synth + "18446744073709551615");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/vocab.json"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--seed"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir / "out.gguf"));
}

// run/chat sampling seeds take the same strict form, plus -1 for a random seed; they are checked
// before the model loads (the missing model is reported only for the valid ones).
TEST(CliUsage, run_seed_is_a_whole_number_or_minus_1) {
  const std::string run = "run -m " + kNoModel + " -p hi --seed ";
  for (const char* bad : {"-5", "0x10", "+5", "1e3", "18446744073709551616", "' 5'"}) {
    const Result r = sh(run + bad);
    EXPECT_EQ(r.status, 1) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("--seed "), std::string::npos) << bad << ": " << r.out;
    EXPECT_EQ(r.out.find(kNoModel), std::string::npos) << bad << ": checked after the model load? " << r.out;
  }
  for (const char* good : {"-1", "0", "42", "18446744073709551615"}) {
    const Result r = sh(run + good);
    EXPECT_EQ(r.status, 1) << good << ": " << r.out;
    EXPECT_EQ(r.out.find("--seed"), std::string::npos) << good << ": " << r.out;
    EXPECT_NE(r.out.find(kNoModel), std::string::npos) << good << ": " << r.out;
  }
  // The usage line names the program.
  const Result h = sh("run --help");
  EXPECT_NE(h.out.find("Usage: minfer run"), std::string::npos) << h.out;
}

TEST(CliUsage, run_options_that_only_apply_to_chat_prompts_need_chat) {
  const std::string run = "run -m " + kNoModel + " -p hi ";
  expect_one_line_error(run + "--think", "--think requires --chat");
  expect_one_line_error(run + "--no-think", "--no-think requires --chat");
  expect_one_line_error(run + "--system 'be brief'", "--system requires --chat");
  expect_one_line_error(run + "--chat-template chatml", "--chat-template requires --chat");
  // With --chat they are accepted: the error is then the missing model's.
  const Result r = sh(run + "--chat --no-think --system 'be brief' --chat-template chatml");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find(kNoModel), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("requires"), std::string::npos) << r.out;
}

TEST(CliUsage, unknown_command_is_named_with_the_list_of_commands) {
  const Result r = sh("frobnicate -m x");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out.rfind("minfer: error: unknown command 'frobnicate' (commands: ", 0), 0u) << r.out;
  for (const char* name : {"run", "chat", "bench", "perplexity", "tokenize", "inspect", "quantize", "synth", "serve", "env"})
    EXPECT_NE(r.out.find(std::string(" ") + name), std::string::npos) << name << " is not listed: " << r.out;
  EXPECT_EQ(r.out.substr(r.out.size() - 2), ")\n") << r.out;
  EXPECT_EQ(lines(r.out), 1u) << r.out;
  // --version and a known command still work.
  EXPECT_EQ(sh("--version").status, 0);
  const Result env = sh("env");
  EXPECT_EQ(env.status, 0) << env.out;
  EXPECT_NE(env.out.find("MINFER_LOG"), std::string::npos) << env.out;
  // One column of values: every variable's " = " at the same place, past the longest name.
  size_t col = std::string::npos;
  for (size_t at = 0, nl; at < env.out.size(); at = nl + 1) {
    nl = env.out.find('\n', at);
    if (nl == std::string::npos) nl = env.out.size();
    const std::string line = env.out.substr(at, nl - at);
    if (line.rfind("MINFER_", 0) != 0) continue;
    const size_t eq = line.find(" = ");
    if (col == std::string::npos) col = eq;
    EXPECT_EQ(eq, col) << line;
  }
  EXPECT_NE(col, std::string::npos) << env.out;
}

TEST(CliUsage, an_option_before_the_command_is_named) {
  expect_one_line_error("-x run -m " + kNoModel, "unknown option '-x' before the command (usage: minfer COMMAND");
  expect_one_line_error("-- run -m " + kNoModel, "unknown option '--' before the command");
  expect_one_line_error("-x", "unknown option '-x' before the command");
  const Result help = sh("--help");
  EXPECT_EQ(help.status, 0) << help.out;
  EXPECT_NE(help.out.find("run"), std::string::npos) << help.out;
}

TEST(CliUsage, run_checks_its_options_before_reading_the_prompt_from_stdin) {
  // stdin is a FIFO opened read-write, so it never reaches EOF: reading it first would hang until
  // the 60 s timeout (status 124) instead of refusing the options at once.
  const std::filesystem::path dir = test::temp_dir();
  const std::string fifo = (dir / "stdin.fifo").string();
  ASSERT_EQ(test::run_shell("mkfifo " + fifo).status, 0);
  const std::string run = "run -m " + kNoModel + " -p - ";
  expect_one_line_error(run + "--chat --chat-template " + (dir / "missing.jinja").string() + " <> " + fifo,
                        "--chat-template ");
  expect_one_line_error(run + "--seed abc <> " + fifo, "--seed abc: ");
  // The model loads (and its errors come) before the prompt is read.
  expect_one_line_error(run + "<> " + fifo, kNoModel);
}

TEST(CliUsage, help_and_version_work_with_a_malformed_environment_variable) {
  for (const char* args : {"--help", "--version", "run --help"}) {
    const Result r = test::run_shell("MINFER_THREADS=abc timeout 60 " + test::minfer_bin() + " " + std::string(args));
    EXPECT_EQ(r.status, 0) << args << "\n" << r.out;
  }
}

TEST(CliUsage, a_malformed_environment_variable_is_refused_when_the_command_starts) {
  // Without the start-up check these were read only at their first use: the CUDA ones at the first
  // matmul (or never, on the CPU), MINFER_THREADS when the first thread pool is made.
  const auto with_env = [](const std::string& var, const std::string& args) {
    return test::run_shell(var + " timeout 60 " + test::minfer_bin() + " " + args);
  };
  for (const auto& [var, message] :
       {std::pair<std::string, std::string>{"MINFER_NO_MMQ=maybe", "MINFER_NO_MMQ=maybe is not a boolean"},
        {"MINFER_CUDA_MMVQ_Q6K=direct", "MINFER_CUDA_MMVQ_Q6K=direct is not an integer"},
        {"MINFER_THREADS=4x", "MINFER_THREADS=4x is not an integer"}}) {
    const Result r = with_env(var, "run -m " + kNoModel + " -p hi");
    EXPECT_EQ(r.status, 1) << var << "\n" << r.out;
    EXPECT_EQ(r.out.rfind("minfer: error: environment variable " + message, 0), 0u) << var << "\n" << r.out;
    EXPECT_EQ(lines(r.out), 1u) << var << "\n" << r.out;
  }
  // `minfer env` still lists the variables as they are set, and says which are set.
  const Result env = with_env("MINFER_NO_MMQ=maybe", "env");
  EXPECT_EQ(env.status, 0) << env.out;
  EXPECT_NE(env.out.find("maybe"), std::string::npos) << env.out;
  const auto line_of = [&](const std::string& name) {
    const size_t at = env.out.find(name + " ");
    return at == std::string::npos ? std::string() : env.out.substr(at, env.out.find('\n', at) - at);
  };
  EXPECT_NE(line_of("MINFER_NO_MMQ").find(" set "), std::string::npos) << env.out;
  EXPECT_NE(line_of("MINFER_NO_CUDA_GRAPH").find(" default "), std::string::npos) << env.out;
}

TEST(CliUsage, environment_variables_outside_their_allowed_values_are_refused_when_the_command_starts) {
  for (const auto& [var, message] :
       {std::pair<std::string, std::string>{"MINFER_LOG=verbose", "MINFER_LOG=verbose is not one of error, warn, info, debug"},
        {"MINFER_SIMD=sse9", "MINFER_SIMD=sse9 is not one of auto, scalar, avx2, avx512"},
        {"MINFER_CACHE_TYPE=q4_0", "MINFER_CACHE_TYPE=q4_0 is not one of f32, f16, q8_0"},
        {"MINFER_CUDA_MMQ_TILE=48", "MINFER_CUDA_MMQ_TILE=48 is not one of 0, 32, 64, 128"},
        {"MINFER_CUDA_ATTN_CHUNK=-1", "MINFER_CUDA_ATTN_CHUNK=-1 is out of range (allowed: 0 or more)"},
        {"MINFER_THREADS=99999999999999999999", "MINFER_THREADS=99999999999999999999 is out of range (allowed: 0 or more)"}}) {
    const Result r = test::run_shell(var + " timeout 60 " + test::minfer_bin() + " run -m " + kNoModel + " -p hi");
    EXPECT_EQ(r.status, 1) << var << "\n" << r.out;
    EXPECT_EQ(r.out, "minfer: error: environment variable " + message + "\n") << var;
  }
  // Any case is accepted, by the check and by the readers: the -t warning reads MINFER_LOG (which
  // was refused there in upper case), the engine configuration MINFER_CACHE_TYPE; the error is
  // then the missing model's.
  const Result r = test::run_shell("MINFER_LOG=DEBUG MINFER_SIMD=AVX2 MINFER_CACHE_TYPE=F16 timeout 60 " +
                                   test::minfer_bin() + " run -m " + kNoModel + " -p hi -t 100000");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("minfer: warning: -t 100000 exceeds the "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(kNoModel), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("MINFER_"), std::string::npos) << r.out;
}

// Only a real help or version request skips the check: "-h" or "--version" as an option's value
// is an argument like any other.
TEST(CliUsage, a_help_flag_given_as_a_value_does_not_skip_the_environment_check) {
  const std::string error = "minfer: error: environment variable MINFER_NO_MMQ=2 is not a boolean";
  for (const std::string& args : {std::string(" run -m ") + kNoModel + " -p -h", std::string(" run -m ") + kNoModel + " -p --version",
                                  std::string(" chat -m ") + kNoModel + " --system -h"}) {
    const Result r = test::run_shell("MINFER_NO_MMQ=2 timeout 60 " + test::minfer_bin() + args + " < /dev/null");
    EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
    EXPECT_EQ(r.out.rfind(error, 0), 0u) << args << "\n" << r.out;
  }
  const Result help = test::run_shell("MINFER_NO_MMQ=2 timeout 60 " + test::minfer_bin() + " run --help");
  EXPECT_EQ(help.status, 0) << help.out;
  EXPECT_NE(help.out.find("--prompt"), std::string::npos) << help.out;
}

/// `name` padded to the name column of `minfer env`: the longest name in the table (no unknown
/// variable set here is longer).
std::string env_name_column(const std::string& name) {
  size_t w = 0;
  for (const EnvVar& v : env_table()) w = std::max(w, std::string(v.name).size());
  return name + std::string(w > name.size() ? w - name.size() : 0, ' ');
}

TEST(CliUsage, a_misspelled_environment_variable_is_warned_about_with_the_nearest_name) {
  const std::string warning =
      "minfer: warning: environment variable MINFER_NO_CUDA_GRAPHS is unknown and ignored; did you mean "
      "MINFER_NO_CUDA_GRAPH? ('minfer env' lists the known ones)\n";
  // One warning line, then the command goes on: the error is the missing model's.
  const Result r = test::run_shell("MINFER_NO_CUDA_GRAPHS=1 timeout 60 " + test::minfer_bin() + " run -m " + kNoModel + " -p hi");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out.rfind(warning + "minfer: error: " + kNoModel, 0), 0u) << r.out;
  EXPECT_EQ(lines(r.out), 2u) << r.out;
  // `minfer env` lists it after the table, as unknown.
  const Result env = test::run_shell("MINFER_NO_CUDA_GRAPHS=1 timeout 60 " + test::minfer_bin() + " env");
  EXPECT_EQ(env.status, 0) << env.out;
  EXPECT_NE(env.out.find("\n" + env_name_column("MINFER_NO_CUDA_GRAPHS") +
                         " = 1         set      unknown: minfer does not read it; did you mean MINFER_NO_CUDA_GRAPH?\n"),
            std::string::npos)
      << env.out;
  EXPECT_EQ(env.out.find("warning"), std::string::npos) << env.out;
}

// `minfer env` lists a malformed value as set (exit 0) and says, under it, why other commands
// refuse it; a valid value gets no such line.
TEST(CliUsage, env_marks_the_values_other_commands_refuse) {
  const Result env = test::run_shell("MINFER_LOG=verbose MINFER_NO_MMQ=1 timeout 60 " + test::minfer_bin() + " env");
  EXPECT_EQ(env.status, 0) << env.out;
  EXPECT_NE(env.out.find("\n" + env_name_column("MINFER_LOG") + " = verbose   set      log level"), std::string::npos)
      << env.out;
  EXPECT_NE(env.out.find("\n" + env_name_column("") + "   invalid: environment variable MINFER_LOG=verbose is not one "
                         "of error, warn, info, debug (other commands refuse it)\n"),
            std::string::npos)
      << env.out;
  size_t invalid = 0;
  for (size_t p = env.out.find("invalid: "); p != std::string::npos; p = env.out.find("invalid: ", p + 1)) ++invalid;
  EXPECT_EQ(invalid, 1u) << env.out;
}

TEST(CliUsage, a_usage_error_points_to_the_commands_own_help) {
  expect_one_line_error("run -p hi", "(see 'minfer run --help')");
  expect_one_line_error("bench -m " + kNoModel + " --bogus", "(see 'minfer bench --help')");
  expect_one_line_error("", "(see 'minfer --help')");  // no command at all
}

// CLI11 checks required options (and converts values) before it looks at arguments nothing took:
// without the fix `minfer bench --bogus` said "--model is required".
TEST(CliUsage, an_unknown_option_is_named_before_a_missing_required_one) {
  const auto expect_error = [](const std::string& args, const std::string& line) {
    const Result r = sh(args);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_EQ(r.out, "minfer: error: " + line + "\n") << args;
  };
  expect_error("bench --bogus", "The following argument was not expected: --bogus (see 'minfer bench --help')");
  expect_error("run -x", "The following argument was not expected: -x (see 'minfer run --help')");
  expect_error("chat --bogus=3", "The following argument was not expected: --bogus=3 (see 'minfer chat --help')");
  // Before a value that does not convert, too; several are named in command-line order.
  expect_error("run -p hi --temp abc --bogus -m " + kNoModel,
               "The following argument was not expected: --bogus (see 'minfer run --help')");
  expect_error("run -p hi stray extra -m " + kNoModel,
               "The following arguments were not expected: stray extra (see 'minfer run --help')");
  // Without one, the missing option is still the error.
  expect_error("run -p hi", "--model is required (see 'minfer run --help')");
}

TEST(CliUsage, bidi_controls_in_an_echoed_argument_are_escaped) {
  // $(printf ...) puts U+202E (RIGHT-TO-LEFT OVERRIDE, UTF-8 e2 80 ae) into the argument.
  const std::string rlo = "\"$(printf 'x\\342\\200\\256y')\"";
  const std::string raw = "x\xe2\x80\xaey";
  for (const std::string& args : {rlo,                                  // an unknown command
                                  "run -m m.gguf -p hi --bogus" + rlo,   // a CLI11 usage error
                                  "run -p hi -m /nonexistent/" + rlo}) {  // a minfer::Error
    const Result r = sh(args);
    EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("x\\u202ey"), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find(raw), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(lines(r.out), 1u) << args << "\n" << r.out;
  }
}

}  // namespace
}  // namespace minfer
