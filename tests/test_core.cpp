// Core utilities: fp16/bf16 conversions, the env table, the thread pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "core/types.h"
#include "cpu/simd/cpu_features.h"
#include "gguf_test_util.h"
#include "kv/kv_cache.h"

namespace minfer {
namespace {

/// Sets (value) or unsets (nullopt) an environment variable for the life of the object and
/// re-reads the env table; the previous state is restored on destruction.
class EnvOverride {
 public:
  EnvOverride(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value->c_str(), 1);
    else unsetenv(name);
    env_reload();
  }
  ~EnvOverride() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
    env_reload();
  }
  EnvOverride(const EnvOverride&) = delete;
  EnvOverride& operator=(const EnvOverride&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

/// The message env_check() gives with `name` set to `value` (and nothing else changed), or
/// "(no error)".
std::string env_check_error(const char* name, const std::string& value) {
  EnvOverride set(name, value);
  try {
    env_check();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

const EnvVar& table_row(std::string_view name) {
  for (const EnvVar& v : env_table())
    if (name == v.name) return v;
  throw Error("no row " + std::string(name));
}

TEST(Fp16, RoundTripsEveryFiniteHalfExactly) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    if ((v & 0x7C00u) == 0x7C00u && (v & 0x3FFu) != 0) continue;  // NaN payloads: checked below
    EXPECT_EQ(fp32_to_fp16(fp16_to_fp32(v)), v) << "half bits " << h;
  }
}

TEST(Fp16, KnownValuesAndRoundingToNearestEven) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00u);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000u);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFFu);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00u);  // rounds to inf
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001u);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000u);  // tie to even -> 0
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001u);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00u);
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02u);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(fp16_to_fp32(0x0001u), std::ldexp(1.0f, -24));
}

TEST(Bf16, RoundsToNearestEvenAndKeepsNaNQuiet) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80u);
  // 1 + 2^-8 is halfway between two bf16 values: ties to even.
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80u);
  EXPECT_EQ(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82u);
  const uint16_t n = fp32_to_bf16(std::bit_cast<float>(0x7F800001u));  // signalling NaN
  EXPECT_TRUE(std::isnan(bf16_to_fp32(n)));
  EXPECT_NE(n & 0x40u, 0u);
  EXPECT_EQ(bf16_to_fp32(0x3F80u), 1.0f);
}

TEST(Types, NamesRoundTrip) {
  EXPECT_EQ(type_name(TensorType::Q4_K), "q4_K");
  EXPECT_EQ(parse_type_name("Q4_K"), TensorType::Q4_K);
  EXPECT_EQ(parse_type_name("bf16"), TensorType::BF16);
  EXPECT_FALSE(parse_type_name("q4_2").has_value());
  EXPECT_TRUE(is_known_type_id(30));
  EXPECT_FALSE(is_known_type_id(4));
}

// `minfer env` lists the table in its order, which the table's comment promises is by name.
TEST(Env, TheTableIsSortedByNameWithoutDuplicates) {
  const auto table = env_table();
  ASSERT_FALSE(table.empty());
  for (size_t i = 1; i < table.size(); ++i)
    EXPECT_LT(std::string_view(table[i - 1].name), std::string_view(table[i].name)) << "entry " << i;
}

TEST(Env, FlagsParseStrictlyAndUnknownNamesAreErrors) {
  setenv("MINFER_NO_CUDA_GRAPH", "1", 1);
  env_reload();
  EXPECT_TRUE(env_flag("MINFER_NO_CUDA_GRAPH"));
  setenv("MINFER_NO_CUDA_GRAPH", "0", 1);
  env_reload();
  EXPECT_FALSE(env_flag("MINFER_NO_CUDA_GRAPH"));
  setenv("MINFER_NO_CUDA_GRAPH", "maybe", 1);
  env_reload();
  EXPECT_THROW(env_flag("MINFER_NO_CUDA_GRAPH"), Error);
  unsetenv("MINFER_NO_CUDA_GRAPH");
  env_reload();
  EXPECT_FALSE(env_flag("MINFER_NO_CUDA_GRAPH"));
  EXPECT_THROW(env_string("MINFER_NOT_A_VARIABLE"), Error);
}

