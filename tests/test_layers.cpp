// The layer check of src/ (cmake/check_layers.cmake, run by the configure step): the tree as it
// is passes, and a planted upward include, or a folder the table does not know, fails it with a
// line naming the file, the include and what the layer may include.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_test_util.h"
#include "test_util.h"

namespace minfer {
namespace {

std::string check(const std::filesystem::path& src) {
  const std::string script = std::string(MINFER_SOURCE_DIR) + "/cmake/check_layers.cmake";
  const test::CommandResult r = test::run_shell("cmake -DMINFER_LAYERS_SRC=" + src.string() + " -P " + script);
  return std::to_string(r.status) + "|" + r.out;
}

void write(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

TEST(Layers, TheSourceTreeKeepsItsLayers) {
  const std::string r = check(std::string(MINFER_SOURCE_DIR) + "/src");
  EXPECT_EQ(r.substr(0, 2), "0|") << r;
}

TEST(Layers, AnUpwardIncludeOrAnUnknownFolderFailsTheCheck) {
  const auto src = test::temp_dir() / "src";
  write(src / "core" / "a.h", "#pragma once\n#include \"core/b.h\"\n#include <vector>\n");
  write(src / "core" / "b.h", "#pragma once\n");
  write(src / "graph" / "g.h", "#pragma once\n#include \"core/a.h\"\n");
  write(src / "engine" / "e.cpp", "#include \"graph/g.h\"\n#include \"server/s.h\"\n");  // engine -> server: upward
  write(src / "server" / "s.h", "#pragma once\n#include \"engine/e.h\"\n");
  std::string r = check(src);
  EXPECT_NE(r.substr(0, 2), "0|") << r;
  EXPECT_NE(r.find("src/engine/e.cpp: #include \"server/s.h\": layer 'engine' may include only"), std::string::npos) << r;
  EXPECT_EQ(r.find("src/graph/g.h"), std::string::npos) << r;  // graph -> core is downward
  std::filesystem::remove(src / "engine" / "e.cpp");
  write(src / "engine" / "e.cpp", "#include \"graph/g.h\"\n");
  r = check(src);
  EXPECT_EQ(r.substr(0, 2), "0|") << r;
  write(src / "widgets" / "w.h", "#pragma once\n");
  r = check(src);
  EXPECT_NE(r.find("src/widgets/ is not in cmake/check_layers.cmake's layer table"), std::string::npos) << r;
}

}  // namespace
}  // namespace minfer
