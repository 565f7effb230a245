// `minfer` commands given out-of-range options or unusable files: each is refused with one line
// naming the option or file and the wrong value (exit status 1), or, for a thread count above
// the machine's, capped with a warning. Runs the built binary on a tiny tokenized model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <tuple>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf_test_util.h"
#include "cli_test_util.h"
#include "test_util.h"
#include "tokenized_model.h"

namespace minfer {
namespace {

using Result = test::CommandResult;

Result sh(const std::string& cmd) { return test::run_shell("timeout 120 " + cmd); }

size_t lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

/// One tiny model with a tokenizer, written once per test process (ctest runs the tests of
/// this file in parallel processes, so the folder is named by the process id) and removed at exit.
struct ModelDir {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("minfer_test_cli_limits_model_" + std::to_string(::getpid()));
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

/// Runs `args` and expects exit status 1 with exactly one line containing `message`.
void expect_one_line_error(const std::string& args, const std::string& message) {
  const Result r = sh(test::minfer_bin() + " " + args);
  EXPECT_EQ(r.status, 1) << args << "\n" << r.out;
  EXPECT_NE(r.out.find("minfer: error: "), std::string::npos) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(message), std::string::npos) << args << "\nwanted: " << message << "\ngot: " << r.out;
  EXPECT_EQ(lines(r.out), 1u) << args << "\n" << r.out;
}

TEST(CliLimits, huge_context_is_refused_up_front_naming_c_and_the_kv_cache_size) {
  const std::string run = "run -m " + model() + " -p hi -n 2 -t 1 ";
  expect_one_line_error(run + "-c 2147483647", "context 2147483647 (-c) needs ");
  expect_one_line_error(run + "-c 2147483647", "GiB of KV cache");
  expect_one_line_error(run + "-c 4000000000", "context size 4000000000 (-c) is larger than the largest position");
  expect_one_line_error(run + "-c 9223372036854775807", "context size 9223372036854775807 (-c) is larger");
}

TEST(CliLimits, thread_count_above_the_hardware_is_capped_with_a_warning) {
  const Result r = sh(test::minfer_bin() + " run -m " + model() + " -p hi -n 4 --temp 0 -c 64 -t 1000");
  ASSERT_EQ(r.status, 0) << r.out;
  const size_t warned = r.out.find("-t 1000 exceeds the ");
  ASSERT_NE(warned, std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("-t 1000 exceeds the ", warned + 1), std::string::npos) << "warned twice:\n" << r.out;
  EXPECT_NE(r.out.find("generated "), std::string::npos) << r.out;
  expect_one_line_error("run -m " + model() + " -p hi -n 2 -t -3", "-t -3 must be positive (or 0 or -1 for the default)");
}

TEST(CliLimits, bad_sampling_and_thinking_options_fail_before_the_model_loads) {
  // One line: no "loaded ..." line before the error.
  expect_one_line_error("run -m " + model() + " -p hi --temp nan", "temperature nan is not finite");
  expect_one_line_error("run -m " + model() + " -p hi -u -1", "-u/--ubatch-size -1 must be positive");
  expect_one_line_error("run -m " + model() + " -p hi --top-p -1", "top-p -1 is not in [0, 1]");
  expect_one_line_error("run -m " + model() + " -p hi --chat --think --no-think", "think");
  expect_one_line_error("chat -m " + model() + " --top-p 2", "top-p 2 is not in [0, 1]");
  expect_one_line_error("chat -m " + model() + " --think --no-think", "think");
}

TEST(CliLimits, usage_errors_are_one_line_errors_with_status_1) {
  expect_one_line_error("run -p hi", "--model is required");
  expect_one_line_error("run -m " + model() + " --no-such-option", "--no-such-option");
  expect_one_line_error("bench -m " + model() + " -r", "-r");
  const Result help = sh(test::minfer_bin() + " run --help");
  EXPECT_EQ(help.status, 0) << help.out;
  EXPECT_NE(help.out.find("Usage"), std::string::npos) << help.out;
}

TEST(CliLimits, bench_with_an_unusable_device_fails_before_running_anything) {
  // MINFER_DISABLE_CUDA=1 makes CUDA unusable on every machine (with or without a GPU, with or
  // without CUDA built in): the error comes before the CPU configuration runs, so no table.
  const Result r = sh("env MINFER_DISABLE_CUDA=1 " + test::minfer_bin() + " bench -m " + model() +
                      " -p 8 -n 2 -r 1 -t 1 --device cpu,cuda");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("minfer: error: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CUDA"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("t/s"), std::string::npos) << "a configuration ran before the error:\n" << r.out;
  EXPECT_EQ(lines(r.out), 1u) << r.out;
}

TEST(CliLimits, bench_with_a_bad_model_in_the_list_fails_before_running_anything) {
  const Result r = sh(test::minfer_bin() + " bench -m " + model() + ",/nonexistent/m.gguf -p 8 -n 2 -r 1 -t 1 -o jsonl");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("minfer: error: /nonexistent/m.gguf"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("avg_ts"), std::string::npos) << "a model ran before the error:\n" << r.out;
  EXPECT_EQ(lines(r.out), 1u) << r.out;
}

TEST(CliLimits, a_bad_vocabulary_is_a_one_line_error_of_the_commands_that_load_the_model) {
  // The tokenizer is built on its own thread while the weights are packed: its error must still
  // be the one line, before anything is logged or run.
  const std::filesystem::path dir = test::temp_dir();
  const std::string bad = test::write_bad_vocab_model(dir).string();
  const std::string message = bad + ": unknown pre-tokenizer tokenizer.ggml.pre = 'bogus'";
  expect_one_line_error("run -m " + bad + " -p hi -n 2 -t 1", message);
  const std::filesystem::path text = dir / "text.txt";
  sh("printf 'some words to score\\n' > " + text.string());
  expect_one_line_error("perplexity -m " + bad + " -f " + text.string() + " -t 1", message);
  expect_one_line_error("bench -m " + bad + " -p 8 -n 2 -r 1 -t 1", message);
  expect_one_line_error("tokenize -m " + bad + " hi", message);
}

TEST(CliLimits, bench_pg_takes_a_pair_and_reports_it) {
  const Result r = sh(test::minfer_bin() + " bench -m " + model() + " -p 0 -n 0 -pg 8,2 -pg 4,1 -r 1 -t 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("pp8+tg2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pp4+tg1"), std::string::npos) << r.out;
}

// -npl N: N sequences decoded together; t/s counts every sequence's tokens, and more sequences
// than the KV cache's sequence ids is a one-line error before any run.
TEST(CliLimits, bench_npl_decodes_sequences_together_and_refuses_too_many) {
  const Result r = sh(test::minfer_bin() + " bench -m " + model() + " -p 0 -n 3 -d 4 -npl 1,3 -r 1 -t 1 -o jsonl");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"n_parallel\":3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"n_parallel\":1"), std::string::npos) << r.out;
  const Result md = sh(test::minfer_bin() + " bench -m " + model() + " -p 0 -n 2 -npl 2 -r 1 -t 1");
  ASSERT_EQ(md.status, 0) << md.out;
  EXPECT_NE(md.out.find("tg2 x2"), std::string::npos) << md.out;
  expect_one_line_error("bench -m " + model() + " -p 0 -n 2 -npl 65", "-npl 65");
}

// --n-verify K: forwards of K tokens with every row's logits after the depth, once per depth
// whatever -npl says; K below 1 is a one-line error.
TEST(CliLimits, bench_verify_times_forwards_of_k_tokens) {
  const Result r =
      sh(test::minfer_bin() + " bench -m " + model() + " -p 0 -n 0 --n-verify 1,3 -d 4 -npl 1,2 -r 1 -t 1 -o jsonl");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"n_verify\":3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"test\":\"v1 @ d4\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"test\":\"v3 @ d4\""), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"n_parallel\":2"), std::string::npos) << r.out;
  expect_one_line_error("bench -m " + model() + " -p 0 -n 0 --n-verify 0", "--n-verify");
}

