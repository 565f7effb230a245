// The reference dot products on long generated rows: they follow the accumulation contract of
// quant_ref.h bit for bit (checked against an independent transcription of the contract for
// F16, F32, Q8_0 and Q4_K), and every type stays within the contract's error bound of the exact
// (f64) dot product of the dequantized rows.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace minfer {
namespace {

constexpr int64_t kN = 8192;  // 256 legacy blocks (8 per lane), 32 super-blocks (1 per lane)

std::vector<float> gaussian(uint32_t seed, float outlier_every = 0) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(kN);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = dist(gen);
    if (outlier_every > 0 && i % static_cast<size_t>(outlier_every) == 13) v[i] *= 8.0f;
  }
  return v;
}

/// The contract's steps 2 and 3 for a list of terms, written out independently.
float fold_32_lanes(const std::vector<float>& terms) {
  float lane[32] = {};
  for (size_t t = 0; t < terms.size(); ++t) lane[t % 32] += terms[t];
  for (int w = 16; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) lane[k] += lane[k + w];
  return lane[0];
}

struct Rows {
  std::vector<uint8_t> w, a;
};

Rows quantized_rows(TensorType type, uint32_t seed) {
  const TypeTraits& t = type_traits(type);
  const TypeTraits& act = type_traits(t.vec_dot_type);
  Rows r{std::vector<uint8_t>(row_bytes(type, kN)), std::vector<uint8_t>(row_bytes(act.type, kN))};
  const auto w = gaussian(seed);
  const auto a = gaussian(seed + 1000, 97);
  t.quantize_row(w.data(), r.w.data(), kN);
  act.quantize_row(a.data(), r.a.data(), kN);
  return r;
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

TEST(QuantDotContract, F32AndF16FollowTheLaneOrderBitForBit) {
  const auto w = gaussian(1), a = gaussian(2, 97);
  std::vector<float> terms(kN);
  for (int64_t i = 0; i < kN; ++i) terms[i] = w[i] * a[i];
  EXPECT_EQ(bits(type_traits(TensorType::F32).vec_dot(kN, w.data(), a.data())),
            bits(fold_32_lanes(terms)));

  std::vector<uint16_t> wh(kN), ah(kN);
  for (int64_t i = 0; i < kN; ++i) {
    wh[i] = fp32_to_fp16(w[i]);
    ah[i] = fp32_to_fp16(a[i]);
    terms[i] = fp16_to_fp32(wh[i]) * fp16_to_fp32(ah[i]);
  }
  EXPECT_EQ(bits(type_traits(TensorType::F16).vec_dot(kN, wh.data(), ah.data())),
            bits(fold_32_lanes(terms)));
}

TEST(QuantDotContract, Q8_0BlockTermsFollowTheLaneOrderBitForBit) {
  const Rows r = quantized_rows(TensorType::Q8_0, 3);
  const auto* w = reinterpret_cast<const block_q8_0*>(r.w.data());
  const auto* a = reinterpret_cast<const block_q8_0*>(r.a.data());
  std::vector<float> terms(kN / kQK);
  for (size_t b = 0; b < terms.size(); ++b) {
    int32_t isum = 0;
    for (int j = 0; j < kQK; ++j) isum += w[b].qs[j] * a[b].qs[j];
    terms[b] = (fp16_to_fp32(w[b].d) * fp16_to_fp32(a[b].d)) * static_cast<float>(isum);
  }
  EXPECT_EQ(bits(type_traits(TensorType::Q8_0).vec_dot(kN, r.w.data(), r.a.data())),
            bits(fold_32_lanes(terms)));
}

TEST(QuantDotContract, Q4_KSuperBlockTermsFollowTheLaneOrderBitForBit) {
  const Rows r = quantized_rows(TensorType::Q4_K, 4);
  const auto* w = reinterpret_cast<const block_q4_K*>(r.w.data());
  const auto* a = reinterpret_cast<const block_q8_K*>(r.a.data());
  std::vector<float> terms(kN / kQKK);
  for (size_t b = 0; b < terms.size(); ++b) {
    uint8_t q[kQKK];
    unpack_q4_K(w[b], q);
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      k4_scale_min(j, w[b].scales, &sc, &m);
      for (int l = 0; l < 32; ++l) isum += sc * q[32 * j + l] * a[b].qs[32 * j + l];
      for (int l = 0; l < 32; ++l) msum += m * a[b].qs[32 * j + l];  // = m * (two bsums)
    }
    const float scale = fp16_to_fp32(w[b].d) * a[b].d;
    const float offset = fp16_to_fp32(w[b].dmin) * a[b].d;
    terms[b] = scale * static_cast<float>(isum) - offset * static_cast<float>(msum);
  }
  EXPECT_EQ(bits(type_traits(TensorType::Q4_K).vec_dot(kN, r.w.data(), r.a.data())),
            bits(fold_32_lanes(terms)));
}

class QuantDotAccuracyTest : public ::testing::TestWithParam<TensorType> {};

TEST_P(QuantDotAccuracyTest, IsWithinTheContractBoundOfTheExactDot) {
  const TensorType type = GetParam();
  const TypeTraits& t = type_traits(type);
  const Rows r = quantized_rows(type, 10 + static_cast<uint32_t>(type));
  std::vector<float> w(kN), a(kN);
  t.dequantize_row(r.w.data(), w.data(), kN);
  type_traits(t.vec_dot_type).dequantize_row(r.a.data(), a.data(), kN);
  double exact = 0, s = 0;
  for (int64_t i = 0; i < kN; ++i) {
    exact += static_cast<double>(w[i]) * a[i];
    s += std::fabs(static_cast<double>(w[i]) * a[i]);
  }
  // Terms per lane k = n_terms / 32; lane sums cost (k - 1) roundings, the fold 5, each term's
  // own formula at most 4 (relative to the parts, which are bounded by S): (k + 8) * 2^-24 * S.
  const double terms = static_cast<double>(kN / t.block_size);
  const double bound = (terms / 32 + 8) * 0x1.0p-24 * s;
  const float ours = t.vec_dot(kN, r.w.data(), r.a.data());
  EXPECT_LE(std::fabs(ours - exact), bound) << type_name(type) << " exact " << exact << " S " << s;
}

const TensorType kWeightTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                   TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                                   TensorType::Q5_1, TensorType::Q8_0, TensorType::Q4_K,
                                   TensorType::Q5_K, TensorType::Q6_K};

INSTANTIATE_TEST_SUITE_P(WeightTypes, QuantDotAccuracyTest, ::testing::ValuesIn(kWeightTypes),
                         [](const ::testing::TestParamInfo<TensorType>& param_info) {
                           return std::string(type_name(param_info.param));
                         });

}  // namespace
}  // namespace minfer
