// encode_rows (convert/row_encode.h), the writer behind `minfer quantize` and `minfer synth`:
// the float types refuse NaN/inf weights (as the block quantizers do) and F16 refuses values that
// would round to infinity, with the row and element named; finite rows convert exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "convert/row_encode.h"
#include "core/error.h"
#include "core/fp16.h"
#include "core/thread_pool.h"
#include "quant/quant.h"

namespace minfer {
namespace {

/// Encodes 3 rows of 8 values (row r element j = base + r + j / 8) with `bad` written at
/// row 1, element 5; returns the error text ("" when none).
std::string encode_with(TensorType type, float bad, std::vector<uint8_t>* out = nullptr) {
  ThreadPool pool(2);
  std::vector<uint8_t> dst(row_bytes(type, 8) * 3);
  const convert::RowSource src = [bad](int64_t row, float* x) {
    for (int j = 0; j < 8; ++j) x[j] = 1.0f + static_cast<float>(row) + static_cast<float>(j) / 8.0f;
    if (row == 1) x[5] = bad;
  };
  try {
    convert::encode_rows(type, 8, 3, src, dst.data(), pool, "blk.0.attn_q.weight");
  } catch (const Error& e) {
    return e.what();
  }
  if (out != nullptr) *out = dst;
  return "";
}

TEST(RowEncode, float_types_refuse_nan_and_inf_naming_the_tensor_row_and_element) {
  for (const TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()}) {
      const std::string err = encode_with(t, bad);
      EXPECT_NE(err.find("blk.0.attn_q.weight: row 1:"), std::string::npos) << type_name(t) << ": " << err;
      EXPECT_NE(err.find("element 5"), std::string::npos) << type_name(t) << ": " << err;
      EXPECT_NE(err.find("not finite"), std::string::npos) << type_name(t) << ": " << err;
    }
  }
}

TEST(RowEncode, f16_and_bf16_refuse_values_that_round_to_infinity_and_keep_the_largest_finite) {
  const std::string err = encode_with(TensorType::F16, 70000.0f);
  EXPECT_NE(err.find("row 1:"), std::string::npos) << err;
  EXPECT_NE(err.find("beyond the half-precision range"), std::string::npos) << err;
  EXPECT_NE(err.find("70000"), std::string::npos) << err;
  std::vector<uint8_t> out;
  ASSERT_EQ(encode_with(TensorType::F16, 65504.0f, &out), "");  // the largest finite half
  uint16_t h = 0;
  std::memcpy(&h, out.data() + row_bytes(TensorType::F16, 8) + 5 * 2, 2);
  EXPECT_EQ(fp16_to_fp32(h), 65504.0f);
  EXPECT_EQ(encode_with(TensorType::BF16, 70000.0f), "") << "bf16 has the f32 range";
  const std::string bf = encode_with(TensorType::BF16, std::numeric_limits<float>::max());
  EXPECT_NE(bf.find("rounds to infinity in bfloat16"), std::string::npos) << bf;
  EXPECT_EQ(encode_with(TensorType::BF16, 3.3e38f), "") << "rounds to the largest finite bfloat16";
}

}  // namespace
}  // namespace minfer
