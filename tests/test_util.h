// Helpers shared by the tests: where the reference data lives (tests/data/shared/ in the repo,
// then ../shared), reading small binary files, skipping when a fixture is absent (with a message
// that names the missing path), or failing instead under CI.
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

/// The repository's copy of the small reference files of ../shared, under the same relative
/// paths (tests/data/shared/README.md gives each file's origin and sha256).
inline std::filesystem::path repo_data_dir() {
  return std::filesystem::path(MINFER_SOURCE_DIR) / "tests" / "data" / "shared";
}

/// Path of a reference file, e.g. shared_path("fixtures/quant/Q4_0/blocks.bin"): the repository's
/// copy (tests/data/shared/REL) when that is a regular file, else REL under ../shared. Folders
/// always resolve to ../shared.
inline std::filesystem::path shared_path(const std::string& rel) {
  if (!rel.empty()) {
    const auto in_repo = repo_data_dir() / rel;
    std::error_code ec;
    if (std::filesystem::is_regular_file(in_repo, ec)) return in_repo;
  }
  return shared_dir() / rel;
}

/// True under continuous integration (the environment variable CI is "true" or "1", as GitHub
/// Actions, GitLab CI and most CI services set it). There, missing reference data is a failure.
inline bool in_ci() {
  const char* env = std::getenv("CI");
  return env && (std::strcmp(env, "true") == 0 || std::strcmp(env, "1") == 0);
}

/// The demo model that ships in the repository (models/minfer-demo-py-q6_K.gguf, models/README.md):
/// for tests that need a real trained model but no reference outputs of it, so they run on any clone.
inline std::string repo_demo_model() { return std::string(MINFER_SOURCE_DIR) + "/models/minfer-demo-py-q6_K.gguf"; }

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

/// The marker of every skip for absent reference data; scripts/test.sh counts the skipped tests
/// by it.
#define MINFER_SHARED_ABSENT "../shared reference data absent"

/// When the reference file or folder REL (see shared_path) is missing: skips the current test
/// (GTEST_SKIP) with a message naming the path, or, under CI (in_ci()), fails it (FAIL), so that
/// a CI run without ../shared cannot pass by skipping. Returns from the calling function either way.
#define MINFER_REQUIRE_SHARED(rel)                                                                        \
  do {                                                                                                    \
    const auto minfer_path_ = ::minfer::test::shared_path(rel);                                           \
    if (!std::filesystem::exists(minfer_path_)) {                                                         \
      if (::minfer::test::in_ci())                                                                        \
        FAIL() << "fixture not found under CI (CI=true): " << minfer_path_                                \
               << " (" MINFER_SHARED_ABSENT "; set MINFER_SHARED_DIR to the shared/ folder)";             \
      GTEST_SKIP() << "fixture not found: " << minfer_path_                                               \
                   << " (" MINFER_SHARED_ABSENT "; set MINFER_SHARED_DIR to the shared/ folder)";          \
    }                                                                                                     \
  } while (0)
