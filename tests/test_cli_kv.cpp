// KV state through the `minfer` command, end to end with the bundled demo model: run
// --prompt-cache (reuse, refused file = one warning and rewritten, -ro never writes), chat
// --session (restored conversation; a refused file is exit 1), /save and /load, and the context
// shift carrying a piped chat through three times its context size.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "cli_test_util.h"
#include "test_util.h"

namespace minfer {
namespace {

using Result = test::CommandResult;

std::string demo() { return std::string(MINFER_SOURCE_DIR) + "/models/minfer-demo-py-q6_K.gguf"; }

std::string base(const std::string& cmd) {
  return test::minfer_bin() + " " + cmd + " -m " + demo() + " --temp 0 -t 2 ";
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(CliKv, RunPromptCacheReusesThePrefixAndARefusedFileIsOneWarningAndRewritten) {
  const auto dir = test::temp_dir();
  const std::string pc = (dir / "pc.bin").string();
  Result r = test::run_shell(base("run") + "-n 4 -p 'def fibonacci(n):' --prompt-cache " + pc);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "reused"), 0u) << r.out;
  ASSERT_TRUE(std::filesystem::exists(pc));
  // A longer prompt with the same start prefills only the new part.
  r = test::run_shell(base("run") + "-n 4 -p 'def fibonacci(n):\n    return' --prompt-cache " + pc);
  ASSERT_EQ(r.status, 0) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("prompt (\\d+) tokens? \\((\\d+) reused\\)"))) << r.out;
  EXPECT_GE(std::stoi(m[2]), 3) << r.out;  // "def fibonacci(n" (the ":" merges with the newline)
  // -ro: used, never written.
  const std::string before = read_all(pc);
  r = test::run_shell(base("run") + "-n 4 -p 'def other(x):' --prompt-cache " + pc + " --prompt-cache-ro");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(read_all(pc), before);
  // A damaged file: one warning, the run goes on and rewrites it.
  std::string bad = before;
  bad[bad.size() / 2] ^= 0x10;
  std::ofstream(pc, std::ios::binary) << bad;
  r = test::run_shell(base("run") + "-n 4 -p 'def fibonacci(n):' --prompt-cache " + pc);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "warning: prompt cache ignored: " + pc + ": checksum mismatch"), 1u) << r.out;
  r = test::run_shell(base("run") + "-n 4 -p 'def fibonacci(n):' --prompt-cache " + pc);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "warning"), 0u) << r.out;
  EXPECT_EQ(count(r.out, "reused)"), 1u) << r.out;
  EXPECT_TRUE(test::write_temporaries(dir).empty());
}

// A cache or session file that cannot be written (its folder does not exist, the path is a
// folder) is one warning line per save; the run and the chat go on and generate.
TEST(CliKv, ASaveThatFailsIsOneWarningAndTheRunGoesOn) {
  const auto dir = test::temp_dir();
  const std::string missing = (dir / "no-such-folder" / "pc.bin").string();
  Result r = test::run_shell(base("run") + "-n 4 -p 'def fibonacci(n):' --prompt-cache " + missing);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "warning: prompt cache not saved: " + missing), 1u) << r.out;
  EXPECT_EQ(count(r.out, "generated 4 tokens"), 1u) << r.out;
  std::filesystem::create_directory(dir / "a-folder");
  const std::string folder = (dir / "a-folder").string();
  r = test::run_shell(base("run") + "-n 4 -p 'def fibonacci(n):' --prompt-cache " + folder);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "warning: prompt cache ignored: " + folder), 1u) << r.out;
  EXPECT_EQ(count(r.out, "warning: prompt cache not saved: " + folder), 1u) << r.out;
  EXPECT_EQ(count(r.out, "generated 4 tokens"), 1u) << r.out;
  EXPECT_TRUE(std::filesystem::is_directory(folder));
  r = test::run_shell("printf 'hello\nwrite a sort function\n' | " + base("chat") + "-n 4 --session " + missing);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "warning: session not saved: " + missing), 2u) << r.out;
  EXPECT_EQ(count(r.out, "generated 4 tokens"), 2u) << r.out;
}

