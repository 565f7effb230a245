// `minfer inspect`: runs the built command on files the test writes and checks what it prints.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <sys/wait.h>

#include "gguf_test_util.h"

namespace minfer::gguf {
namespace {

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

RunResult run(const std::string& args) {
  RunResult r;
  const std::string cmd = test::minfer_bin() + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "cannot run " << cmd;
    return r;
  }
  std::array<char, 4096> buf;
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::filesystem::path write_sample(const std::filesystem::path& dir) {
  GgufWriter w;
  w.set_string("general.architecture", "qwen2");
  w.set_u32("qwen2.block_count", 2);
  w.set_f32("qwen2.rope.freq_base", 1e6f);
  w.set_bool("flag", true);
  w.set_string("long", std::string(300, 'x') + "\nEND");
  w.set_string_array("tokenizer.ggml.tokens",
                     std::vector<std::string>{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"});
  w.set_i32_array("ids", std::vector<int32_t>{-1, 2});
  w.add_tensor_bytes("token_embd.weight", TensorType::Q8_0, std::vector<int64_t>{64, 3},
                     std::vector<uint8_t>(2 * 34 * 3, 1));
  w.add_tensor_bytes("output_norm.weight", TensorType::F32, std::vector<int64_t>{64},
                     std::vector<uint8_t>(256, 2));
  w.add_tensor_bytes("blk.0.ffn_up.weight", TensorType::Q8_0, std::vector<int64_t>{32, 4},
                     std::vector<uint8_t>(34 * 4, 3));
  return test::write_gguf(w, dir, "sample.gguf");
}

TEST(Inspect, JsonReportsHeaderMetadataTensorsAndTotals) {
  const auto path = write_sample(test::temp_dir());
  const RunResult r = run("inspect --json " + path.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["file"], path.string());
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["alignment"], 32);
  EXPECT_EQ(j["file_size"], std::filesystem::file_size(path));
  ASSERT_EQ(j["metadata"].size(), 7u);
  EXPECT_EQ(j["metadata"][0]["key"], "general.architecture");
  EXPECT_EQ(j["metadata"][0]["type"], "string");
  EXPECT_EQ(j["metadata"][0]["value"], "qwen2");
  EXPECT_EQ(j["metadata"][1]["value"], 2);
  EXPECT_EQ(j["metadata"][2]["value"], 1e6);
  EXPECT_EQ(j["metadata"][3]["value"], true);
  EXPECT_EQ(j["metadata"][4]["value"], std::string(300, 'x') + "\nEND");  // full in JSON
  const auto& tokens = j["metadata"][5];
  EXPECT_EQ(tokens["type"], "array");
  EXPECT_EQ(tokens["elem_type"], "string");
  EXPECT_EQ(tokens["count"], 10);
  EXPECT_EQ(tokens["head"], (nlohmann::json{"a", "b", "c", "d", "e", "f", "g", "h"}));
  EXPECT_EQ(j["metadata"][6]["head"], (nlohmann::json{-1, 2}));
  ASSERT_EQ(j["tensors"].size(), 3u);
  const auto& t0 = j["tensors"][0];
  EXPECT_EQ(t0["name"], "token_embd.weight");
  EXPECT_EQ(t0["type"], "q8_0");
  EXPECT_EQ(t0["shape"], (nlohmann::json{64, 3}));
  EXPECT_EQ(t0["bytes"], 204);
  EXPECT_EQ(t0["offset"], 0);
  EXPECT_EQ(j["tensors"][1]["offset"], 224);  // 204 padded to 32
  EXPECT_EQ(j["tensors"][2]["offset"], 480);
  EXPECT_EQ(j["totals"]["tensors"], 3);
  EXPECT_EQ(j["totals"]["bytes"], 204 + 256 + 136);
  EXPECT_EQ(j["totals"]["parameters"], 192 + 64 + 128);
  EXPECT_EQ(j["types"]["q8_0"]["tensors"], 2);
  EXPECT_EQ(j["types"]["q8_0"]["parameters"], 320);
  EXPECT_EQ(j["types"]["f32"]["bytes"], 256);
  // --full-arrays lists every element.
  const auto full = nlohmann::json::parse(run("inspect --json --full-arrays " + path.string()).out);
  EXPECT_EQ(full["metadata"][5]["values"].size(), 10u);
}

TEST(Inspect, TextViewTruncatesLongStringsAndSummarizesArrays) {
  const auto path = write_sample(test::temp_dir());
  const RunResult r = run("inspect " + path.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_CONTAINS(r.out, "version:    3");
  EXPECT_CONTAINS(r.out, "... (304 bytes)");
  EXPECT_EQ(r.out.find("END"), std::string::npos);
  EXPECT_CONTAINS(r.out, "string[10]");
  EXPECT_CONTAINS(r.out, "\"h\", ...]");
  EXPECT_CONTAINS(r.out, "[64, 3]");
  EXPECT_CONTAINS(r.out, "3 tensors, 596 bytes, 384 parameters");
}

TEST(Inspect, WorksOnAVocabOnlyFile) {
  MINFER_REQUIRE_SHARED("fixtures/tokenizer/ggml-vocab-qwen2.gguf");
  const auto path = test::shared_path("fixtures/tokenizer/ggml-vocab-qwen2.gguf");
  const RunResult r = run("inspect --json " + path.string());
  ASSERT_EQ(r.exit_code, 0) << r.out.substr(0, 500);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tensors"].size(), 0u);
  EXPECT_EQ(j["totals"]["parameters"], 0);
  bool found = false;
  for (const auto& m : j["metadata"])
    if (m["key"] == "tokenizer.ggml.tokens") found = (m["count"] == 151936);
  EXPECT_TRUE(found);
}

TEST(Inspect, AMalformedFileIsAOneLineErrorWithExitCode1) {
  const auto dir = test::temp_dir();
  const auto path = write_sample(dir);
  std::filesystem::resize_file(path, 100);
  const RunResult r = run("inspect " + path.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out.rfind("minfer: error: " + path.string() + ": ", 0), 0u) << r.out;
  EXPECT_CONTAINS(r.out, "truncated file");
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  const RunResult missing = run("inspect " + (dir / "absent.gguf").string());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_CONTAINS(missing.out, "absent.gguf: cannot open");
}

// File data reaches the terminal escaped: control characters (an OSC title, clear screen,
// colours, a carriage return) and invalid UTF-8 in key names, values and error messages.
TEST(Inspect, ControlCharactersAndInvalidUtf8FromTheFileAreEscaped) {
  const std::string evil = "\x1b]0;pwned\x07\x1b[2J\x1b[31mEVIL\r";
  GgufWriter w;
  w.set_string("general.architecture", evil);
  w.set_string("general.name", evil + "\xff\xfe");
  w.set_u32("key\xff\x1b[2J", 1);
  w.add_tensor_bytes("output_norm.weight", TensorType::F32, std::vector<int64_t>{64},
                     std::vector<uint8_t>(256, 2));
  const auto path = test::write_gguf(w, test::temp_dir(), "evil.gguf");
  RunResult r = run("inspect " + path.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\xff'), std::string::npos) << r.out;
  EXPECT_CONTAINS(r.out, "\"\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mEVIL\\r\\xff\\xfe\"");
  EXPECT_CONTAINS(r.out, "key\\xff\\x1b[2J");

  // An error that quotes the architecture value stays one escaped line.
  r = run("run -m " + path.string() + " -p hi");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  EXPECT_CONTAINS(r.out, "minfer: error: ");
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

}  // namespace
}  // namespace minfer::gguf