TEST(Env, CheckParsesEverySetVariableByItsKind) {
  setenv("MINFER_CUDA_MMQ_TILE", "wide", 1);
  env_reload();
  EXPECT_THROW(env_check(), Error);
  setenv("MINFER_CUDA_MMQ_TILE", "64", 1);
  setenv("MINFER_CUDA_PROFILE", "sometimes", 1);
  env_reload();
  EXPECT_THROW(env_check(), Error);
  setenv("MINFER_CUDA_PROFILE", "on", 1);
  setenv("MINFER_CUDA_FAIL_LAUNCH", "any text at all", 1);  // free text: not parsed
  env_reload();
  EXPECT_NO_THROW(env_check());
  unsetenv("MINFER_CUDA_MMQ_TILE");
  unsetenv("MINFER_CUDA_PROFILE");
  unsetenv("MINFER_CUDA_FAIL_LAUNCH");
  env_reload();
  // A gate read with the accessor of another kind is an internal error.
  EXPECT_THROW(env_int("MINFER_NO_MMQ", 0), Error);
  EXPECT_THROW(env_flag("MINFER_THREADS"), Error);
}

TEST(Env, TextChoicesAreCheckedAtStartInAnyCaseAndReadInLowerCase) {
  EXPECT_EQ(env_check_error("MINFER_LOG", "verbose"),
            "environment variable MINFER_LOG=verbose is not one of error, warn, info, debug");
  EXPECT_EQ(env_check_error("MINFER_SIMD", "sse9"),
            "environment variable MINFER_SIMD=sse9 is not one of auto, scalar, avx2, avx512");
  EXPECT_EQ(env_check_error("MINFER_CACHE_TYPE", "q4_0"),
            "environment variable MINFER_CACHE_TYPE=q4_0 is not one of f32, f16, q8_0");
  // White space at either end is shown in quotes, a long value is cut.
  EXPECT_EQ(env_check_error("MINFER_LOG", "debug "),
            "environment variable MINFER_LOG=\"debug \" is not one of error, warn, info, debug");
  EXPECT_EQ(env_check_error("MINFER_THREADS", " 2"), "environment variable MINFER_THREADS=\" 2\" is not an integer");
  EXPECT_EQ(env_check_error("MINFER_NO_MMQ", std::string(100, 'y')),
            "environment variable MINFER_NO_MMQ=" + std::string(60, 'y') +
                "... (100 characters) is not a boolean (use 1 or 0; true/false, yes/no, on/off)");
  EXPECT_EQ(env_check_error("MINFER_LOG", "DEBUG"), "(no error)");
  EXPECT_EQ(env_check_error("MINFER_SIMD", "AVX2"), "(no error)");
  EXPECT_EQ(env_check_error("MINFER_CACHE_TYPE", "Q8_0"), "(no error)");
  {
    EnvOverride set("MINFER_LOG", "Debug");
    EXPECT_EQ(env_choice("MINFER_LOG"), "debug");
  }
  {
    EnvOverride set("MINFER_SIMD", "AVX512");
    EXPECT_EQ(env_choice("MINFER_SIMD"), "avx512");
  }
  // Set but empty, or unset: the default ("" for the cache type: --cache-type's own default).
  for (const std::optional<std::string>& value : {std::optional<std::string>(""), std::optional<std::string>()}) {
    EnvOverride log("MINFER_LOG", value), simd("MINFER_SIMD", value), kv("MINFER_CACHE_TYPE", value);
    EXPECT_EQ(env_choice("MINFER_LOG"), "info");
    EXPECT_EQ(env_choice("MINFER_SIMD"), "auto");
    EXPECT_EQ(env_choice("MINFER_CACHE_TYPE"), "");
  }
  // Free text is never checked, and is not a choice.
  EXPECT_EQ(env_check_error("MINFER_SHARED_DIR", "Any Text / at all"), "(no error)");
  EXPECT_EQ(test::error_of([] { env_choice("MINFER_SHARED_DIR"); }),
            "internal error: environment variable MINFER_SHARED_DIR is free text, not a choice (src/core/env.cpp)");
}