// --profile (and MINFER_OP_TIMING=1) print the op table for prefill and decode when the command
// ends; --graph-dump refuses a file name that is neither .dot nor .json.
TEST(CliLimits, bench_profile_prints_the_op_table_and_graph_dump_checks_the_extension) {
  Result r = sh(test::minfer_bin() + " bench -m " + model() + " -p 8 -n 4 -r 1 -t 1 --profile");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("op timing, prefill:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("op timing, decode:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(outside the nodes)"), std::string::npos) << r.out;
  r = sh("env MINFER_OP_TIMING=1 " + test::minfer_bin() + " bench -m " + model() + " -p 0 -n 2 -r 1 -t 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("op timing, decode:"), std::string::npos) << r.out;
  r = sh(test::minfer_bin() + " bench -m " + model() + " -p 0 -n 2 -r 1 -t 1");
  EXPECT_EQ(r.out.find("op timing"), std::string::npos) << r.out;
  expect_one_line_error("bench -m " + model() + " -p 0 -n 1 --graph-dump g.svg", "g.svg");
}

// The observability files are checked before any work: a folder that does not exist, one file
// for both --trace-out and --graph-dump (however spelled), MINFER_GRAPH_DUMP's bad folder (the
// error names the variable); --n-verify has a ceiling; --profile under MINFER_TRACE=1 still times
// the nodes.
TEST(CliLimits, observability_files_are_checked_before_the_run) {
  const std::string bench = "bench -m " + model() + " -p 0 -n 2 -r 1 -t 1 ";
  expect_one_line_error(bench + "--trace-out /nonexistent-minfer-dir/t.json", "/nonexistent-minfer-dir/t.json");
  expect_one_line_error(bench + "--graph-dump /nonexistent-minfer-dir/g.dot", "/nonexistent-minfer-dir/g.dot");
  expect_one_line_error(bench + "--trace-out ''", "--trace-out needs a file name");
  const std::string dir = test::temp_dir().string();
  expect_one_line_error(bench + "--trace-out " + dir + "/same.json --graph-dump " + dir + "/./same.json",
                        "name the same file");
  Result r = sh("env MINFER_GRAPH_DUMP=/nonexistent-minfer-dir/g.json " + test::minfer_bin() + " " + bench);
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("MINFER_GRAPH_DUMP: /nonexistent-minfer-dir/g.json"), std::string::npos) << r.out;
  expect_one_line_error("bench -m " + model() + " -p 0 -n 0 --n-verify 100000", "--n-verify 100000");
  r = sh("env MINFER_TRACE=1 " + test::minfer_bin() + " " + bench + "--profile");
  ASSERT_EQ(r.status, 0) << r.out;
  const size_t table = r.out.find("op timing, decode:");
  ASSERT_NE(table, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MatMul", table), std::string::npos) << r.out.substr(table);
}

// bench's KV type follows MINFER_CACHE_TYPE (any case) when -ctk is not given, as run's does.
TEST(CliLimits, bench_takes_the_cache_type_from_the_environment_unless_ctk_is_given) {
  const std::string cmd = " " + test::minfer_bin() + " bench -m " + model() + " -p 0 -n 1 -r 1 -t 1 -o jsonl";
  Result r = sh("env MINFER_CACHE_TYPE=Q8_0" + cmd);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"type_k\":\"q8_0\""), std::string::npos) << r.out;
  r = sh("env MINFER_CACHE_TYPE=q8_0" + cmd + " -ctk f32");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"type_k\":\"f32\""), std::string::npos) << r.out;
  r = sh("env -u MINFER_CACHE_TYPE" + cmd);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"type_k\":\"f16\""), std::string::npos) << r.out;
}

