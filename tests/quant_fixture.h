// Loading one folder of ../shared/fixtures/quant/ (layout in that folder's README.md): the
// source matrix, ggml's blocks and dequantization, the activation and its quantized blocks, and
// the manifest.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/types.h"
#include "test_util.h"

namespace minfer::test {

inline constexpr const char* kQuantFixtureTypes[] = {"F16",  "BF16", "Q4_0", "Q4_1",
                                                     "Q5_0", "Q5_1", "Q8_0", "Q4_K",
                                                     "Q5_K", "Q6_K", "Q8_K"};

struct QuantFixture {
  std::string dir;  ///< "fixtures/quant/<TYPE>" under ../shared
  TensorType type{};
  int64_t rows = 0, cols = 0;
  std::vector<float> source;       ///< rows x cols
  std::vector<uint8_t> blocks;     ///< rows x row_bytes, ggml's encoding
  std::vector<float> dequant;      ///< rows x cols, ggml's dequantization of blocks
  std::vector<float> activation;   ///< cols
  std::vector<uint8_t> act_blocks; ///< activation in vec_dot_type (empty for Q8_K)
  nlohmann::json manifest;

  /// Loads every file; adds a test failure (and returns false) when one is missing or short.
  bool load(const std::string& type_name) {
    dir = "fixtures/quant/" + type_name;
    std::ifstream mf(shared_path(dir + "/manifest.json"));
    if (!mf) {
      ADD_FAILURE() << "cannot read " << shared_path(dir + "/manifest.json");
      return false;
    }
    manifest = nlohmann::json::parse(mf);
    const auto t = parse_type_name(manifest.at("type").get<std::string>());
    if (!t) {
      ADD_FAILURE() << "unknown type in manifest: " << manifest.at("type");
      return false;
    }
    type = *t;
    rows = manifest.at("rows").get<int64_t>();
    cols = manifest.at("cols").get<int64_t>();
    source = read_f32(shared_path(dir + "/source.f32"));
    blocks = read_bytes(shared_path(dir + "/blocks.bin"));
    dequant = read_f32(shared_path(dir + "/dequant.f32"));
    activation = read_f32(shared_path("fixtures/quant/activation.f32"));
    if (manifest.contains("dot")) act_blocks = read_bytes(shared_path(dir + "/act_blocks.bin"));
    const size_t n = static_cast<size_t>(rows * cols);
    const bool ok = source.size() == n && dequant.size() == n &&
                    blocks.size() == manifest.at("blocks_bytes").get<size_t>() &&
                    activation.size() == static_cast<size_t>(cols);
    if (!ok) ADD_FAILURE() << dir << ": a fixture file has an unexpected size";
    return ok;
  }

  size_t row_bytes() const { return manifest.at("row_bytes").get<size_t>(); }
  double rmse_per_row(int64_t r) const { return manifest.at("rmse_per_row").at(r).get<double>(); }
};

/// Root mean square of a - b over n values, in double.
inline double rmse(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    s += d * d;
  }
  return n > 0 ? std::sqrt(s / static_cast<double>(n)) : 0.0;
}

}  // namespace minfer::test
