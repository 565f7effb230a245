// `minfer` given input sources that never end or never open: a FIFO as a model, vocabulary,
// tokenizer.json or template file is refused at once (it is not waited on); an endless prompt,
// text or chat line (/dev/zero) ends with one line naming the source and the limit, and a
// non-zero exit. Every command runs under `timeout`, so a regression shows as status 124, not as
// a hung test run.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_test_util.h"
#include "test_util.h"
#include "tokenized_model.h"

namespace minfer {
namespace {

using Result = test::CommandResult;

Result sh(const std::string& cmd) { return test::run_shell("timeout 60 " + cmd); }

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

/// One tiny model with a tokenizer per test process, removed at exit.
struct ModelDir {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("minfer_test_cli_input_model_" + std::to_string(::getpid()));
  std::string path;
  ModelDir() {
    std::filesystem::create_directories(dir);
    path = test::write_tokenized_model(test::SynthSpec{}, dir, 300).string();
  }
  ~ModelDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

const std::string& model() {
  static const ModelDir m;
  return m.path;
}

/// Runs `args` (minfer's arguments, with any redirections) and expects exit status 1 with exactly
/// one line, "minfer: error: ..." containing `message`.
void expect_one_line_error(const std::string& args, const std::string& message) {
  const Result r = sh(test::minfer_bin() + " " + args);
  EXPECT_EQ(r.status, 1) << args << "\n" << r.out.substr(0, 2000);
  EXPECT_EQ(r.out.rfind("minfer: error: ", 0), 0u) << args << "\n" << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find(message), std::string::npos) << args << "\nwanted: " << message << "\ngot: " << r.out.substr(0, 2000);
  EXPECT_EQ(lines(r.out), 1u) << args << "\n" << r.out.substr(0, 2000);
}

/// Runs `args` and expects exit status 1 with `message` as the last line ("minfer: error: ..."),
/// after at most the "minfer: loaded ..." line and the sampling seed line (the input is read once
/// the model is loaded).
void expect_error_after_loading(const std::string& args, const std::string& message) {
  const Result r = sh(test::minfer_bin() + " " + args);
  EXPECT_EQ(r.status, 1) << args << "\n" << r.out.substr(0, 2000);
  const std::string last = "minfer: error: " + message + "\n";
  EXPECT_TRUE(r.out.size() >= last.size() && r.out.compare(r.out.size() - last.size(), last.size(), last) == 0)
      << args << "\nwanted last line: " << last << "got: " << r.out.substr(0, 2000);
  EXPECT_LE(lines(r.out), 3u) << args << "\n" << r.out.substr(0, 2000);
}

std::string make_fifo(const std::filesystem::path& dir, const std::string& name) {
  const std::string p = (dir / name).string();
  EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0) << p;
  return p;
}

// Before: open() of the FIFO waited for a writer forever (the regular-file check came after it).
TEST(CliInputSources, a_fifo_given_as_a_model_or_input_file_is_refused_without_waiting_for_a_writer) {
  const std::filesystem::path dir = test::temp_dir();
  const std::string fifo = make_fifo(dir, "model.gguf");
  const std::string why = fifo + ": not a regular file (a FIFO or pipe)";
  expect_one_line_error("run -m " + fifo + " -p hi -n 1", why);
  expect_one_line_error("inspect " + fifo, why);
  expect_one_line_error("tokenize -m " + fifo + " hi", why);
  expect_one_line_error("bench -m " + fifo + " -p 1 -n 1", why);
  expect_one_line_error("quantize " + fifo + " " + (dir / "out.gguf").string() + " --type q8_0", why);
  expect_one_line_error("synth --arch qwen2 --preset tiny --type q8_0 --vocab " + fifo + " -o " +
                            (dir / "out.gguf").string(),
                        "vocab file " + fifo);
  const std::string json_fifo = make_fifo(dir, "tokenizer.json");
  expect_one_line_error("tokenize -m " + json_fifo + " hi", json_fifo + ": not a regular file (a FIFO or pipe)");
  expect_one_line_error("run -m " + model() + " -p hi -n 1 --chat --chat-template " + fifo, fifo);
  EXPECT_EQ(test::write_temporaries(dir), std::vector<std::string>{});
}

// A pipe is still a valid prompt source (`-f <(cmd)`, `-f /dev/stdin`): only the size is bounded.
TEST(CliInputSources, a_prompt_file_may_be_a_pipe) {
  const Result r = sh("bash -c '" + test::minfer_bin() + " run -m " + model() +
                      " -n 1 --temp 0 -f <(printf \"hello world\")'");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("hello world"), std::string::npos) << r.out;  // the prompt is echoed
}

// Before: these read until std::bad_alloc (or, for chat, ~2 GB and then exit 0 without a word).
TEST(CliInputSources, an_endless_prompt_file_is_refused_naming_the_file_and_the_64_MiB_limit) {
  expect_one_line_error("run -m " + model() + " -n 1 -f /dev/zero",
                        "prompt file /dev/zero: input is longer than the 64 MiB limit");
}

TEST(CliInputSources, an_endless_prompt_on_stdin_is_refused_naming_stdin_and_the_64_MiB_limit) {
  expect_error_after_loading("run -m " + model() + " -n 1 -p - < /dev/zero",
                             "stdin (-p -): input is longer than the 64 MiB limit");
}

TEST(CliInputSources, endless_text_to_tokenize_or_score_is_refused_naming_the_source_and_the_256_MiB_limit) {
  expect_one_line_error("tokenize -m " + model() + " --ids < /dev/zero", "stdin: input is longer than the 256 MiB limit");
  expect_one_line_error("tokenize -m " + model() + " --ids - < /dev/zero", "stdin: input is longer than the 256 MiB limit");
  expect_one_line_error("perplexity -m " + model() + " -f /dev/zero",
                        "text file /dev/zero: input is longer than the 256 MiB limit");
}

TEST(CliInputSources, an_endless_chat_line_ends_the_session_with_an_error_naming_the_line_and_the_limit) {
  expect_error_after_loading("chat -m " + model() + " --chat-template chatml -n 1 < /dev/zero", "stdin line 1: longer than the 1 MiB limit");
}

// Before: a line over 8 MiB ended the session with the chat template's output-limit error.
TEST(CliInputSources, a_chat_line_over_the_limit_is_named_by_its_number_after_earlier_lines_were_answered) {
  const std::filesystem::path dir = test::temp_dir();
  const std::string input = (dir / "chat.txt").string();
  {
    std::ofstream out(input, std::ios::binary);
    out << "hello\n" << std::string((1u << 20) + 1, 'a') << "\nbye\n";
  }
  const Result r = sh(test::minfer_bin() + " chat -m " + model() + " --chat-template chatml -n 1 --temp 0 < " + input);
  EXPECT_EQ(r.status, 1) << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find("minfer: error: stdin line 2: longer than the 1 MiB limit\n"), std::string::npos)
      << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find("stop: "), std::string::npos) << "the first line was answered: " << r.out.substr(0, 2000);
  EXPECT_EQ(r.out.find("template"), std::string::npos) << r.out.substr(0, 2000);
}

}  // namespace
}  // namespace minfer