TEST(CliKv, ChatSessionRestoresTheConversationAndARefusedFileIsExit1) {
  const auto dir = test::temp_dir();
  const std::string s = (dir / "chat.session").string();
  Result r = test::run_shell("printf 'hello\\nwrite a sort function\\n' | " + base("chat") + "-n 8 --session " + s);
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_TRUE(std::filesystem::exists(s));
  r = test::run_shell("printf 'and a test for it\\n' | " + base("chat") + "-n 8 --session " + s);
  ASSERT_EQ(r.status, 0) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("prompt (\\d+) new tokens? \\((\\d+) reused\\)"))) << r.out;
  EXPECT_GT(std::stoi(m[2]), 40) << "the first message of the second chat did not reuse the conversation: " << r.out;
  std::ofstream(dir / "bogus.session", std::ios::binary) << "MINFERKV but not really";
  r = test::run_shell("printf 'hi\\n' | " + base("chat") + "-n 4 --session " + (dir / "bogus.session").string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(count(r.out, "minfer: error: " + (dir / "bogus.session").string() + ": "), 1u) << r.out;
}

TEST(CliKv, KeepIsCheckedAgainstTheContext) {
  // A negative --keep printed CLI11's range with a 300-digit number; a --keep that leaves nothing
  // to drop turned context shift off without a word.
  Result r = test::run_shell(base("run") + "-n 4 -p 'x' --keep -1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--keep must be 0 or more, not -1"), std::string::npos) << r.out;
  EXPECT_LT(r.out.size(), 300u) << r.out;
  r = test::run_shell(base("run") + "-c 64 -n 4 -p 'x' --keep 63");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("--keep 63 leaves no tokens to drop in a context of 64"), std::string::npos) << r.out;
  r = test::run_shell(base("run") + "-c 64 -n 4 -p 'x' --keep 63 --no-context-shift");
  EXPECT_EQ(r.status, 0) << r.out;
}

TEST(CliKv, ChatSaveAndLoadCommands) {
  const auto dir = test::temp_dir();
  const std::string s = (dir / "saved.session").string();
  const Result r = test::run_shell("printf 'hello\\n/save " + s + "\\n/reset\\n/load " + s + "\\nmore\\n/load " +
                                   (dir / "missing").string() + "\\n' | " + base("chat") + "-n 6");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "(saved to " + s), 1u) << r.out;
  EXPECT_EQ(count(r.out, "(loaded " + s), 1u) << r.out;
  std::smatch m;
  const std::string after_load = r.out.substr(r.out.find("(loaded "));
  ASSERT_TRUE(std::regex_search(after_load, m, std::regex("\\((\\d+) reused\\)"))) << r.out;
  EXPECT_GT(std::stoi(m[1]), 20) << r.out;
  EXPECT_EQ(count(r.out, "missing"), 1u) << "a refused /load is one line and the chat goes on: " << r.out;
}

TEST(CliKv, ChatContextShiftCarriesAPipedChatThroughThreeTimesTheContext) {
  const auto dir = test::temp_dir();
  std::string msgs;
  for (int i = 1; i <= 12; ++i) msgs += "write a function number " + std::to_string(i) + " that adds two numbers\n";
  std::ofstream(dir / "msgs.txt") << msgs;
  const std::string in = " < " + (dir / "msgs.txt").string();
  Result r = test::run_shell(base("chat") + "-n 24 -c 160" + in);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "the context is full"), 1u) << "said once: " << r.out;
  EXPECT_EQ(count(r.out, "message not sent"), 0u) << r.out;
  // Every message was answered; the tokens processed add up to more than 3 x 160.
  int total = 0, turns = 0;
  const std::regex line("prompt (\\d+) new tokens? \\(\\d+ reused\\), [0-9.]+ t/s \\| generated (\\d+) token");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), line); it != std::sregex_iterator(); ++it, ++turns)
    total += std::stoi((*it)[1]) + std::stoi((*it)[2]);
  EXPECT_EQ(turns, 12) << r.out;
  EXPECT_GT(total, 3 * 160) << r.out;
  // --no-context-shift refuses instead (the first 6 messages already overflow).
  std::ofstream(dir / "six.txt") << msgs.substr(0, msgs.find("number 7"));
  r = test::run_shell(base("chat") + "-n 24 -c 160 --no-context-shift < " + (dir / "six.txt").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_GE(count(r.out, "message not sent"), 1u) << r.out;
  EXPECT_EQ(count(r.out, "the context is full"), 0u) << r.out;
}

}  // namespace
}  // namespace minfer