TEST(CliLimits, bench_rejects_malformed_lists_naming_the_option_and_the_whole_value) {
  const std::string bench = "bench -m " + model() + " -r 1 -t 1 ";
  expect_one_line_error(bench + "-pg 8,x", "-pg value 'x' is not an integer (in '8,x')");
  expect_one_line_error(bench + "-pg 8,2,3", "-pg value '8,2,3' must be P,N");
  expect_one_line_error(bench + "-pg 8", "-pg value '8' must be P,N");
  expect_one_line_error(bench + "-p 8,,4", "-p value '8,,4' has an empty entry");
  expect_one_line_error(bench + "-p ,", "-p value ',' has an empty entry");
  expect_one_line_error(bench + "-p -8", "-p value '-8' must be at least 0");
  expect_one_line_error(bench + "-n -2", "-n value '-2' must be at least 0");
  expect_one_line_error("bench -m " + model() + " -r 1 -t 1,0,-3", "-t value '0' must be at least 1 (in '1,0,-3')");
  expect_one_line_error(bench + "-p 0 -n 0", "no tests to run");
  expect_one_line_error(bench + "-b 0", "-b value '0' must be at least 1");
  expect_one_line_error(bench + "-ub -2", "-ub value '-2' must be at least 0");
}

TEST(CliLimits, bench_markdown_shows_batch_columns_only_when_not_default_and_lines_align) {
  const std::string cmd = test::minfer_bin() + " bench -m " + model() + " -p 16 -n 0 -r 1 -t 1";
  const auto display_width = [](const std::string& line) {
    size_t cols = 0;
    for (const char c : line) cols += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return cols;
  };
  for (const auto& [args, b, ub] : std::vector<std::tuple<std::string, bool, bool>>{
           {"", false, false}, {" -ub 8", false, true}, {" -b 256", true, true}, {" -b 2048 -ub 512", false, false}}) {
    const Result r = sh(cmd + args + " 2>/dev/null");
    ASSERT_EQ(r.status, 0) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find(" n_batch |") != std::string::npos, b) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find(" n_ubatch |") != std::string::npos, ub) << args << "\n" << r.out;
    std::vector<std::string> rows;
    for (size_t at = 0, nl; (nl = r.out.find('\n', at)) != std::string::npos; at = nl + 1)
      if (r.out[at] == '|') rows.push_back(r.out.substr(at, nl - at));
    ASSERT_EQ(rows.size(), 3u) << args << "\n" << r.out;  // header, rule, one result
    for (const std::string& row : rows) EXPECT_EQ(display_width(row), display_width(rows[0])) << args << "\n" << row;
  }
}

