// llama.cpp's command-line habits on minfer (llama-cli, llama-bench, llama-quantize,
// llama-perplexity spellings): each one is either accepted with llama.cpp's meaning (checked by
// its effect) or refused with one line that names it, exit status 1, and never misparsed (as
// "-sys" once was read as "-s ys", "-hf" as "-h", "-cnv" as "-c nv").
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "models/model.h"
#include "test_util.h"

namespace minfer {
namespace {

constexpr const char* kModel = "fixtures/models/mistral-tiny-Q8_0.gguf";

struct Outcome {
  int status;
  std::string out;  ///< stdout and stderr together
};

Outcome sh(const std::string& cmd) {
  const test::CommandResult r = test::run_shell("timeout 60 " + cmd);
  return {r.status, r.out};
}
std::string bin() { return test::minfer_bin(); }
/// What `cmd` writes to stdout alone (stderr is dropped).
std::string stdout_of(const std::string& cmd) {
  const std::string file = (test::temp_dir() / "stdout.txt").string();
  (void)test::run_shell("{ timeout 60 " + cmd + " >" + file + " 2>/dev/null </dev/null; }");  // run_shell adds 2>&1 after the group
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
std::string model() { return test::shared_path(kModel).string(); }
std::string tmpl() { return std::string(MINFER_SOURCE_DIR) + "/tests/data/chat_templates/mistral-instruct.jinja"; }
size_t count_lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

/// One spelling: the arguments after `minfer CMD -m MODEL`, and either the text its run prints
/// (exit 0) or the one-line error it gets (exit 1).
struct Case {
  std::string args;
  bool ok;
  std::string expect;  ///< in the output (ok), or in the one error line
};

void check(const std::string& prefix, const std::vector<Case>& cases, const std::string& input = "/dev/null") {
  for (const Case& c : cases) {
    const Outcome r = sh(prefix + " " + c.args + " <" + input);
    if (c.ok) {
      EXPECT_EQ(r.status, 0) << c.args << "\n" << r.out;
    } else {
      EXPECT_EQ(r.status, 1) << c.args << "\n" << r.out;
      EXPECT_EQ(r.out.rfind("minfer: error: ", 0), 0u) << c.args << "\n" << r.out;
      EXPECT_EQ(count_lines(r.out), 1u) << c.args << "\n" << r.out;
    }
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\nwanted: " << c.expect << "\ngot: " << r.out;
  }
}

TEST(CliLlamaHabits, run_takes_llama_cli_spellings_or_refuses_them_in_one_line) {
  MINFER_REQUIRE_SHARED(kModel);
  const int64_t n_layer = Model::load(model())->hparams().n_layer;
  ASSERT_GT(n_layer, 1);
  const std::string run = bin() + " run -m " + model() + " -n 2";
  const std::string cuda_error = sh(run + " -p hi --device cuda").out;  // a CPU-only build: one line
  check(run, {
      // -ngl: 0 is the CPU; in between is an error (a model is placed whole).
      {"-p hi -ngl 0", true, "on cpu"},
      {"-p hi --n-gpu-layers 0", true, "on cpu"},
      {"-p hi -ngl " + std::to_string(n_layer - 1), false, "the model has " + std::to_string(n_layer) + " layers"},
      {"-p hi -ngl 0 --device cuda", false, "-ngl 0 puts the model on the CPU but --device is cuda"},
      {"-p hi -ngl x", false, "-ngl 'x' is not a whole number"},
      // -fa on|off|auto in any case, and the older bare flag.
      {"-p hi -fa on", true, "generated"},
      {"-p hi -fa OFF", true, "generated"},
      {"-p hi -fa auto", true, "generated"},
      {"-p hi -fa", true, "generated"},
      {"-fa -p hi", true, "generated"},
      {"-p hi -fa sometimes", false, "-fa/--flash-attn 'sometimes' is not one of on, off, auto"},
      // -ctk / -ctv, --cache-type, choices in any case.
      {"-p hi -ctk q8_0 -ctv q8_0", true, "KV q8_0"},
      {"-p hi -ctk Q8_0", true, "KV q8_0"},
      {"-p hi --cache-type Q8_0", true, "KV q8_0"},
      {"-p hi -ctk q8_0 -ctv f16", false, "K cache type q8_0 and V cache type f16 differ"},
      {"-p hi -ctk q4_0", false, "KV cache type 'q4_0' is not supported"},
      {"-p hi --device CPU", true, "on cpu"},
      {"-p hi -dev CPU", true, "on cpu"},
      // -s is the seed; -sys the system prompt (never "-s ys"), which needs a chat prompt.
      {"-p hi -s 7 --temp 0.8", true, "sampling seed 7"},
      {"-p hi --temp 0", true, "generated"},
      {"-p hi -sys 'Be brief'", false, "--system requires --chat"},
      {"-p hi -st -sys 'Be brief' --chat-template " + tmpl(), true, "generated"},
      {"-p hi --system-prompt 'Be brief' --chat --chat-template " + tmpl(), true, "generated"},
      // -cnv / -i / --interactive: the chat loop (its summary says "new tokens"), -p the first message.
      {"-cnv -p hi --chat-template " + tmpl(), true, "new token"},
      {"-i -p hi --chat-template " + tmpl(), true, "new token"},
      {"--interactive -p hi --chat-template " + tmpl(), true, "new token"},
      {"-no-cnv -p hi", true, "generated"},
      // Downloads, memory locking and mapping: refused, naming what to do instead.
      {"-hf org/repo", false, "-hf is not supported: minfer does not download models"},
      {"-hf org/repo -p hi", false, "-hf is not supported"},
      {"-mu https://example.com/m.gguf", false, "-mu is not supported: minfer does not download models"},
      {"--hf-repo org/repo", false, "--hf-repo is not supported"},
      {"-p hi --mlock", false, "--mlock is not supported"},
      {"-p hi --no-mmap", false, "--no-mmap is not supported"},
      {"-p hi -nkvo", false, "-nkvo is not supported"},
      {"-p hi -sm layer", false, "-sm is not supported"},
      {"-p hi -tb 4", false, "-tb is not supported"},
      // Accepted with llama.cpp's meaning.
      {"-p hi --color", true, "\033[33mhi\033[0m"},
      {"-p hi --no-warmup", true, "generated"},
      {"-p hi -b 64", true, "generated"},
      {"-p hi -b 0", true, "generated"},
      {"-p hi --ignore-eos", true, "generated 2 tokens"},
      {"-p 'a\\tb'", true, "a\tb"},
      {"-p 'a\\tb' -e", true, "a\tb"},
      {"-p 'a\\tb' --escape", true, "a\tb"},
      {"-p 'a\\tb' --no-escape", true, "a\\tb"},
      {"-p 'x\\x41y'", true, "xAy"},
      // A one-letter option with a number attached stays CLI11's; any other multi-letter
      // single-dash argument is refused rather than split.
      {"-p hi -t2", true, "generated"},
      {"-p hi -xyz", false, "unknown option '-xyz': minfer's single-dash options have one letter"},
      {"-p hi -snv", false, "unknown option '-snv'"},
      {"-p hi -np 2", false, "-np (--parallel) is not an option of minfer run"},
      {"--prompt=-sys", true, "-sys"},  // a value, not an option
  });
  // -ngl at or above the layer count is the GPU, as --device cuda is (an error without one).
  const Outcome ngl = sh(run + " -p hi -ngl 99");
  if (cuda_error.rfind("minfer: error: ", 0) == 0) {
    EXPECT_EQ(ngl.status, 1) << ngl.out;
    EXPECT_EQ(ngl.out, cuda_error);
    EXPECT_EQ(sh(run + " -p hi -ngl all").out, cuda_error);
  } else {
    EXPECT_EQ(ngl.status, 0) << ngl.out;
    EXPECT_EQ(ngl.out.find("on cpu"), std::string::npos) << ngl.out;
  }
}

TEST(CliLlamaHabits, escapes_are_processed_as_llama_cli_does_by_default) {
  MINFER_REQUIRE_SHARED(kModel);
  const std::string run = bin() + " run -m " + model() + " -t 2 -n 1 --temp 0";
  EXPECT_EQ(stdout_of(run + " -p 'def f():\\n'").rfind("def f():\n", 0), 0u);
  EXPECT_EQ(stdout_of(run + " -p 'def f():\\n' --no-escape").rfind("def f():\\n", 0), 0u);
  // Unknown escapes and a lone trailing backslash stay as they are; \\ is one backslash.
  EXPECT_EQ(stdout_of(run + " -p 'a\\qb\\\\c\\'").rfind("a\\qb\\c\\", 0), 0u);
}

TEST(CliLlamaHabits, a_sampled_run_prints_its_seed_and_that_seed_repeats_it) {
  MINFER_REQUIRE_SHARED(kModel);
  const std::string run = bin() + " run -m " + model() + " -t 2 -n 8 -p 'Once upon' --temp 1.5";
  const Outcome first = sh(run);
  ASSERT_EQ(first.status, 0) << first.out;
  const size_t at = first.out.find("minfer: sampling seed ");
  ASSERT_NE(at, std::string::npos) << first.out;
  const std::string seed = first.out.substr(at + 22, first.out.find(' ', at + 22) - (at + 22));
  ASSERT_FALSE(seed.empty());
  const Outcome again = sh(run + " -s " + seed);
  EXPECT_NE(again.out.find("minfer: sampling seed " + seed + " "), std::string::npos) << again.out;
  // The generated text (stdout, before the summary) is the same; the load line comes first on stderr.
  const auto gen = [](const std::string& out) {
    const size_t p = out.find("Once upon");
    return p == std::string::npos ? std::string() : out.substr(p, out.find('\n', p) - p);
  };
  EXPECT_EQ(gen(again.out), gen(first.out));
  EXPECT_FALSE(gen(first.out).empty()) << first.out;
  // Greedy decoding has no seed to print.
  EXPECT_EQ(sh(run + " --temp 0").out.find("sampling seed"), std::string::npos);
}

TEST(CliLlamaHabits, reverse_prompt_is_a_stop_string) {
  MINFER_REQUIRE_SHARED(kModel);
  const std::string run = bin() + " run -m " + model() + " -t 2 -n 12 --temp 0 -p 'The' --no-display-prompt --ignore-eos";
  const Outcome plain{0, stdout_of(run)};
  ASSERT_GE(plain.out.size(), 4u) << plain.out;
  // The third and fourth bytes of the greedy continuation as the stop string: the reply ends before them.
  const std::string stop = plain.out.substr(2, 2);
  ASSERT_EQ(stop.find('\''), std::string::npos);
  const Outcome r = sh(run + " -r '" + stop + "'");
  EXPECT_NE(r.out.find("stop: stop"), std::string::npos) << r.out;
  EXPECT_EQ(stdout_of(run + " -r '" + stop + "'"), plain.out.substr(0, 2) + "\n");
  const Outcome rp = sh(run + " --reverse-prompt '" + stop + "'");
  EXPECT_NE(rp.out.find("stop: stop"), std::string::npos) << rp.out;
}

TEST(CliLlamaHabits, chat_and_perplexity_take_llama_spellings) {
  MINFER_REQUIRE_SHARED(kModel);
  const std::string input = (test::temp_dir() / "input.txt").string();
  std::ofstream(input) << "Hi\n/bye\n";
  const std::string chat = bin() + " chat -m " + model() + " -t 2 -n 2 --temp 0 --chat-template " + tmpl();
  check(chat, {
      {"-sys 'Be brief'", true, "new token"},
      {"-i -cnv", true, "new token"},
      {"-ngl 0 -fa off -ctk f16 -ctv f16 -b 128 --no-warmup", true, "on cpu"},
      {"-r xyz --ignore-eos", true, "generated 2 tokens"},
      {"-sys", false, "--system: 1 required"},
      {"-hf x", false, "-hf is not supported"},
  }, input);
  const std::string text = (test::temp_dir() / "t.txt").string();
  std::ofstream(text) << "The quick brown fox jumps over the lazy dog while the sun sets behind the hills.";
  check(bin() + " perplexity -m " + model() + " -f " + text + " -c 16 -t 2", {
      {"-ngl 0 -fa on -b 16 -ctk F16", true, "Final estimate"},
      {"-ngl 1", false, "layers and minfer places a model whole"},
      {"--kl-divergence", false, "--kl-divergence"},
  });
}

TEST(CliLlamaHabits, bench_takes_llama_bench_spellings) {
  MINFER_REQUIRE_SHARED(kModel);
  const int64_t n_layer = Model::load(model())->hparams().n_layer;
  const std::string bench = bin() + " bench -m " + model() + " -p 8 -n 2 -r 2 -t 2";
  check(bench, {
      {"-mmp 1 -o JSON", true, "\"model_filename\""},
      {"-mmp 0", false, "-mmp 0 is not supported: minfer always maps the model file"},
      {"-oe md", false, "-oe is not supported"},
      {"-ngl 0 -o jsonl", true, "\"n_gpu_layers\":0"},
      {"-ngl " + std::to_string(n_layer - 1), false, "has " + std::to_string(n_layer) + " layers"},
      {"-ngl 0 --device cuda", false, "-ngl 0 puts the model on the CPU but --device is cuda"},
      {"-fa 0,1 -o csv", true, "flash_attn"},
      {"-o sql", true, "CREATE TABLE IF NOT EXISTS test ("},
      {"-o xml", false, "output format 'xml' is not one of md, json, jsonl, csv, sql"},
      {"--no-warmup", true, "pp8"},
      {"-ctk Q8_0", true, "q8_0"},
  });
  // llama-bench's JSON fields, integer samples_ns, and one row per -fa value.
  const Outcome j = sh(bench + " -fa off,on -o json");
  ASSERT_EQ(j.status, 0) << j.out;
  for (const char* field : {"\"build_commit\"", "\"build_number\"", "\"cpu_info\"", "\"gpu_info\"", "\"n_gpu_layers\"",
                            "\"flash_attn\"", "\"test_time\"", "\"stddev_ns\"", "\"samples_ns\""})
    EXPECT_NE(j.out.find(field), std::string::npos) << field << "\n" << j.out;
  size_t rows = 0;
  for (size_t p = j.out.find("\"test\":"); p != std::string::npos; p = j.out.find("\"test\":", p + 1)) ++rows;
  EXPECT_EQ(rows, 4u) << j.out;  // (pp8, tg2) x (off, on)
  const size_t s = j.out.find("\"samples_ns\"");
  ASSERT_NE(s, std::string::npos);
  const std::string samples = j.out.substr(s, j.out.find(']', s) - s);
  EXPECT_EQ(samples.find('.'), std::string::npos) << samples;  // whole nanoseconds
  // -ngl lists give rows: 0 is a CPU row; a GPU value is an error on a build without CUDA, as --device cuda is.
  const Outcome cuda = sh(bench + " --device cuda");
  const Outcome rows_ngl = sh(bench + " -ngl 0,99 -o jsonl");
  if (cuda.status != 0) {
    EXPECT_EQ(rows_ngl.status, 1) << rows_ngl.out;
    EXPECT_EQ(rows_ngl.out, cuda.out);
  } else {
    EXPECT_NE(rows_ngl.out.find("\"n_gpu_layers\":99"), std::string::npos) << rows_ngl.out;
    EXPECT_NE(rows_ngl.out.find("\"n_gpu_layers\":0"), std::string::npos) << rows_ngl.out;
  }
}

TEST(CliLlamaHabits, quantize_positional_type_gives_the_same_bytes_as_type_option) {
  MINFER_REQUIRE_SHARED(kModel);
  const auto dir = test::temp_dir();
  const std::string a = (dir / "a.gguf").string(), b = (dir / "b.gguf").string(), c = (dir / "c.gguf").string();
  const std::string q = bin() + " quantize " + model() + " ";
  ASSERT_EQ(sh(q + a + " --type q4_0 -t 2").status, 0);
  ASSERT_EQ(sh(q + b + " Q4_0 2").status, 0);
  ASSERT_EQ(sh(q + c + " q4_0 -t 2").status, 0);
  const auto bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string ref = bytes(a);
  ASSERT_GT(ref.size(), 1000u);
  EXPECT_TRUE(bytes(b) == ref);
  EXPECT_TRUE(bytes(c) == ref);
  const std::string out = (dir / "d.gguf").string();
  check(q + out, {
      {"", false, "quantize: give the target type: minfer quantize IN OUT TYPE, or --type TYPE"},
      {"q4_0 --type q8_0", false, "the type is given twice"},
      {"q4_k_x", false, "unknown type 'q4_k_x'"},
      {"q4_0 two", false, "quantize THREADS 'two' is not a whole number"},
  });
}

}  // namespace
}  // namespace minfer
