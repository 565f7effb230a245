// Helpers shared by the tests: where ../shared lives, reading small binary files, skipping when
// a fixture is absent (with a message that names the missing path).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace minfer::test {

/// ../shared beside the checkout, or $MINFER_SHARED_DIR when set.
inline std::filesystem::path shared_dir() {
  if (const char* env = std::getenv("MINFER_SHARED_DIR"); env && *env) return env;
  return MINFER_SHARED_DIR;
}

/// Path of a file under ../shared, e.g. shared_path("fixtures/quant/Q4_0/blocks.bin").
inline std::filesystem::path shared_path(const std::string& rel) { return shared_dir() / rel; }

/// The built `minfer` command.
inline std::string minfer_bin() { return MINFER_BIN; }

/// Whole file as bytes; fails the test (not a crash) when unreadable.
inline std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) {
    ADD_FAILURE() << "cannot read " << p;
    return {};
  }
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

/// Whole file as little-endian f32 values.
inline std::vector<float> read_f32(const std::filesystem::path& p) {
  auto bytes = read_bytes(p);
  std::vector<float> out(bytes.size() / 4);
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

/// A scratch directory unique to the running test, removed and recreated on each call.
inline std::filesystem::path temp_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  // The process id keeps two test runs at once (two checkouts, ctest -j) out of each other's files.
  auto dir = std::filesystem::temp_directory_path() / (std::string("minfer_test_") + info->test_suite_name() + "_" +
                                                       info->name() + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

/// Names of the GGUF writer's temporary files (".minfer-write-XXXXXX", gguf_writer.cpp) in `dir`.
inline std::vector<std::string> write_temporaries(const std::filesystem::path& dir) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind(".minfer-write-", 0) == 0) found.push_back(e.path().filename().string());
  return found;
}

}  // namespace minfer::test

/// Skips the current test (GTEST_SKIP) when a file under ../shared is missing.
#define MINFER_REQUIRE_SHARED(rel)                                                      \
  do {                                                                                  \
    if (!std::filesystem::exists(::minfer::test::shared_path(rel)))                     \
      GTEST_SKIP() << "fixture not found: " << ::minfer::test::shared_path(rel)         \
                   << " (set MINFER_SHARED_DIR to the shared/ folder)";                 \
  } while (0)