TEST(CliLimits, bench_reports_the_ubatch_it_uses) {
  // No -ub, -ub 0: the device's default (512 on the CPU); -b below it caps it; each reported.
  const std::string cmd = test::minfer_bin() + " bench -m " + model() + " -p 16 -n 0 -r 1 -t 1 -o jsonl";
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"", "\"n_ubatch\":512"}, {" -ub 0", "\"n_ubatch\":512"}, {" -b 8", "\"n_ubatch\":8"},
           {" -ub 99999999999", "\"n_ubatch\":2048"}, {" -ub 7", "\"n_ubatch\":7"}}) {
    const Result r = sh(cmd + args);
    ASSERT_EQ(r.status, 0) << args << "\n" << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << args << "\n" << r.out;
  }
}

TEST(CliLimits, bench_csv_doubles_quotes_inside_fields) {
  const auto dir = test::temp_dir();
  const auto odd = dir / "we\"ird.gguf";
  std::filesystem::copy_file(model(), odd, std::filesystem::copy_options::overwrite_existing);
  const Result r = sh(test::minfer_bin() + " bench -m '" + odd.string() + "' -p 4 -n 0 -r 1 -t 1 -o csv");
  ASSERT_EQ(r.status, 0) << r.out;
  std::string want = odd.string();
  want.replace(want.find('"'), 1, "\"\"");
  EXPECT_NE(r.out.find(",\"" + want + "\","), std::string::npos) << r.out;  // after cpu_info, gpu_info
}

// bench -o csv carries the fields of -o jsonl, in the same order (llama-bench's CSV does).
TEST(CliLimits, bench_csv_has_the_fields_of_the_json_output) {
  const std::string cmd = test::minfer_bin() + " bench -m " + model() + " -p 4 -n 0 -r 2 -t 1 -o ";
  const Result csv = sh(cmd + "csv"), jsonl = sh(cmd + "jsonl");
  ASSERT_EQ(csv.status, 0) << csv.out;
  ASSERT_EQ(jsonl.status, 0) << jsonl.out;
  const size_t brace = jsonl.out.find('{');
  ASSERT_NE(brace, std::string::npos) << jsonl.out;
  const auto j = nlohmann::ordered_json::parse(jsonl.out.substr(brace, jsonl.out.find('\n', brace) - brace));
  std::string want_header;
  for (const auto& [key, v] : j.items()) want_header += (want_header.empty() ? "" : ",") + key;
  EXPECT_NE(csv.out.find(want_header + "\n"), std::string::npos) << csv.out;
  EXPECT_NE(csv.out.find(",\"pp4\","), std::string::npos) << csv.out;  // the test name, quoted
}

TEST(CliLimits, directories_given_as_files_are_named_in_the_error) {
  const std::string dir = test::temp_dir().string();
  expect_one_line_error("perplexity -m " + model() + " -f " + dir, "text file " + dir + ": is a directory");
  expect_one_line_error("run -m " + model() + " -f " + dir, "prompt file " + dir + ": is a directory");
  expect_one_line_error("tokenize -m " + model() + " --chat --chat-template " + dir + " hi",
                        "--chat-template " + dir + ": neither 'chatml' nor a readable template file (it is a directory)");
}

TEST(CliLimits, perplexity_zero_chunks_is_an_error) {
  const auto text = test::temp_dir() / "text.txt";
  sh("printf 'some words to score\\n' > " + text.string());
  expect_one_line_error("perplexity -m " + model() + " -f " + text.string() + " --chunks 0",
                        "--chunks 0 must be positive, or -1 for all chunks");
}

TEST(CliLimits, synth_vocab_that_is_not_json_names_the_file_without_raw_parser_text) {
  const auto dir = test::temp_dir();
  const auto txt = dir / "big.txt";
  sh("printf 'hello\\033[2J world\\n' > " + txt.string());
  const std::string args = "synth --arch qwen2 --preset tiny --type q8_0 --vocab " + txt.string() + " -o " +
                           (dir / "out.gguf").string();
  expect_one_line_error(args, txt.string() + ": not valid JSON (syntax error at byte ");
  const Result r = sh(test::minfer_bin() + " " + args);
  EXPECT_EQ(r.out.find("json.exception"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\033'), std::string::npos) << r.out;
}

}  // namespace
}  // namespace minfer
