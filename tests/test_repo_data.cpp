// The repository's copy of ../shared's small reference files (tests/data/shared/, README there):
// every file is a byte-for-byte copy of its ../shared original and is listed in SHA256SUMS, and
// the lookup (test::shared_path) prefers it, so the tests that need only these files run on a
// clone without ../shared.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>

#include "test_util.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;

/// Paths (relative to tests/data/shared) of every data file there, README.md and SHA256SUMS aside.
std::set<std::string> repo_data_files() {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(test::repo_data_dir())) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), test::repo_data_dir()).generic_string();
    if (rel == "README.md" || rel == "SHA256SUMS" || rel == "fixtures/quant/README.md") continue;
    out.insert(rel);
  }
  return out;
}

TEST(InRepoReferenceData, EveryFileIsListedInSha256SumsAndNothingListedIsMissing) {
  std::ifstream in(test::repo_data_dir() / "SHA256SUMS");
  ASSERT_TRUE(in) << "cannot read " << test::repo_data_dir() / "SHA256SUMS";
  std::set<std::string> listed;
  std::string hash, rel;
  while (in >> hash >> rel) {
    EXPECT_EQ(hash.size(), 64u) << rel;
    listed.insert(rel);
  }
  EXPECT_EQ(listed, repo_data_files());
  // The quant vectors of all 11 types, the tokenizer vectors, and the demo model's references.
  EXPECT_GE(listed.size(), 58u);
}

TEST(InRepoReferenceData, EveryFileIsAByteForByteCopyOfShared) {
  MINFER_REQUIRE_SHARED("fixtures");  // a folder: always ../shared, never the repository copy
  int compared = 0;
  for (const std::string& rel : repo_data_files()) {
    SCOPED_TRACE(rel);
    const fs::path original = test::shared_dir() / rel;
    ASSERT_TRUE(fs::exists(original)) << "no original in ../shared: " << original;
    EXPECT_EQ(test::read_bytes(test::repo_data_dir() / rel), test::read_bytes(original));
    ++compared;
  }
  EXPECT_GE(compared, 58);
}

TEST(InRepoReferenceData, LookupPrefersTheRepositoryCopyAndFallsBackToShared) {
  EXPECT_EQ(test::shared_path("fixtures/quant/Q4_0/blocks.bin"), test::repo_data_dir() / "fixtures/quant/Q4_0/blocks.bin");
  EXPECT_EQ(test::shared_path("models/reference/hf-demo.json"), test::repo_data_dir() / "models/reference/hf-demo.json");
  // Not copied (too large): ../shared.
  EXPECT_EQ(test::shared_path("models/minfer-demo-py-q8_0.gguf"), test::shared_dir() / "models/minfer-demo-py-q8_0.gguf");
  EXPECT_EQ(test::shared_path("fixtures/quant"), test::shared_dir() / "fixtures/quant");
}

}  // namespace
}  // namespace minfer