// The check and the readers accept the same set: every choice of a row (in lower case, as
// env_choice returns it) is one its reader knows, and the rows list exactly these.
TEST(Env, EveryTextChoiceIsOneItsReaderUnderstands) {
  using cpu::simd::level_for_request;
  using cpu::simd::SimdLevel;
  EXPECT_STREQ(table_row("MINFER_LOG").choices, "error|warn|info|debug");
  EXPECT_STREQ(table_row("MINFER_SIMD").choices, "auto|scalar|avx2|avx512");
  EXPECT_STREQ(table_row("MINFER_CACHE_TYPE").choices, "f32|f16|q8_0");
  EXPECT_EQ(log_level_from_name("error"), LogLevel::Error);
  EXPECT_EQ(log_level_from_name("warn"), LogLevel::Warn);
  EXPECT_EQ(log_level_from_name("info"), LogLevel::Info);
  EXPECT_EQ(log_level_from_name("debug"), LogLevel::Debug);
  EXPECT_EQ(level_for_request("auto", SimdLevel::kAvx512), SimdLevel::kAvx512);
  EXPECT_EQ(level_for_request("scalar", SimdLevel::kAvx512), SimdLevel::kScalar);
  EXPECT_EQ(level_for_request("avx2", SimdLevel::kAvx512), SimdLevel::kAvx2);
  EXPECT_EQ(level_for_request("avx512", SimdLevel::kAvx512), SimdLevel::kAvx512);
  EXPECT_EQ(parse_kv_type("f32"), TensorType::F32);
  EXPECT_EQ(parse_kv_type("f16"), TensorType::F16);
  EXPECT_EQ(parse_kv_type("q8_0"), TensorType::Q8_0);
  EXPECT_EQ(test::error_of([] { log_level_from_name("verbose"); }), "'verbose' is not a log level (error, warn, info, debug)");
}

TEST(Env, IntegersOutsideTheirRangeOrSetAreRefusedNamingWhatIsAllowed) {
  EXPECT_EQ(env_check_error("MINFER_CUDA_ATTN_CHUNK", "-1"),
            "environment variable MINFER_CUDA_ATTN_CHUNK=-1 is out of range (allowed: 0 or more)");
  EXPECT_EQ(env_check_error("MINFER_CUDA_MMQ_TILE", "48"),
            "environment variable MINFER_CUDA_MMQ_TILE=48 is not one of 0, 32, 64, 128");
  EXPECT_EQ(env_check_error("MINFER_CUDA_MMVQ_KB", "3"),
            "environment variable MINFER_CUDA_MMVQ_KB=3 is not one of 0, 1, 2");
  EXPECT_EQ(env_check_error("MINFER_CUDA_MMVQ_Q6K", "-1"),
            "environment variable MINFER_CUDA_MMVQ_Q6K=-1 is not one of 0, 1, 2");
  EXPECT_EQ(env_check_error("MINFER_CUDA_MMVQ_OCC", "7"),
            "environment variable MINFER_CUDA_MMVQ_OCC=7 is not one of 0, 1, 2");
  EXPECT_EQ(env_check_error("MINFER_THREADS", "-2"),
            "environment variable MINFER_THREADS=-2 is out of range (allowed: 0 or more)");
  // Too large for 64 bits: out of range, not "not an integer".
  EXPECT_EQ(env_check_error("MINFER_THREADS", "99999999999999999999"),
            "environment variable MINFER_THREADS=99999999999999999999 is out of range (allowed: 0 or more)");
  EXPECT_EQ(env_check_error("MINFER_CUDA_MMQ_TILE", "99999999999999999999"),
            "environment variable MINFER_CUDA_MMQ_TILE=99999999999999999999 is out of range (allowed: one of 0, 32, "
            "64, 128)");
  EXPECT_EQ(env_check_error("MINFER_TEST_WRITE_SIGNAL", "-99999999999999999999"),
            "environment variable MINFER_TEST_WRITE_SIGNAL=-99999999999999999999 is out of range (allowed: 0 to 64)");
  EXPECT_EQ(env_check_error("MINFER_TEST_WRITE_SIGNAL", "100000"),
            "environment variable MINFER_TEST_WRITE_SIGNAL=100000 is out of range (allowed: 0 to 64)");
  EXPECT_EQ(env_check_error("MINFER_TEST_WRITE_SIGNAL", "15"), "(no error)");
  EXPECT_EQ(env_check_error("MINFER_THREADS", "4x"), "environment variable MINFER_THREADS=4x is not an integer");
  // In range: accepted, and read as the number (a choice compares as a number: 032 is 32).
  for (const char* tile : {"0", "32", "64", "128", "032"}) EXPECT_EQ(env_check_error("MINFER_CUDA_MMQ_TILE", tile), "(no error)") << tile;
  for (const char* mode : {"0", "1", "2"}) {
    EXPECT_EQ(env_check_error("MINFER_CUDA_MMVQ_KB", mode), "(no error)") << mode;
    EXPECT_EQ(env_check_error("MINFER_CUDA_MMVQ_Q6K", mode), "(no error)") << mode;
    EXPECT_EQ(env_check_error("MINFER_CUDA_MMVQ_OCC", mode), "(no error)") << mode;
  }
  EnvOverride chunk("MINFER_CUDA_ATTN_CHUNK", "100000"), tile("MINFER_CUDA_MMQ_TILE", "032");
  EXPECT_EQ(env_int("MINFER_CUDA_ATTN_CHUNK", 0), 100000);
  EXPECT_EQ(env_int("MINFER_CUDA_MMQ_TILE", 0), 32);
}

