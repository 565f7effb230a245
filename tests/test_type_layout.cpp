// type_block_layout: block size and bytes per block of every ggml type, checked against the
// quant fixtures' manifests (written by a program linking ggml) and against the bits-per-weight
// figures ggml-common.h documents for each block struct.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "core/types.h"
#include "quant/quant.h"
#include "test_util.h"

namespace minfer {
namespace {

TEST(TypeLayout, EveryTypeIdGgmlDefinesHasALayoutAndNoOtherDoes) {
  for (uint32_t id = 0; id < 64; ++id) {
    int64_t bs = 0;
    size_t bb = 0;
    const bool has = type_block_layout(static_cast<TensorType>(id), &bs, &bb);
    EXPECT_EQ(has, is_known_type_id(id)) << "type id " << id;
    if (has) {
      EXPECT_GT(bs, 0) << id;
      EXPECT_GT(bb, 0u) << id;
    }
  }
  // ids ggml removed (Q4_2, Q4_3, the Q4_0_x_y and IQ4_NL_x_y repacks) have none.
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u})
    EXPECT_FALSE(type_block_layout(static_cast<TensorType>(id), nullptr, nullptr)) << id;
}

TEST(TypeLayout, MatchesTheQuantFixtureManifests) {
  MINFER_REQUIRE_SHARED("fixtures/quant/Q8_K/manifest.json");
  int checked = 0;
  for (const char* t : {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K",
                        "Q6_K", "Q8_K"}) {
    const auto path = test::shared_path(std::string("fixtures/quant/") + t + "/manifest.json");
    if (!std::filesystem::exists(path)) continue;
    std::ifstream in(path);
    const auto m = nlohmann::json::parse(in);
    const auto type = static_cast<TensorType>(m.at("ggml_type_id").get<uint32_t>());
    EXPECT_EQ(parse_type_name(t), type) << t;
    int64_t bs = 0;
    size_t bb = 0;
    ASSERT_TRUE(type_block_layout(type, &bs, &bb)) << t;
    EXPECT_EQ(bs, m.at("block_size").get<int64_t>()) << t;
    EXPECT_EQ(bb, m.at("bytes_per_block").get<size_t>()) << t;
    ++checked;
  }
  EXPECT_EQ(checked, 11);
}

TEST(TypeLayout, BitsPerWeightMatchGgmlCommonDocumentation) {
  // bpw = 8 * bytes per block / block size. ggml-common.h states it for the K-quants, IQ and
  // TQ types ("Effectively 2.625 bits per weight", "2.0625 bpw", ...); for the others it follows
  // from the block struct (e.g. block_mxfp4: 1 + 16 bytes per 32 elements = 4.25).
  const struct {
    TensorType type;
    double bpw;
  } cases[] = {
      {TensorType::F32, 32},        {TensorType::F16, 16},       {TensorType::BF16, 16},
      {TensorType::F64, 64},        {TensorType::I8, 8},         {TensorType::I16, 16},
      {TensorType::I32, 32},        {TensorType::I64, 64},       {TensorType::Q4_0, 4.5},
      {TensorType::Q4_1, 5.0},      {TensorType::Q5_0, 5.5},     {TensorType::Q5_1, 6.0},
      {TensorType::Q8_0, 8.5},      {TensorType::Q8_1, 9.0},     {TensorType::Q2_K, 2.625},
      {TensorType::Q3_K, 3.4375},   {TensorType::Q4_K, 4.5},     {TensorType::Q5_K, 5.5},
      {TensorType::Q6_K, 6.5625},   {TensorType::Q8_K, 9.125},   {TensorType::IQ2_XXS, 2.0625},
      {TensorType::IQ2_XS, 2.3125}, {TensorType::IQ2_S, 2.5625}, {TensorType::IQ3_XXS, 3.0625},
      {TensorType::IQ3_S, 3.4375},  {TensorType::IQ1_S, 1.5625}, {TensorType::IQ1_M, 1.75},
      {TensorType::IQ4_NL, 4.5},    {TensorType::IQ4_XS, 4.25},  {TensorType::TQ1_0, 1.6875},
      {TensorType::TQ2_0, 2.0625},  {TensorType::MXFP4, 4.25},   {TensorType::NVFP4, 4.5},
      {TensorType::Q1_0, 1.125},    {TensorType::Q2_0, 2.25},
  };
  for (const auto& c : cases) {
    int64_t bs = 0;
    size_t bb = 0;
    ASSERT_TRUE(type_block_layout(c.type, &bs, &bb)) << type_name(c.type);
    EXPECT_EQ(8.0 * static_cast<double>(bb) / static_cast<double>(bs), c.bpw) << type_name(c.type);
  }
  EXPECT_EQ(std::size(cases), 35u);  // every type ggml defines
}

TEST(TypeLayout, BlockSizesAreGgmlsQkConstants) {
  // QK4_0 = QK8_0 = QK4_NL = QK_MXFP4 = 32, QK_NVFP4 = QK2_0 = 64, QK1_0 = 128, QK_K = 256.
  const struct {
    TensorType type;
    int64_t block;
  } cases[] = {{TensorType::Q4_0, 32}, {TensorType::IQ4_NL, 32}, {TensorType::MXFP4, 32},
               {TensorType::NVFP4, 64}, {TensorType::Q2_0, 64}, {TensorType::Q1_0, 128},
               {TensorType::Q2_K, 256}, {TensorType::IQ1_M, 256}, {TensorType::TQ1_0, 256},
               {TensorType::BF16, 1}};
  for (const auto& c : cases) {
    int64_t bs = 0;
    ASSERT_TRUE(type_block_layout(c.type, &bs, nullptr));
    EXPECT_EQ(bs, c.block) << type_name(c.type);
  }
}

}  // namespace
}  // namespace minfer
