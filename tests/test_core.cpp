// Core utilities: fp16/bf16 conversions, the env table, the thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/env.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "core/types.h"

namespace minfer {
namespace {

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

TEST(ThreadPool, DefaultThreadCountRefusesANegativeMinferThreads) {
  setenv("MINFER_THREADS", "-1", 1);
  env_reload();
  try {
    default_thread_count();
    ADD_FAILURE() << "MINFER_THREADS=-1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MINFER_THREADS=-1"), std::string::npos) << e.what();
  }
  setenv("MINFER_THREADS", "3", 1);
  env_reload();
  EXPECT_EQ(default_thread_count(), 3);
  unsetenv("MINFER_THREADS");
  env_reload();
  EXPECT_GE(default_thread_count(), 1);
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

}  // namespace
}  // namespace minfer
