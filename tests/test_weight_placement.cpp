// The weight-placement rule (graph/weight_placement.h): a pure function, checked here on the CPU.
#include <gtest/gtest.h>

#include <vector>

#include "gguf_test_util.h"
#include "graph/weight_placement.h"

namespace minfer {
namespace {

graph::WeightTensor tensor(const std::string& name, TensorType type, graph::Shape ne, uint64_t nbytes) {
  graph::WeightTensor w;
  w.name = name;
  w.type = type;
  w.ne = ne;
  w.n_dims = ne[1] == 1 ? 1 : 2;
  w.nbytes = nbytes;
  return w;
}

const std::vector<TensorType> kMatrixTypes = {TensorType::F32, TensorType::F16, TensorType::Q4_0,
                                              TensorType::Q8_0, TensorType::Q4_K};

TEST(WeightPlacement, SupportedMatrixIsUploadedRawWithItsFileSize) {
  const auto w = tensor("blk.0.attn_q.weight", TensorType::Q4_K, {256, 512, 1, 1}, 512 * 144);
  const WeightPlacement p = place_weight(w, kMatrixTypes);
  EXPECT_EQ(p.kind, WeightPlacementKind::RawUpload);
  EXPECT_EQ(p.device_bytes, 512u * 144u);  // the file bytes, not a dequantized copy
  EXPECT_TRUE(p.reason.empty());
}

TEST(WeightPlacement, HalfPrecisionMatrixStaysTwoBytesPerElement) {
  const auto w = tensor("output.weight", TensorType::F16, {256, 1000, 1, 1}, 256 * 1000 * 2);
  const WeightPlacement p = place_weight(w, kMatrixTypes);
  EXPECT_EQ(p.kind, WeightPlacementKind::RawUpload);
  EXPECT_EQ(p.device_bytes, 256u * 1000u * 2u);
}

TEST(WeightPlacement, OneDimensionalF32IsPlacedWhateverTheMatrixList) {
  const auto w = tensor("blk.3.attn_norm.weight", TensorType::F32, {896, 1, 1, 1}, 896 * 4);
  const WeightPlacement p = place_weight(w, std::vector<TensorType>{});
  EXPECT_EQ(p.kind, WeightPlacementKind::RawUpload);
  EXPECT_EQ(p.device_bytes, 896u * 4u);
}

TEST(WeightPlacement, OneDimensionalNonF32IsRefusedNamingTensorAndType) {
  const auto w = tensor("blk.3.attn_q.bias", TensorType::F16, {896, 1, 1, 1}, 896 * 2);
  const WeightPlacement p = place_weight(w, kMatrixTypes);
  EXPECT_EQ(p.kind, WeightPlacementKind::Refused);
  EXPECT_CONTAINS(p.reason, "blk.3.attn_q.bias");
  EXPECT_CONTAINS(p.reason, "f16");
  EXPECT_CONTAINS(p.reason, "must be f32");
}

TEST(WeightPlacement, UnsupportedMatrixTypeIsRefusedWithTheSupportedList) {
  const auto w = tensor("blk.3.ffn_down.weight", TensorType::Q2_K, {4864, 896, 1, 1}, 123);
  const WeightPlacement p = place_weight(w, kMatrixTypes, "CUDA");
  EXPECT_EQ(p.kind, WeightPlacementKind::Refused);
  EXPECT_EQ(p.device_bytes, 0u);
  EXPECT_CONTAINS(p.reason, "blk.3.ffn_down.weight: type q2_K has no CUDA kernel");
  EXPECT_CONTAINS(p.reason, "supported: f32, f16, q4_0, q8_0, q4_K");
}

TEST(WeightPlacement, EmptyKernelListRefusesEveryMatrix) {
  const auto w = tensor("token_embd.weight", TensorType::Q8_0, {256, 100, 1, 1}, 100 * 8 * 34);
  const WeightPlacement p = place_weight(w, std::vector<TensorType>{});
  EXPECT_EQ(p.kind, WeightPlacementKind::Refused);
  EXPECT_CONTAINS(p.reason, "supported: none");
}

TEST(WeightPlacement, ATensorWithHigherDimensionsIsAMatrixEvenWithNDimsOne) {
  // Shape decides, not the n_dims field: [256, 1, 4] is not a 1-D tensor.
  auto w = tensor("odd", TensorType::F16, {256, 1, 4, 1}, 256 * 4 * 2);
  w.n_dims = 1;
  EXPECT_EQ(place_weight(w, kMatrixTypes).kind, WeightPlacementKind::RawUpload);
  w.type = TensorType::BF16;
  EXPECT_EQ(place_weight(w, kMatrixTypes).kind, WeightPlacementKind::Refused);
}

TEST(WeightPlacement, IsPure) {
  const auto w = tensor("blk.0.ffn_up.weight", TensorType::Q4_0, {256, 64, 1, 1}, 64 * 8 * 18);
  const WeightPlacement a = place_weight(w, kMatrixTypes);
  const WeightPlacement b = place_weight(w, kMatrixTypes);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.device_bytes, b.device_bytes);
  EXPECT_EQ(a.reason, b.reason);
}

}  // namespace
}  // namespace minfer
