// `minfer bench`: llama-bench's tests and fields, so the two tables compare line by line.
// pp<N>: N random prompt tokens processed in batches (ubatches of -ub) from an empty cache;
// tg<N>: N tokens generated one per forward pass; pg<P>,<N>: both, one timing; v<K> (minfer's
// own, --n-verify): forwards of K tokens with the logits of every row, each removed again, as a
// speculative decoder's verify of K - 1 drafts. A warm-up run
// comes first; each test is repeated -r times; t/s is reported as mean +- sample stddev, and
// the JSON outputs carry every sample.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/ascii.h"
#include "core/env.h"
#include "core/error.h"
#include "core/printable.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "graph/op_timing.h"
#include "kv/kv_cache.h"
#include "gguf/gguf.h"
#include "options.h"
#include "quant/quant.h"

namespace minfer::cli {
namespace {

struct BenchArgs {
  std::vector<std::string> models;
  std::vector<std::string> n_prompt{"512"};
  std::vector<std::string> n_gen{"128"};
  std::vector<std::string> pg;
  std::vector<std::string> threads;
  std::vector<std::string> n_batch{"2048"};
  std::vector<std::string> n_ubatch{"0"};  ///< 0: default_ubatch() of each device
  std::vector<std::string> ctk;  ///< empty: MINFER_CACHE_TYPE, else f16 (as run's --cache-type)
  std::vector<std::string> ctv;
  std::vector<std::string> depth{"0"};
  std::vector<std::string> n_parallel{"1"};  ///< sequences decoded together (llama-batched-bench's -npl)
  std::vector<std::string> n_verify;         ///< verify forwards of K tokens (--n-verify)
  std::vector<std::string> devices{"cpu"};
  int reps = 5;
  std::string output = "md";
  bool progress = false;
  bool no_warmup = false;
  ObservabilityArgs observe;  ///< --graph-dump, --profile, --trace-out
  std::vector<std::string> ngl, fa, mmap;
  const CLI::Option* device_opt = nullptr;  ///< was --device given?
};

// "1,2,3" and repeated flags both give lists (llama-bench accepts both). An empty entry
// ("8,,4", ",", "") is an error naming the option and the whole value.
std::vector<std::string> split_list(const std::vector<std::string>& in, const char* what) {
  std::vector<std::string> out;
  for (const std::string& s : in) {
    size_t begin = 0;
    while (true) {
      const size_t comma = s.find(',', begin);
      const std::string item = s.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
      if (item.empty()) fail("bench: {} value '{}' has an empty entry", what, s);
      out.push_back(item);
      if (comma == std::string::npos) break;
      begin = comma + 1;
    }
  }
  return out;
}

/// `s` as an integer >= `min`; `whole` is the value the user gave (named in errors).
int64_t to_int(const std::string& s, const char* what, int64_t min, const std::string& whole) {
  long long v = 0;
  try {
    size_t pos = 0;
    v = std::stoll(s, &pos);
    if (pos != s.size()) throw std::invalid_argument(s);
  } catch (const std::exception&) {
    fail("bench: {} value '{}' is not an integer{}", what, s, whole == s ? "" : fmt::format(" (in '{}')", whole));
  }
  if (v < min) fail("bench: {} value '{}' must be at least {}{}", what, s, min, whole == s ? "" : fmt::format(" (in '{}')", whole));
  return v;
}

/// Every entry of a list option as an integer >= `min`.
std::vector<int64_t> int_list(const std::vector<std::string>& in, const char* what, int64_t min) {
  std::vector<int64_t> out;
  for (const std::string& s : in)
    for (const std::string& item : split_list({s}, what)) out.push_back(to_int(item, what, min, s));
  return out;
}

/// A -pg value: exactly "P,N" (llama-bench's -pg <pp,tg>; repeat the flag for more tests).
std::pair<int64_t, int64_t> parse_pg(const std::string& s) {
  const size_t comma = s.find(',');
  if (comma == std::string::npos || s.find(',', comma + 1) != std::string::npos)
    fail("bench: -pg value '{}' must be P,N (prompt tokens, generated tokens); repeat -pg for more tests", s);
  const int64_t p = to_int(s.substr(0, comma), "-pg", 0, s);
  const int64_t n = to_int(s.substr(comma + 1), "-pg", 0, s);
  if (p + n == 0) fail("bench: -pg value '{}' has no tokens to time", s);
  return {p, n};
}

/// A CSV field in double quotes, embedded quotes doubled (RFC 4180).
std::string csv_quote(const std::string& raw) {
  const std::string s = printable(raw);  // no terminal control bytes in the table
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

struct Test {
  int64_t n_prompt = 0, n_gen = 0, n_depth = 0;
  int64_t n_par = 1;  ///< sequences: each gets the depth and the prompt, then decodes in one batch with the others
  int64_t n_verify = 0;  ///< tokens of each verify forward (kVerifySteps of them); 0: not a verify test
  std::string name() const {
    std::string s = n_verify > 0                  ? fmt::format("v{}", n_verify)
                    : n_prompt > 0 && n_gen == 0 ? fmt::format("pp{}", n_prompt)
                    : n_gen > 0 && n_prompt == 0 ? fmt::format("tg{}", n_gen)
                                                  : fmt::format("pp{}+tg{}", n_prompt, n_gen);
    if (n_depth > 0) s += fmt::format(" @ d{}", n_depth);
    if (n_par > 1) s += fmt::format(" x{}", n_par);
    return s;
  }
};

struct Config {
  std::string device;
  int threads;
  int64_t n_batch, n_ubatch;
  std::string kv;
  int64_t ngl = -1;        ///< -ngl as given (INT64_MAX: all), -1 when not given
  std::string fa = "auto"; ///< on, off or auto
};

// llama.cpp's LLAMA_FTYPE names (include/llama.h, llama_model_ftype_name) for general.file_type.
std::string ftype_name(const Model& m) {
  static const std::pair<uint32_t, const char*> kNames[] = {
      {0, "all F32"}, {1, "F16"}, {2, "Q4_0"}, {3, "Q4_1"}, {7, "Q8_0"}, {8, "Q5_0"}, {9, "Q5_1"},
      {10, "Q2_K - Medium"}, {11, "Q3_K - Small"}, {12, "Q3_K - Medium"}, {13, "Q3_K - Large"},
      {14, "Q4_K - Small"}, {15, "Q4_K - Medium"}, {16, "Q5_K - Small"}, {17, "Q5_K - Medium"},
      {18, "Q6_K"}, {32, "BF16"}};
  if (auto ft = m.file().get_u32("general.file_type"))
    for (const auto& [id, name] : kNames)
      if (id == *ft) return name;
  // No (known) file type: the type holding most weight bytes.
  std::map<TensorType, uint64_t> bytes;
  for (const auto& w : m.weights()) bytes[w.type] += w.nbytes;
  TensorType best = TensorType::F32;
  for (const auto& [t, b] : bytes) if (b > bytes[best]) best = t;
  std::string s(type_name(best));
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

double now_ns() {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch()).count());
}

struct Result {
  std::string model_file, model_type, backend, kv, test;
  std::string gpu_info, test_time;
  uint64_t size = 0, params = 0;
  int64_t n_gpu_layers = 0;
  bool flash_attn = false;
  Config cfg;
  Test t;
  std::vector<double> samples_ns, samples_ts;
  double avg_ts() const {
    double s = 0;
    for (double v : samples_ts) s += v;
    return samples_ts.empty() ? 0 : s / static_cast<double>(samples_ts.size());
  }
  double stddev_ts() const {
    if (samples_ts.size() < 2) return 0;
    const double m = avg_ts();
    double s = 0;
    for (double v : samples_ts) s += (v - m) * (v - m);
    return std::sqrt(s / static_cast<double>(samples_ts.size() - 1));
  }
};

/// Cells each of a test's sequences holds: its depth, prompt and generated tokens, rounded up to
/// 32 (as `serve` sizes its slots).
int64_t cells_per_sequence(const Test& t) { return (t.n_depth + t.n_prompt + t.n_gen + 31) / 32 * 32; }

// One timed run of n_par sequences (-npl): each gets its own range of cells (as `serve`'s slots
// do), its untimed depth, then (timed) its prompt, sequence after sequence, then n_gen steps that
// each decode one token of every sequence in one forward, with the logits of all of them (as a
// server's decode step). Returns nanoseconds.
/// `n` token ids drawn uniformly from the vocabulary of `e`.
std::vector<int32_t> random_tokens(const Engine& e, std::mt19937& rng, int64_t n) {
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(e.n_vocab() - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = tok(rng);
  return v;
}

double run_parallel(Engine& e, const Test& t, int64_t n_batch, std::mt19937& rng) {
  const auto feed = [&](int32_t seq, int64_t n) {
    for (int64_t done = 0; done < n; done += n_batch) {
      const std::vector<int32_t> v = random_tokens(e, rng, std::min(n_batch, n - done));
      e.forward_view(Batch::sequence(v, e.n_past(seq), seq, false));
    }
  };
  e.reset();
  const int64_t per = cells_per_sequence(t);
  for (int32_t s = 0; s < t.n_par; ++s) e.kv().set_seq_cells(s, s * per, (s + 1) * per);
  for (int32_t s = 0; s < t.n_par; ++s) feed(s, t.n_depth);
  const double t0 = now_ns();
  for (int32_t s = 0; s < t.n_par; ++s) feed(s, t.n_prompt);
  Batch step;
  for (int64_t i = 0; i < t.n_gen; ++i) {
    step.tokens.clear();
    step.positions.clear();
    step.seq_ids.clear();
    step.logits.assign(static_cast<size_t>(t.n_par), 1);
    const std::vector<int32_t> next = random_tokens(e, rng, t.n_par);
    for (int32_t s = 0; s < t.n_par; ++s) {
      step.tokens.push_back(next[static_cast<size_t>(s)]);
      step.positions.push_back(e.n_past(s));
      step.seq_ids.push_back(s);
    }
    e.forward_view(step);
  }
  e.backend().synchronize();
  return now_ns() - t0;
}

/// Forwards timed by a verify test (v<K>): enough that a 7B's ~3 ms steps add up to ~0.1 s.
constexpr int kVerifySteps = 32;
/// Most tokens of one verify test (--n-verify): drafts beyond this are no speculation.
constexpr int64_t kMaxVerifyTokens = 4096;

// One timed verify run: the untimed depth, then kVerifySteps forwards of K random tokens at
// positions depth .. depth + K - 1, each with the logits of all K rows (what a speculative
// decoder's verify of K - 1 drafts computes), each removed from the cache again. Returns
// nanoseconds.
double run_verify(Engine& e, const Test& t, int64_t n_batch, std::mt19937& rng) {
  e.reset();
  for (int64_t done = 0; done < t.n_depth; done += n_batch)
    e.decode_view(random_tokens(e, rng, std::min(n_batch, t.n_depth - done)));
  const auto depth = static_cast<int32_t>(e.n_past(0));
  const double t0 = now_ns();
  for (int i = 0; i < kVerifySteps; ++i) {
    const std::vector<int32_t> v = random_tokens(e, rng, t.n_verify);
    e.forward_view(Batch::sequence(v, depth, 0, true));
    e.seq_rm(0, depth, -1);
  }
  e.backend().synchronize();
  return now_ns() - t0;
}

// One timed run: optional untimed depth, then the prompt in n_batch chunks, then n_gen single
// tokens. Returns nanoseconds of the timed part.
double run_once(Engine& e, const Test& t, int64_t n_batch, std::mt19937& rng) {
  if (t.n_verify > 0) return run_verify(e, t, n_batch, rng);
  if (t.n_par > 1) return run_parallel(e, t, n_batch, rng);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(e.n_vocab() - 1));  // one per decode step
  e.reset();
  // decode_view: the logits land in the engine's memory, as a generation loop reads them.
  for (int64_t done = 0; done < t.n_depth; done += n_batch)
    e.decode_view(random_tokens(e, rng, std::min(n_batch, t.n_depth - done)));
  const double t0 = now_ns();
  for (int64_t done = 0; done < t.n_prompt; done += n_batch)
    e.decode_view(random_tokens(e, rng, std::min(n_batch, t.n_prompt - done)));
  int32_t next = tok(rng);
  for (int64_t i = 0; i < t.n_gen; ++i) {
    const int32_t one[1] = {next};
    e.decode_view(one);
    next = tok(rng);
  }
  e.backend().synchronize();
  return now_ns() - t0;
}

/// `s` padded to `width` terminal columns, on the right (`left`) or the left (UTF-8: "±" is two
/// bytes, one column).
std::string pad(const std::string& s, size_t width, bool left) {
  size_t cols = 0;
  for (const char c : s) cols += (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // count code points
  if (cols >= width) return s;
  return left ? s + std::string(width - cols, ' ') : std::string(width - cols, ' ') + s;
}

/// llama-bench's table; n_batch and n_ubatch columns appear when some row differs from the
/// default (2048; default_ubatch of the row's device), as llama-bench shows non-default fields.
void print_markdown(const std::vector<Result>& rs) {
  struct Column {
    const char* name;
    size_t width;
    bool left;  ///< left-aligned (else right-aligned, with the ':' rule)
    std::function<std::string(const Result&)> cell;
  };
  std::vector<Column> cols = {
      {"model", 30, true, [](const Result& r) { return r.model_type; }},
      {"size", 10, false,
       [](const Result& r) { return fmt::format("{:.2f} MiB", static_cast<double>(r.size) / (1024.0 * 1024.0)); }},
      {"params", 10, false, [](const Result& r) { return fmt::format("{:.2f} M", static_cast<double>(r.params) / 1e6); }},
      {"backend", 10, true, [](const Result& r) { return r.backend; }},
      {"threads", 7, false, [](const Result& r) { return std::to_string(r.cfg.threads); }}};
  bool show_b = false, show_ub = false;
  for (const Result& r : rs) {
    show_b = show_b || r.cfg.n_batch != 2048;
    show_ub = show_ub || r.cfg.n_ubatch != default_ubatch(parse_device(r.cfg.device));
  }
  if (show_b) cols.push_back({"n_batch", 7, false, [](const Result& r) { return std::to_string(r.cfg.n_batch); }});
  if (show_ub) cols.push_back({"n_ubatch", 8, false, [](const Result& r) { return std::to_string(r.cfg.n_ubatch); }});
  cols.push_back({"type_k", 6, false, [](const Result& r) { return r.kv; }});
  cols.push_back({"test", 16, false, [](const Result& r) { return r.test; }});
  cols.push_back(
      {"t/s", 20, false, [](const Result& r) { return fmt::format("{:.2f} ± {:.2f}", r.avg_ts(), r.stddev_ts()); }});
  const auto row = [&](const std::function<std::string(const Column&)>& text) {
    std::string line = "|";
    for (const Column& c : cols) line += " " + pad(text(c), c.width, c.left) + " |";
    std::printf("%s\n", line.c_str());
  };
  row([](const Column& c) { return std::string(c.name); });
  row([](const Column& c) { return c.left ? std::string(c.width, '-') : std::string(c.width - 1, '-') + ":"; });
  for (const Result& r : rs) row([&](const Column& c) { return c.cell(r); });
}

/// The CPU's name from /proc/cpuinfo ("model name"), "" when there is none.
std::string cpu_info() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t value = line.find_first_not_of(" \t", line.find(':') + 1);
      return value == std::string::npos ? std::string() : line.substr(value);
    }
  return {};
}

/// Now as ISO 8601 UTC ("2026-01-31T12:00:00Z"), llama-bench's test_time.
std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

#ifndef MINFER_BUILD_COMMIT
#define MINFER_BUILD_COMMIT "unknown"
#endif
#ifndef MINFER_BUILD_NUMBER
#define MINFER_BUILD_NUMBER 0
#endif

/// llama-bench's JSON object (its field names, in its order where minfer has the field).
nlohmann::ordered_json to_json(const Result& r) {
  static const std::string cpu = cpu_info();
  nlohmann::ordered_json j;
  j["build_commit"] = MINFER_BUILD_COMMIT;  // the git commit at configure time
  j["build_number"] = MINFER_BUILD_NUMBER;  // commits up to it
  j["cpu_info"] = cpu;
  j["gpu_info"] = r.gpu_info;
  j["model_filename"] = r.model_file;
  j["model_type"] = r.model_type;
  j["model_size"] = r.size;
  j["model_n_params"] = r.params;
  j["backends"] = r.backend;
  j["n_threads"] = r.cfg.threads;
  j["n_batch"] = r.cfg.n_batch;
  j["n_ubatch"] = r.cfg.n_ubatch;
  j["type_k"] = r.kv;
  j["type_v"] = r.kv;
  j["n_gpu_layers"] = r.n_gpu_layers;
  j["flash_attn"] = r.flash_attn;
  j["n_prompt"] = r.t.n_prompt;
  j["n_gen"] = r.t.n_gen;
  j["n_depth"] = r.t.n_depth;
  j["n_parallel"] = r.t.n_par;
  j["n_verify"] = r.t.n_verify;  // minfer's own: tokens of each verify forward (0: not a verify test)
  j["test"] = r.test;
  j["test_time"] = r.test_time;
  double avg_ns = 0;
  for (double v : r.samples_ns) avg_ns += v;
  avg_ns /= static_cast<double>(std::max<size_t>(1, r.samples_ns.size()));
  double var_ns = 0;
  for (double v : r.samples_ns) var_ns += (v - avg_ns) * (v - avg_ns);
  const double stddev_ns = r.samples_ns.size() < 2 ? 0.0 : std::sqrt(var_ns / static_cast<double>(r.samples_ns.size() - 1));
  j["avg_ns"] = static_cast<uint64_t>(avg_ns);
  j["stddev_ns"] = static_cast<uint64_t>(stddev_ns);
  j["avg_ts"] = r.avg_ts();
  j["stddev_ts"] = r.stddev_ts();
  std::vector<uint64_t> ns;
  for (double v : r.samples_ns) ns.push_back(static_cast<uint64_t>(v));
  j["samples_ns"] = ns;
  j["samples_ts"] = r.samples_ts;
  return j;
}

/// llama-bench's -o sql: a CREATE TABLE for the JSON object's fields, then one INSERT per result
/// (integers and booleans INTEGER, other numbers REAL, the rest TEXT in single quotes).
void print_sql(const std::vector<Result>& rs) {
  if (rs.empty()) return;
  const auto text = [](const nlohmann::ordered_json& v) -> std::string {
    std::string raw;
    if (v.is_string()) raw = v.get<std::string>();
    else if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
    else if (v.is_number()) return v.dump();
    else
      for (const auto& e : v) raw += (raw.empty() ? "" : ",") + e.dump();
    std::string out = "'";
    for (const char c : printable(raw)) out += c == '\'' ? std::string("''") : std::string(1, c);
    return out + "'";
  };
  const nlohmann::ordered_json first = to_json(rs.front());
  std::printf("CREATE TABLE IF NOT EXISTS test (\n");
  size_t i = 0;
  for (const auto& [key, v] : first.items()) {
    const char* type = v.is_number_integer() || v.is_boolean() ? "INTEGER" : v.is_number() ? "REAL" : "TEXT";
    std::printf("  %s %s%s\n", key.c_str(), type, ++i < first.size() ? "," : "");
  }
  std::printf(");\n\n");
  for (const Result& r : rs) {
    const nlohmann::ordered_json j = to_json(r);
    std::string keys, values;
    for (const auto& [key, v] : j.items()) {
      keys += (keys.empty() ? "" : ", ") + key;
      values += (values.empty() ? "" : ", ") + text(v);
    }
    std::printf("INSERT INTO test (%s) VALUES (%s);\n", keys.c_str(), values.c_str());
  }
}

void bench(const BenchArgs& args) {
  BenchArgs a = args;
  a.output = ascii_lower(a.output);
  if (a.models.empty()) fail("bench: give at least one model with -m");
  if (a.reps < 1) fail("bench: -r {} must be at least 1", a.reps);
  if (a.output != "md" && a.output != "json" && a.output != "jsonl" && a.output != "csv" && a.output != "sql")
    fail("bench: output format '{}' is not one of md, json, jsonl, csv, sql", args.output);
  for (const std::string& m : split_list(a.mmap, "-mmp"))
    if (m != "1") fail("bench: -mmp {} is not supported: minfer always maps the model file (-mmp 1)", m);
  std::vector<std::string> fa_list;
  for (const std::string& f : split_list(a.fa.empty() ? std::vector<std::string>{"auto"} : a.fa, "-fa"))
    fa_list.push_back(parse_flash_attn(f));
  std::vector<int64_t> ngl_list;
  for (const std::string& n : split_list(a.ngl, "-ngl")) ngl_list.push_back(parse_gpu_layers(n));
  const bool device_given = a.device_opt != nullptr && a.device_opt->count() > 0;
  // Every value is checked before any model is loaded. A 0 in -p / -n means "no such test"
  // (llama-bench's convention); negative counts are errors.
  std::vector<std::pair<int64_t, int64_t>> pgs;
  for (const std::string& s : a.pg) pgs.push_back(parse_pg(s));
  const std::vector<int64_t> prompts = int_list(a.n_prompt, "-p", 0);
  const std::vector<int64_t> gens = int_list(a.n_gen, "-n", 0);
  std::vector<Test> tests;
  const std::vector<int64_t> npls = int_list(a.n_parallel, "-npl", 1);
  for (const int64_t np : npls)
    if (np > KvCache::kMaxSeq) fail("bench: -npl {} is more than the {} sequences an engine holds", np, KvCache::kMaxSeq);
  for (const int64_t np : npls)
    for (const int64_t depth : int_list(a.depth, "-d", 0)) {
      for (const int64_t p : prompts) if (p > 0) tests.push_back({p, 0, depth, np});
      for (const int64_t n : gens) if (n > 0) tests.push_back({0, n, depth, np});
      for (const auto& [p, n] : pgs) tests.push_back({p, n, depth, np});
    }
  // Verify tests are of one sequence: once per depth, whatever -npl says.
  for (const int64_t depth : int_list(a.depth, "-d", 0))
    for (const int64_t k : int_list(a.n_verify, "--n-verify", 1)) {
      if (k > kMaxVerifyTokens) fail("bench: --n-verify {} is more than the {} tokens one verify may hold", k, kMaxVerifyTokens);
      tests.push_back({0, 0, depth, 1, k});
    }
  if (tests.empty()) fail("bench: no tests to run (-p and -n are all 0 and no -pg or --n-verify was given)");
  a.observe.apply();
  const std::vector<std::string> ctk_given = a.ctk.empty() ? std::vector<std::string>{default_cache_type()} : a.ctk;
  auto ctv = split_list(a.ctv.empty() ? ctk_given : a.ctv, "-ctv");
  auto ctk = split_list(ctk_given, "-ctk");
  // Type names in any case; the table and JSON show them as minfer names them (q8_0).
  for (auto& k : ctk) k = type_name(parse_kv_type(k));
  for (auto& v : ctv) v = type_name(parse_kv_type(v));
  std::vector<int> thread_list;
  for (const int64_t th : int_list(a.threads, "-t", 1)) thread_list.push_back(resolve_thread_count(th, "-t"));
  if (thread_list.empty()) thread_list.push_back(resolve_thread_count(0, "-t"));
  const std::vector<int64_t> batches = int_list(a.n_batch, "-b", 1);
  const std::vector<int64_t> ubatches_given = int_list(a.n_ubatch, "-ub", 0);  // 0: the device's default
  std::vector<std::string> devices;
  for (const auto& dev : split_list(a.devices, "--device"))
    devices.push_back(parse_device(dev) == graph::BackendKind::Cpu ? "cpu" : "cuda");
  // -ngl without --device: each value is a row whose device it chooses (0: the CPU, else CUDA).
  if (!ngl_list.empty() && !device_given) devices = {"auto"};
  // Every device is opened once before any run, so `--device cpu,cuda` (or -ngl 99) without a
  // usable GPU fails at once instead of after all the CPU runs (whose table would be lost).
  const bool wants_cuda = std::any_of(devices.begin(), devices.end(), [](const std::string& d) { return d == "cuda"; }) ||
                          (devices == std::vector<std::string>{"auto"} &&
                           std::any_of(ngl_list.begin(), ngl_list.end(), [](int64_t n) { return n > 0; }));
  if (ngl_list.empty()) ngl_list.push_back(-1);
  std::vector<Config> configs;
  for (const auto& dev : devices)
    for (const int th : thread_list)
      for (const int64_t b : batches)
        for (const int64_t ub_given : ubatches_given)
          for (size_t k = 0; k < ctk.size(); ++k) {
            const std::string& v = k < ctv.size() ? ctv[k] : ctv.back();
            if (v != ctk[k]) fail("bench: different K and V cache types ({} / {}) are not supported", ctk[k], v);
            // The ubatch used (and reported): the device's default for 0, at most -b and 2^30.
            // n_ubatch holds -ub as given (0: the device's default) until the row's device is known.
            for (const int64_t ngl : ngl_list)
              for (const std::string& fa : fa_list) configs.push_back({dev, th, b, ub_given, ctk[k], ngl, fa});
          }
  // Every model file is opened and its GGUF header checked before the first run, so a bad path
  // in a list fails at once instead of after the runs of the models before it.
  const std::vector<std::string> model_paths = split_list(a.models, "-m");
  // The device of each row for each model: -ngl needs the model's layer count (its GGUF header);
  // a value that would split the model between CPU and GPU is an error before any run.
  const auto row_device = [&](const Config& c, int64_t n_layer, const std::string& path) -> std::string {
    if (c.ngl < 0) return c.device;
    const std::string wanted = c.ngl == 0 ? "cpu" : "cuda";
    if (c.ngl > 0 && c.ngl < n_layer)
      fail("bench: -ngl {}: {} has {} layers and minfer places a model whole, never split between CPU and GPU: give "
           "-ngl 0 (CPU) or -ngl {} or more (GPU)", c.ngl, path, n_layer, n_layer);
    if (c.device != "auto" && c.device != wanted)
      fail("bench: -ngl {} puts the model on the {} but --device is {}: give one of them",
           c.ngl == std::numeric_limits<int64_t>::max() ? std::string("all") : std::to_string(c.ngl),
           wanted == "cpu" ? "CPU" : "GPU", c.device);
    return wanted;
  };
  std::vector<int64_t> layer_counts;
  for (const std::string& path : model_paths) {
    const auto f = gguf::GgufFile::open(path);
    const std::string arch(f->get_string("general.architecture").value_or(""));
    const int64_t n_layer = f->get_u32(arch + ".block_count").value_or(0);
    for (const Config& c : configs) (void)row_device(c, n_layer, path);
    layer_counts.push_back(n_layer);
  }
  if (wants_cuda) (void)create_backend(graph::BackendKind::Cuda, 1);
  std::vector<Result> results;
  for (size_t mi = 0; mi < model_paths.size(); ++mi) {
    const std::string& path = model_paths[mi];
    auto model = Model::load(path);
    (void)model->tokenizer();  // a bad vocabulary is refused before any row runs, as before
    const HParams& h = model->hparams();
    for (Config c : configs) {
      c.device = row_device(c, layer_counts[mi], path);
      // The ubatch used (and reported): the device's default for 0, at most -b and 2^30.
      c.n_ubatch = std::min({c.n_ubatch > 0 ? c.n_ubatch : int64_t{default_ubatch(parse_device(c.device))}, c.n_batch,
                             int64_t{1} << 30});
      int64_t need = 0, per_seq = 0;
      for (const Test& t : tests) {
        const int64_t cells = t.n_depth + t.n_prompt + t.n_gen + t.n_verify;
        per_seq = std::max(per_seq, cells);
        need = std::max(need, t.n_par > 1 ? cells_per_sequence(t) * t.n_par : cells);
      }
      EngineConfig ec;
      ec.device = parse_device(c.device);
      ec.n_threads = c.threads;
      ec.n_ctx = std::max<int64_t>(need + 1, 256);
      ec.n_seq_ctx = per_seq + 1;
      ec.n_ubatch = static_cast<int32_t>(c.n_ubatch);  // already the value used (configs above)
      ec.kv_type = parse_kv_type(c.kv);
      ec.graph_dump = results.empty() ? a.observe.graph_dump : std::string();  // the first row's engine
      apply_flash_attn(c.fa);  // for this row's backend (auto: as the environment has it)
      const bool flash = ec.device == graph::BackendKind::Cuda && !env_flag("MINFER_CUDA_NO_FLASH_ATTN");
      Engine engine(model, ec);
      std::mt19937 rng(1234);
      for (const Test& t : tests) {
        Result r;
        r.model_file = path;
        r.model_type = fmt::format("{} {} {}", h.arch_name, size_class(model->n_params()), ftype_name(*model));
        r.size = model->weight_bytes();
        r.params = model->n_params();
        r.backend = c.device == "cpu" ? "CPU" : "CUDA";
        r.kv = c.kv;
        r.cfg = c;
        r.t = t;
        r.test = t.name();
        r.gpu_info = ec.device == graph::BackendKind::Cuda ? engine.backend().describe() : std::string();
        // llama-bench's n_gpu_layers: -ngl as given, else 0 on the CPU and every layer on CUDA.
        r.n_gpu_layers = c.ngl >= 0 && c.ngl != std::numeric_limits<int64_t>::max() ? c.ngl
                         : ec.device == graph::BackendKind::Cuda                     ? h.n_layer
                                                                                     : 0;
        r.flash_attn = flash;
        r.test_time = utc_now();
        if (!a.no_warmup) run_once(engine, t, c.n_batch, rng);  // warm-up
        for (int rep = 0; rep < a.reps; ++rep) {
          const double ns = run_once(engine, t, c.n_batch, rng);
          r.samples_ns.push_back(ns);
          const int64_t tokens = t.n_verify > 0 ? t.n_verify * kVerifySteps : (t.n_prompt + t.n_gen) * t.n_par;
          r.samples_ts.push_back(static_cast<double>(tokens) / (ns / 1e9));
          if (a.progress) log_info("{} {}: rep {} {:.2f} t/s", path, r.test, rep + 1, r.samples_ts.back());
        }
        if (a.output == "jsonl") std::printf("%s\n", to_json(r).dump().c_str());
        results.push_back(std::move(r));
      }
    }
  }
  if (a.output == "md") {
    print_markdown(results);
  } else if (a.output == "sql") {
    print_sql(results);
  } else if (a.output == "json") {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const Result& r : results) arr.push_back(to_json(r));
    std::printf("%s\n", arr.dump(2).c_str());
  } else if (a.output == "csv") {
    // The JSON object's fields in its order (as llama-bench's CSV): strings quoted, the sample
    // lists as one quoted, comma-separated field.
    auto field = [](const nlohmann::ordered_json& v) -> std::string {
      if (v.is_string()) return csv_quote(v.get<std::string>());
      if (v.is_array()) {
        std::string joined;
        for (const auto& e : v) joined += (joined.empty() ? "" : ",") + e.dump();
        return csv_quote(joined);
      }
      return v.dump();
    };
    for (size_t i = 0; i < results.size(); ++i) {
      const nlohmann::ordered_json j = to_json(results[i]);
      std::string line;
      if (i == 0) {
        for (const auto& [key, v] : j.items()) line += (line.empty() ? "" : ",") + key;
        std::printf("%s\n", line.c_str());
        line.clear();
      }
      for (const auto& [key, v] : j.items()) line += (line.empty() ? "" : ",") + field(v);
      std::printf("%s\n", line.c_str());
    }
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "Benchmark prompt processing and generation (llama-bench's tests and fields)");
  cmd->add_option("-m,--model", a->models, "model file (repeatable, or comma-separated)")->required();
  cmd->add_option("-p,--n-prompt", a->n_prompt, "prompt tokens (list)")->capture_default_str();
  cmd->add_option("-n,--n-gen", a->n_gen, "generated tokens (list)")->capture_default_str();
  cmd->add_option("--pg", a->pg, "prompt+generation test P,N (repeatable; also -pg)");
  cmd->add_option("-d,--n-depth", a->depth, "tokens already in the cache before each test (list)")->capture_default_str();
  cmd->add_option("--n-parallel", a->n_parallel,
                  "sequences per test, decoded together one token each per forward (list; also -npl): "
                  "t/s counts the tokens of all of them")
      ->capture_default_str();
  cmd->add_option("--n-verify", a->n_verify,
                  "verify tests v<K> (list; minfer's own): after the depth, forwards of K tokens with the logits "
                  "of every row, each removed again (a speculative verify of K - 1 drafts; 32 forwards a run, K at "
                  "most 4096, one sequence whatever -npl says); t/s counts the K tokens of every forward, so K / t/s "
                  "is one verify's time");
  cmd->add_option("-r,--repetitions", a->reps, "repetitions of each test")->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "CPU threads (list; default: all cores)");
  cmd->add_option("-b,--batch-size", a->n_batch, "tokens per decode call (list)")->capture_default_str();
  cmd->add_option("--ubatch-size", a->n_ubatch, "tokens per forward pass, at most -b (list; also -ub; 0 or absent: 512 on the CPU, 2048 on CUDA)");
  cmd->add_option("--cache-type-k", a->ctk,
                  "KV cache type: f32, f16, q8_0 (list; also -ctk; default: $MINFER_CACHE_TYPE or f16)");
  cmd->add_option("--cache-type-v", a->ctv, "must equal the K type (list; also -ctv)");
  a->device_opt = cmd->add_option("--device", a->devices, "cpu or cuda (list; also -dev)")->capture_default_str();
  cmd->add_option("-o,--output", a->output, "md, json, jsonl, csv or sql")->capture_default_str();
  cmd->add_flag("--progress", a->progress, "log each repetition");
  cmd->add_flag("--no-warmup", a->no_warmup, "skip the untimed warm-up run before each test");
  a->observe.add(cmd, "bench");
  // llama-bench's -ngl: a model is placed whole, so 0 is a CPU row and the layer count or more a
  // CUDA row; a value in between is an error.
  cmd->add_option("--n-gpu-layers,--gpu-layers", a->ngl,
                  "0: a CPU row, the layer count or more (or all): a CUDA row (list; also -ngl; instead of --device)");
  cmd->add_option("--flash-attn", a->fa, "on, off or auto (list; also -fa): off takes CUDA prefill off the flash-attention kernel");
  cmd->add_option("--mmap", a->mmap, "llama-bench's -mmp: only 1 (minfer always maps the model file)");
  cmd->callback([a] { bench(*a); });
}

}  // namespace minfer::cli
