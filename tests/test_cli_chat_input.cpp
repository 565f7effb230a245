// `minfer run/chat/tokenize` with hostile or oversized chat input, end to end through the built
// binary: --chat-template takes "chatml" or a template FILE in all three; a template that is too
// long to evaluate is a one-line error (not a crash); a chat message that does not fit the
// context is refused and the session goes on.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "cli_test_util.h"
#include "test_util.h"

namespace minfer {
namespace {

using Result = test::CommandResult;

Result sh(const std::string& cmd) { return test::run_shell(cmd); }

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

std::string write_file(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string vocab() { return test::shared_path("fixtures/tokenizer/ggml-vocab-qwen2.gguf").string(); }

// A tiny qwen2 model with the Qwen2 vocabulary, in this test's temporary directory.
std::string tiny_model(const std::filesystem::path& dir) {
  const std::string p = (dir / "chat_input_tiny.gguf").string();
  const Result r = sh(test::minfer_bin() + " synth --arch qwen2 --preset tiny --type q8_0 --seed 5 --vocab " +
                      vocab() + " -o " + p);
  EXPECT_EQ(r.status, 0) << r.out;
  return p;
}

const char* kChatmlJinja =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "<|im_start|>assistant\n";

TEST(CliChatInput, ChatTemplateOptionIsChatmlOrAFileInRunChatAndTokenize) {
  MINFER_REQUIRE_SHARED("fixtures/tokenizer/ggml-vocab-qwen2.gguf");
  const std::filesystem::path dir = test::temp_dir();
  const std::string bin = test::minfer_bin();
  const std::string model = tiny_model(dir);
  const std::string raising = write_file(dir, "raising.jinja", "{{ raise_exception('from the file') }}");
  const std::string good = write_file(dir, "chatml.jinja", kChatmlJinja);

  for (const std::string& cmd : {" run -m " + model + " --chat -p hi -n 2 -t 1 -c 64",
                                " tokenize -m " + model + " --chat hi"}) {
    Result r = sh(bin + cmd + " --chat-template " + raising);
    EXPECT_EQ(r.status, 1) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("minfer: error: " + raising + ": chat template line 1: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("from the file"), std::string::npos) << r.out;
    const std::string err = r.out.substr(std::min(r.out.size(), r.out.find("minfer: error:")));
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << r.out;  // one line, the last

    // Template text is not accepted in place of a file.
    r = sh(bin + cmd + " --chat-template \"{{ 'x' }}\"");
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("neither 'chatml' nor a readable template file"), std::string::npos) << r.out;

    r = sh(bin + cmd + " --chat-template " + dir.string());
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("(it is a directory)"), std::string::npos) << r.out;
  }

  Result r = sh(bin + " tokenize -m " + model + " --chat --print-prompt --chat-template " + good + " hi");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");

  r = sh("printf 'hi\\n' | " + bin + " chat -m " + model + " -n 2 -t 1 -c 64 --temp 0 --chat-template " + good);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(count(r.out, "generated 2 tokens"), 1u) << r.out;
}

TEST(CliChatInput, TooLongTemplateExpressionIsAnErrorNotACrash) {
  MINFER_REQUIRE_SHARED("fixtures/tokenizer/ggml-vocab-qwen2.gguf");
  const std::filesystem::path dir = test::temp_dir();
  std::string chain = "{{ 1";
  for (int i = 0; i < 30000; ++i) chain += "+1";
  const std::string long_expr = write_file(dir, "long_expr.jinja", chain + " }}");
  const Result r = sh(test::minfer_bin() + " tokenize -m " + vocab() + " --chat --chat-template " + long_expr + " hi");
  EXPECT_EQ(r.status, 1) << r.out.substr(0, 500);
  EXPECT_NE(r.out.find(long_expr + ": chat template line 1: expression too long"), std::string::npos)
      << r.out.substr(0, 500);
}

TEST(CliChatInput, ChatRefusesAMessageThatDoesNotFitAndKeepsGoing) {
  MINFER_REQUIRE_SHARED("fixtures/tokenizer/ggml-vocab-qwen2.gguf");
  const std::filesystem::path dir = test::temp_dir();
  const std::string bin = test::minfer_bin();
  const std::string model = tiny_model(dir);
  std::string words;
  for (int i = 0; i < 300; ++i) words += "word ";
  const std::string input = write_file(dir, "chat_input.txt", words + "\nhi\n");
  Result r = sh(bin + " chat -m " + model + " -n 2 -t 1 -c 64 --temp 0 --chat-template chatml < " + input);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("minfer: message not sent: it is "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("does not fit the context size 64 (raise it with -c)"), std::string::npos) << r.out;
  EXPECT_EQ(count(r.out, "generated 2 tokens"), 1u) << r.out;  // "hi" was answered

  // After a turn, a message too long on its own still asks for a larger -c, not /reset.
  const std::string input1 = write_file(dir, "chat_input1.txt", "hi\n" + words + "\n");
  r = sh(bin + " chat -m " + model + " -n 2 -t 1 -c 64 --temp 0 --chat-template chatml < " + input1);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("minfer: message not sent: it is "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("/reset"), std::string::npos) << r.out;

  // A conversation that outgrows the context with --no-context-shift (by default the context
  // shifts, test_cli_kv.cpp): the turn is refused with a hint to /reset, and after /reset the
  // chat continues.
  std::string turns;
  for (int i = 0; i < 12; ++i) turns += "tell me more about the weather today\n";
  const std::string input2 = write_file(dir, "chat_turns.txt", turns + "/reset\nhi\n");
  r = sh(bin + " chat -m " + model + " -n 8 -t 1 -c 96 --temp 0 --chat-template chatml --no-context-shift < " + input2);
  EXPECT_EQ(r.status, 0) << r.out;
  const size_t refused = r.out.find("the conversation with it is ");
  ASSERT_NE(refused, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("send /reset to start over", refused), std::string::npos) << r.out;
  const size_t reset = r.out.find("(conversation reset)", refused);
  ASSERT_NE(reset, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("generated", reset), std::string::npos) << "no reply after /reset:\n" << r.out;
}

// /save and /load without a file name say so (they were "unknown command" before), and the
// chat goes on to answer the next message.
TEST(CliChatInput, SaveOrLoadWithoutAFileNameAsksForOne) {
  MINFER_REQUIRE_SHARED("fixtures/tokenizer/ggml-vocab-qwen2.gguf");
  const std::filesystem::path dir = test::temp_dir();
  const std::string model = tiny_model(dir);
  const std::string input = write_file(dir, "chat_save.txt", "/save\n/load   \nhi\n");
  const Result r = sh(test::minfer_bin() + " chat -m " + model + " -n 2 -t 1 -c 64 --temp 0 --chat-template chatml < " + input);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("minfer: /save needs a file name (/save FILE)\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("minfer: /load needs a file name (/load FILE)\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("unknown command"), std::string::npos) << r.out;
  EXPECT_EQ(count(r.out, "generated 2 tokens"), 1u) << r.out;
}

}  // namespace
}  // namespace minfer
