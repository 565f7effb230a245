// The `minfer` command end to end: a Qwen2.5-0.5B-shaped model made by `minfer synth` runs
// `minfer run` and `minfer chat` (piped stdin), and bad input gives one line and exit status 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <sys/wait.h>
#include <cstdio>
#include <string>

#include "cli_test_util.h"
#include "test_util.h"

namespace minfer {
namespace {

using Result = test::CommandResult;

Result sh(const std::string& cmd) { return test::run_shell(cmd); }

std::string vocab() { return test::shared_path("fixtures/tokenizer/ggml-vocab-qwen2.gguf").string(); }

TEST(Cli, SynthesizedQwen25HalfBRunsAndChatsEndToEnd) {
  MINFER_REQUIRE_SHARED("fixtures/tokenizer/ggml-vocab-qwen2.gguf");
  const std::string bin = test::minfer_bin();
  const std::string model = (test::temp_dir() / "q05.gguf").string();
  Result r = sh(bin + " synth --arch qwen2 --preset qwen2.5-0.5b --type q4_0 --seed 3 --vocab " + vocab() + " -o " + model);
  ASSERT_EQ(r.status, 0) << r.out;

  r = sh(bin + " run -m " + model + " -p 'The capital of France' -n 12 --temp 0 -t 2 -c 256");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("The capital of France"), std::string::npos) << r.out;  // the prompt is echoed
  EXPECT_NE(r.out.find("generated 12 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("prompt 4 tokens"), std::string::npos) << r.out;

  // Greedy generation is deterministic: the same command gives the same text.
  const Result again = sh(bin + " run -m " + model + " -p 'The capital of France' -n 12 --temp 0 -t 2 -c 256");
  const auto text = [](const std::string& s) { return s.substr(0, s.find("minfer: prompt")); };
  EXPECT_EQ(text(again.out.substr(again.out.find("The capital"))), text(r.out.substr(r.out.find("The capital"))));

  // chat from piped stdin: two turns, the second reuses the first turn's cache.
  r = sh("printf 'hello\\nand again\\n/exit\\n' | " + bin + " chat -m " + model +
         " -n 8 --temp 0 -t 2 -c 512 --chat-template chatml");
  ASSERT_EQ(r.status, 0) << r.out;
  size_t turns = 0;
  for (size_t p = r.out.find("generated"); p != std::string::npos; p = r.out.find("generated", p + 1)) ++turns;
  EXPECT_EQ(turns, 2u) << r.out;
  EXPECT_NE(r.out.find("reused)"), std::string::npos) << r.out;
  size_t stops = 0;  // each turn says why it ended, as run does
  for (size_t p = r.out.find("| stop: "); p != std::string::npos; p = r.out.find("| stop: ", p + 1)) ++stops;
  EXPECT_EQ(stops, 2u) << r.out;
  EXPECT_EQ(r.out.find(" 0 reused"), r.out.rfind(" 0 reused")) << "the second turn reused nothing:\n" << r.out;
}

TEST(Cli, BadInputIsOneLineAndExitStatusOne) {
  const std::string bin = test::minfer_bin();
  Result r = sh(bin + " run -m /nonexistent/model.gguf -p hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("minfer: error: /nonexistent/model.gguf: cannot open"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;

  // serve starts its listener before the load; a failed load must still exit at once (it hung
  // when the listener was stopped before it listened). `timeout` turns a hang into status 137.
  for (int i = 0; i < 5; ++i) {
    r = sh("timeout -s KILL 30 " + bin + " serve -m /nonexistent/model.gguf --port 0");
    EXPECT_EQ(r.status, 1) << "attempt " << i << ":\n" << r.out;
    EXPECT_NE(r.out.find("minfer: error: /nonexistent/model.gguf: cannot open"), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "the error comes before listening:\n" << r.out;
  }

  // A GPU that cannot be used is reported before the listener starts: one line, no "listening".
  // MINFER_DISABLE_CUDA=1 makes CUDA unusable on every machine and build.
  const std::string demo = test::repo_demo_model();
  for (const char* dev : {"-ngl 99", "--device cuda", "--device GPU", "--device cuda0"}) {
    r = sh("MINFER_DISABLE_CUDA=1 timeout -s KILL 30 " + bin + " serve -m " + demo + " " + dev + " --port 0");
    EXPECT_EQ(r.status, 1) << dev << ":\n" << r.out;
    EXPECT_NE(r.out.find("CUDA"), std::string::npos) << dev << ":\n" << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << dev << ":\n" << r.out;
  }
  r = sh("timeout -s KILL 30 " + bin + " serve -m " + demo + " --device foo --port 0");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;

  const std::string junk = (test::temp_dir() / "junk.gguf").string();
  sh("printf 'GGUF\\x03\\x00\\x00\\x00garbage' > " + junk);
  r = sh(bin + " run -m " + junk + " -p hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find(junk), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;

  r = sh(bin + " run -m " + junk + " -p hi --cache-type q4_0");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("KV cache type 'q4_0' is not supported"), std::string::npos) << r.out;

  r = sh(bin + " bench -m " + junk + " -o yaml");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("output format 'yaml'"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace minfer