TEST(Env, UnknownMinferVariablesAreFoundWithTheNearestKnownName) {
  EnvOverride graphs("MINFER_NO_CUDA_GRAPHS", "1"), threads("MINFER_TRHEADS", "2"), log("minfer_log", "debug"),
      other("MINFER_COMPLETELY_DIFFERENT", "x"), known("MINFER_NO_MMQ", "1"), script("MINFER_CUDA_ARCHS", "90a"),
      short_name("MINFER_FOO", "1");
  // Only the ones set here are compared: whoever runs the tests may have set others.
  const std::vector<std::string> set_here = {"MINFER_COMPLETELY_DIFFERENT", "MINFER_FOO", "MINFER_NO_CUDA_GRAPHS",
                                             "MINFER_TRHEADS", "minfer_log"};
  std::vector<std::string> found;
  for (const UnknownEnvVar& u : env_unknown()) {
    EXPECT_NE(u.name, "MINFER_NO_MMQ");      // in the table
    EXPECT_NE(u.name, "MINFER_CUDA_ARCHS");  // read by the build scripts
    if (std::find(set_here.begin(), set_here.end(), u.name) != set_here.end())
      found.push_back(u.name + "=" + u.value + " -> " + u.suggestion);
  }
  // Sorted by name (byte order: upper case first); the edit distance ignores case.
  // MINFER_FOO is 2 edits from MINFER_LOG, too many for a 3-letter name: no suggestion.
  EXPECT_EQ(found, (std::vector<std::string>{"MINFER_COMPLETELY_DIFFERENT=x -> ", "MINFER_FOO=1 -> ",
                                             "MINFER_NO_CUDA_GRAPHS=1 -> MINFER_NO_CUDA_GRAPH",
                                             "MINFER_TRHEADS=2 -> MINFER_THREADS", "minfer_log=debug -> MINFER_LOG"}));
  EXPECT_EQ(env_unknown_message({"MINFER_NO_CUDA_GRAPHS", "1", "MINFER_NO_CUDA_GRAPH"}),
            "environment variable MINFER_NO_CUDA_GRAPHS is unknown and ignored; did you mean MINFER_NO_CUDA_GRAPH? "
            "('minfer env' lists the known ones)");
  EXPECT_EQ(env_unknown_message({"MINFER_COMPLETELY_DIFFERENT", "x", ""}),
            "environment variable MINFER_COMPLETELY_DIFFERENT is unknown and ignored ('minfer env' lists the known ones)");
  // env_check warns (one line each) and does not fail.
  const LogLevel level = log_level();
  set_log_level(LogLevel::Info);
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(env_check());
  const std::string err = ::testing::internal::GetCapturedStderr();
  set_log_level(level);
  EXPECT_NE(err.find("minfer: warning: environment variable MINFER_NO_CUDA_GRAPHS is unknown and ignored; did you mean "
                     "MINFER_NO_CUDA_GRAPH? ('minfer env' lists the known ones)\n"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("minfer: warning: environment variable MINFER_COMPLETELY_DIFFERENT is unknown and ignored ('minfer "
                     "env' lists the known ones)\n"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("MINFER_NO_MMQ"), std::string::npos) << err;
}

TEST(ThreadPool, DefaultThreadCountRefusesANegativeMinferThreads) {
  setenv("MINFER_THREADS", "-1", 1);
  env_reload();
  EXPECT_EQ(test::error_of([] { default_thread_count(); }),
            "environment variable MINFER_THREADS=-1 is out of range (allowed: 0 or more)");
  setenv("MINFER_THREADS", "3", 1);
  env_reload();
  EXPECT_EQ(default_thread_count(), 3);
  unsetenv("MINFER_THREADS");
  env_reload();
  EXPECT_GE(default_thread_count(), 1);
}

// The warning names the count the user gave, not the 1024 that default_thread_count lowers a
// larger MINFER_THREADS to.
TEST(ThreadPool, ACountAboveTheMachineIsWarnedAboutAsGiven) {
  const unsigned hw_raw = std::thread::hardware_concurrency();
  const int hw = hw_raw == 0 ? 1 : static_cast<int>(hw_raw);
  const LogLevel level = log_level();
  set_log_level(LogLevel::Info);
  {
    EnvOverride threads("MINFER_THREADS", "5000");
    ::testing::internal::CaptureStderr();
    const int used = resolve_thread_count(0, "-t");
    const std::string err = ::testing::internal::GetCapturedStderr();
    if (hw < 1024) {
      EXPECT_EQ(used, hw);
      EXPECT_EQ(err, fmt::format("minfer: warning: MINFER_THREADS=5000 exceeds the {} hardware threads of this "
                                 "machine; using {}\n", hw, hw));
    } else {
      EXPECT_EQ(used, 1024);
      EXPECT_EQ(err, "minfer: warning: MINFER_THREADS=5000 is above the limit of 1024 threads; using 1024\n");
    }
  }
  if (hw < 5000) {
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(resolve_thread_count(5000, "-t"), hw);
    EXPECT_EQ(::testing::internal::GetCapturedStderr(),
              fmt::format("minfer: warning: -t 5000 exceeds the {} hardware threads of this machine; using {}\n", hw, hw));
  }
  set_log_level(level);
}

TEST(ThreadPool, ParallelForCoversEveryIndexOnceAndPropagatesErrors) {
  ThreadPool pool(4);
  for (int64_t n : {1, 3, 4, 5, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
  EXPECT_THROW(pool.run([](int ith) {
    if (ith == 2) throw Error("boom");
  }),
               Error);
  // The pool still works after an error.
  std::atomic<int> count{0};
  pool.run([&](int) { count++; });
  EXPECT_EQ(count.load(), 4);
}

// -t -1 is the default count (llama.cpp's spelling), and -2 is refused.
TEST(ThreadPool, MinusOneIsTheDefaultCount) {
  EnvOverride threads("MINFER_THREADS", std::nullopt);
  EXPECT_EQ(resolve_thread_count(-1, "-t"), resolve_thread_count(0, "-t"));
  EXPECT_EQ(test::error_of([] { resolve_thread_count(-2, "-t"); }), "-t -2 must be positive (or 0 or -1 for the default)");
}

// Loops and run() jobs back to back, with more threads than this machine may have cores, so
// threads are preempted between reading a job and claiming from it: every index is done exactly
// once per loop, every run() reaches every thread once, and the piece count changes from loop to
// loop (a thread holding an earlier loop's claim word must not take a piece of a later one).
TEST(ThreadPool, PiecesOfBackToBackLoopsAreEachDoneOnceUnderPreemption) {
  for (const char* spin : {"50", "0"}) {
    EnvOverride env("MINFER_POOL_SPIN_US", std::string(spin));
    EnvOverride backoff("MINFER_POOL_BACKOFF_MS", std::string("0"));  // keep every loop on 3 threads
    ThreadPool pool(3);
    std::vector<int> hits(257);
    for (int iter = 0; iter < 3000; ++iter) {
      const int64_t n = 1 + (iter * 37) % 257;
      std::fill(hits.begin(), hits.end(), 0);
      pool.parallel_for(n, 1 + iter % 5, [&](int64_t b, int64_t e, int ith) {
        ASSERT_GE(ith, 0);
        ASSERT_LT(ith, 3);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;  // pieces never overlap
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << "loop " << iter << " index " << i;
      if (iter % 7 == 0) {
        std::atomic<int> mask{0};
        pool.run([&](int ith) { mask.fetch_or(1 << ith); });
        ASSERT_EQ(mask.load(), 7) << "run() after loop " << iter;
      }
    }
  }
}

// One range per thread (MINFER_POOL_CHUNKS=1) is the old split: ranges in order, one per thread.
TEST(ThreadPool, OnePiecePerThreadSplitsIntoContiguousRanges) {
  EnvOverride env("MINFER_POOL_CHUNKS", std::string("1"));
  ThreadPool pool(4);
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  pool.parallel_for(100, 1, [&](int64_t b, int64_t e, int) {
    std::lock_guard lock(mu);
    ranges.emplace_back(b, e);
  });
  std::sort(ranges.begin(), ranges.end());
  EXPECT_EQ(ranges, (std::vector<std::pair<int64_t, int64_t>>{{0, 25}, {25, 50}, {50, 75}, {75, 100}}));
}

// An exception in one piece reaches the caller; the loop's other pieces still run, and the pool
// works afterwards.
TEST(ThreadPool, AnErrorInOnePieceIsRethrownAfterTheOthersRan) {
  EnvOverride chunks("MINFER_POOL_CHUNKS", std::string("4"));  // 2 threads x 4: pieces of 8
  ThreadPool pool(2);
  std::atomic<int64_t> done{0};
  EXPECT_THROW(pool.parallel_for(64, 1, [&](int64_t b, int64_t e, int) {
    if (b == 0) throw Error("boom");
    done += e - b;
  }), Error);
  EXPECT_EQ(done.load(), 64 - 64 / 8);  // 8 pieces of 8: all but the first
  std::atomic<int64_t> sum{0};
  pool.parallel_for(10, 1, [&](int64_t b, int64_t e, int) { sum += e - b; });
  EXPECT_EQ(sum.load(), 10);
}

// A worker's piece that stalls (as a descheduled thread's does) makes the caller wait longer than
// it worked. One such loop alone changes nothing; a second within ThreadPool's 20 ms gap sends the
// next loops to the caller, every piece, the same pieces, for the back-off time; a straggle just
// after a back-off backs off at once for twice as long; with MINFER_POOL_BACKOFF_MS=0 they never
// go, and after the back-off the workers are used again.
TEST(ThreadPool, AStalledWorkerSendsTheNextLoopsToTheCaller) {
  EnvOverride chunks("MINFER_POOL_CHUNKS", std::string("4"));  // 2 threads x 4: pieces of 8
  // One loop whose first piece on the caller waits until the worker holds a piece, and whose
  // worker piece then sleeps `stall`.
  const auto stalled_loop = [](ThreadPool& pool, std::chrono::milliseconds stall) {
    std::atomic<bool> worker_in{false};
    pool.parallel_for(64, 1, [&](int64_t, int64_t, int ith) {
      if (ith != 0) {
        worker_in = true;
        std::this_thread::sleep_for(stall);
        return;
      }
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!worker_in && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    });
    ASSERT_TRUE(worker_in.load()) << "the worker never took a piece";
  };
  // The pieces a loop ran, as (begin, end, thread index), sorted.
  const auto pieces_of = [](ThreadPool& pool) {
    std::mutex mu;
    std::vector<std::tuple<int64_t, int64_t, int>> seen;
    pool.parallel_for(64, 1, [&](int64_t b, int64_t e, int ith) {
      std::lock_guard lock(mu);
      seen.emplace_back(b, e, ith);
    });
    std::sort(seen.begin(), seen.end());
    return seen;
  };
  std::vector<std::tuple<int64_t, int64_t, int>> solo;
  for (int64_t b = 0; b < 64; b += 8) solo.emplace_back(b, b + 8, 0);
  {
    EnvOverride backoff("MINFER_POOL_BACKOFF_MS", std::string("60000"));
    ThreadPool pool(2);
    stalled_loop(pool, std::chrono::milliseconds(50));
    stalled_loop(pool, std::chrono::milliseconds(0));  // needs the worker: one straggle did not back off
    EXPECT_EQ(pool.solo_loops(), 0);
    stalled_loop(pool, std::chrono::milliseconds(50));  // the second straggle within the gap
    EXPECT_EQ(pool.solo_loops(), 0);
    EXPECT_EQ(pieces_of(pool), solo);  // the same 8 pieces, all on the caller
    EXPECT_EQ(pieces_of(pool), solo);
    EXPECT_EQ(pool.solo_loops(), 2);
    // An error in a solo loop is still rethrown after the other pieces ran.
    std::atomic<int64_t> done{0};
    EXPECT_THROW(pool.parallel_for(64, 1, [&](int64_t b, int64_t e, int) {
      if (b == 8) throw Error("boom");
      done += e - b;
    }), Error);
    EXPECT_EQ(done.load(), 56);
  }
  {
    EnvOverride backoff("MINFER_POOL_BACKOFF_MS", std::string("0"));
    ThreadPool pool(2);
    stalled_loop(pool, std::chrono::milliseconds(50));
    stalled_loop(pool, std::chrono::milliseconds(1));  // would fail were the loop on the caller alone
    EXPECT_EQ(pool.solo_loops(), 0);
  }
  {
    // A straggle right after a back-off ended backs off at once, for twice as long: 200 ms, then
    // 400 ms. (Sleeps leave 150 ms or more of margin on each side.)
    EnvOverride backoff("MINFER_POOL_BACKOFF_MS", std::string("200"));
    ThreadPool pool(2);
    stalled_loop(pool, std::chrono::milliseconds(50));
    stalled_loop(pool, std::chrono::milliseconds(50));  // backs off for 200 ms
    EXPECT_EQ(pieces_of(pool), solo);
    EXPECT_EQ(pool.solo_loops(), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // past the first back-off
    stalled_loop(pool, std::chrono::milliseconds(50));  // on the workers; it straggles: 400 ms
    EXPECT_EQ(pool.solo_loops(), 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // past 200 ms, not past 400 ms
    EXPECT_EQ(pieces_of(pool), solo);
    EXPECT_EQ(pool.solo_loops(), 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(350));  // past 400 ms
    const auto shared = pieces_of(pool);  // the workers are tried again
    EXPECT_EQ(pool.solo_loops(), 2);
    EXPECT_EQ(shared.size(), solo.size());
  }
  {
    EnvOverride backoff("MINFER_POOL_BACKOFF_MS", std::string("1"));
    ThreadPool pool(2);
    stalled_loop(pool, std::chrono::milliseconds(50));
    stalled_loop(pool, std::chrono::milliseconds(50));  // backs off for 1 ms
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // past the back-off and the gap
    stalled_loop(pool, std::chrono::milliseconds(1));
    EXPECT_EQ(pool.solo_loops(), 0);
  }
}

}  // namespace
}  // namespace minfer
