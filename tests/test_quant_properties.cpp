// Properties of the reference quantizers on generated rows with awkward values (all equal, one
// huge outlier, values near the half-precision subnormals, mixed block scales, all positive):
// quantize -> dequantize stays within an error bound derived from each type's format; the
// outputs are finite; an all-zero row comes back exactly zero. The generator is a fixed-seed
// splitmix64 with Box-Muller, so every run sees the same rows on every platform.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "quant/quant.h"

namespace minfer {
namespace {

constexpr int64_t kN = 1024;

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  float normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

 private:
  uint64_t s_;
};

struct Case {
  std::string name;
  std::vector<float> x;
};

std::vector<Case> awkward_rows() {
  std::vector<Case> cases;
  auto gaussian = [](uint64_t seed, float scale) {
    Rng r(seed);
    std::vector<float> v(kN);
    for (auto& x : v) x = scale * r.normal();
    return v;
  };
  cases.push_back({"normal(0,1)", gaussian(1, 1.0f)});
  for (float c : {1.0f, -3.7f, 0.01f, 1000.0f, -2e-3f})
    cases.push_back({"all equal " + std::to_string(c), std::vector<float>(kN, c)});
  {
    auto v = gaussian(2, 1.0f);
    v[517] = 1000.0f;
    v[900] = -30000.0f;
    cases.push_back({"outliers 1000 and -30000", v});
  }
  cases.push_back({"tiny normal(0,1e-5)", gaussian(3, 1e-5f)});
  cases.push_back({"tiny normal(0,1e-7)", gaussian(4, 1e-7f)});
  {
    auto v = gaussian(5, 1.0f);
    Rng r(6);
    for (int64_t b = 0; b < kN / 32; ++b) {
      const float s = static_cast<float>(std::pow(10.0, -3.0 + 4.0 * r.uniform()));
      for (int j = 0; j < 32; ++j) v[b * 32 + j] *= s;
    }
    cases.push_back({"block scales 1e-3..10", v});
  }
  {
    Rng r(7);
    std::vector<float> v(kN);
    for (auto& x : v) x = static_cast<float>(0.5 + r.uniform());
    cases.push_back({"uniform(0.5,1.5)", v});
  }
  cases.push_back({"normal(0,300)", gaussian(8, 300.0f)});
  return cases;
}

/// |v - half(v)| bound: relative 2^-11 for normal halves, 2^-25 absolute below them.
double half_err(double v) { return std::max(std::fabs(v) * 0x1.0p-11, 0x1.0p-25); }

double max_abs(const float* x, int n) {
  double a = 0;
  for (int i = 0; i < n; ++i) a = std::max(a, std::fabs(static_cast<double>(x[i])));
  return a;
}

/// Per-element bound on |dequantize(quantize(x)) - x| from the type's format (documented per
/// case), for element i of row x. `slack` covers f32 rounding of the scale arithmetic.
double error_bound(TensorType t, const std::vector<float>& x, int64_t i) {
  const double xi = std::fabs(static_cast<double>(x[i]));
  auto block = [&](int size) { return x.data() + (i / size) * size; };
  auto range_with_zero = [](const float* b, int n, double* lo_out) {
    double lo = 0, hi = 0;
    for (int j = 0; j < n; ++j) {
      lo = std::min(lo, static_cast<double>(b[j]));
      hi = std::max(hi, static_cast<double>(b[j]));
    }
    if (lo_out) *lo_out = lo;
    return hi - lo;
  };
  switch (t) {
    case TensorType::F16: return half_err(xi);
    case TensorType::BF16: return xi * 0x1.0p-8;  // 8 significant bits
    case TensorType::Q8_0:
    case TensorType::Q8_1: {  // d = A/127, rounding to nearest: d/2, plus the half-rounded d
      const double d = max_abs(block(32), 32) / 127;
      return d / 2 + 127 * half_err(d) + 1e-6 * d * 127;
    }
    case TensorType::Q8_K: {  // f32 d = A/127
      const double d = max_abs(block(256), 256) / 127;
      return d / 2 * (1 + 1e-5);
    }
    case TensorType::Q4_0:
    case TensorType::Q5_0: {  // d = A/-L; the value opposite the max is clamped: one full step
      const int levels = t == TensorType::Q4_0 ? 8 : 16;
      const double d = max_abs(block(32), 32) / levels;
      return d + levels * half_err(d) + 1e-6 * d * levels;
    }
    case TensorType::Q4_1:
    case TensorType::Q5_1: {  // d = (max - min)/nmax, round to nearest, half-rounded d and m
      const int nmax = t == TensorType::Q4_1 ? 15 : 31;
      const float* b = block(32);
      const double lo = *std::min_element(b, b + 32), hi = *std::max_element(b, b + 32);
      const double d = (hi - lo) / nmax;
      return d / 2 + nmax * half_err(d) + half_err(lo) + 1e-6 * (std::fabs(lo) + hi - lo);
    }
    case TensorType::Q4_K:
    case TensorType::Q5_K: {
      // Sub-block j covers [-M, -M + nmax S]. Choosing sc = ceil(S_j / d) keeps the whole range
      // with a step of at most S_j + d, and rounding m costs dmin/2, where S_j = R_j / nmax,
      // d = S_max / 63, dmin = M_max / 63: max error (S_j + d)/2 + dmin/2. The search minimises
      // the squared error, not the maximum, so allow 1.5 x that, plus the half rounding of d and
      // dmin (absolute 2^-25 in the subnormal range, times the largest sc*q and m).
      const int nmax = t == TensorType::Q4_K ? 15 : 31;
      const float* sb = block(256);
      double r_max = 0, m_max = 0, lo = 0;
      for (int j = 0; j < 8; ++j) {
        r_max = std::max(r_max, range_with_zero(sb + 32 * j, 32, &lo));
        m_max = std::max(m_max, -lo);
      }
      const double s_j = range_with_zero(block(32), 32, nullptr) / nmax;
      const double d = r_max / nmax / 63, dmin = m_max / 63;
      return 1.5 * ((s_j + d) / 2 + dmin / 2) + 63.0 * (nmax + 1) * (half_err(d) + half_err(dmin));
    }
    case TensorType::Q6_K: {
      // Levels [-32, 31]: S_g = A_g / 31 covers the sub-block; sc rounding adds d / 2 to the
      // step, d = S_max / 127. Same 1.5 x allowance and half rounding of d as above.
      const double a_g = max_abs(block(16), 16), a_max = max_abs(block(256), 256);
      const double s_g = a_g / 31, d = a_max / 31 / 127;
      return 1.5 * (s_g + d) / 2 * 32 / 31 + 128.0 * 32 * half_err(d);
    }
    default: return 0;
  }
}

class QuantPropertyTest : public ::testing::TestWithParam<TensorType> {};

TEST_P(QuantPropertyTest, RoundTripErrorStaysWithinTheFormatsBound) {
  const TypeTraits& t = type_traits(GetParam());
  std::vector<uint8_t> packed(row_bytes(t.type, kN));
  std::vector<float> back(kN);
  for (const Case& c : awkward_rows()) {
    t.quantize_row(c.x.data(), packed.data(), kN);
    t.dequantize_row(packed.data(), back.data(), kN);
    double worst = 0;  // largest error / bound, reported on failure
    for (int64_t i = 0; i < kN; ++i) {
      ASSERT_TRUE(std::isfinite(back[i])) << type_name(t.type) << " " << c.name << " at " << i;
      const double err = std::fabs(static_cast<double>(back[i]) - c.x[i]);
      const double bound = error_bound(t.type, c.x, i);
      worst = std::max(worst, err / bound);
      ASSERT_LE(err, bound) << type_name(t.type) << " " << c.name << " element " << i << " x "
                            << c.x[i] << " got " << back[i];
    }
    RecordProperty(c.name, std::to_string(worst));
  }
}

TEST_P(QuantPropertyTest, AllEqualRowsComeBackWithinOneHalfRounding) {
  // A constant is representable by every block type up to the half rounding of one scale
  // (2^-11 relative; the K-quants can use the largest 6-/8-bit sub-block scale exactly), and
  // by F16/BF16 up to their own rounding (2^-11, 2^-8). Bound: 2^-10 relative, 2^-8 for BF16,
  // plus, when the scale is a subnormal half (c = 0.01 for the K-quants), its absolute rounding
  // 2^-25 times the largest multiplier of the scale (sc * q).
  const TypeTraits& t = type_traits(GetParam());
  const double rel = t.type == TensorType::BF16 ? 0x1.0p-8 : 0x1.0p-10;
  double mult = 1;
  switch (t.type) {
    case TensorType::Q4_0: mult = 8; break;
    case TensorType::Q5_0: mult = 16; break;
    case TensorType::Q8_0: case TensorType::Q8_1: mult = 127; break;
    case TensorType::Q4_K: mult = 63 * 15; break;
    case TensorType::Q5_K: mult = 63 * 31; break;
    case TensorType::Q6_K: mult = 128 * 32; break;
    default: break;
  }
  std::vector<uint8_t> packed(row_bytes(t.type, kN));
  std::vector<float> back(kN);
  for (float c : {1.0f, -3.7f, 0.01f, 1000.0f, -2e-3f, 0.25f}) {
    const std::vector<float> x(kN, c);
    t.quantize_row(x.data(), packed.data(), kN);
    t.dequantize_row(packed.data(), back.data(), kN);
    for (int64_t i = 0; i < kN; ++i)
      ASSERT_LE(std::fabs(back[i] - c), std::fabs(c) * rel + mult * 0x1.0p-25)
          << type_name(t.type) << " c " << c;
  }
}

TEST_P(QuantPropertyTest, AllZeroRowIsExactlyZero) {
  const TypeTraits& t = type_traits(GetParam());
  std::vector<uint8_t> packed(row_bytes(t.type, kN), 0xA5);  // garbage that must be overwritten
  std::vector<float> back(kN, 1.0f);
  const std::vector<float> x(kN, 0.0f);
  t.quantize_row(x.data(), packed.data(), kN);
  t.dequantize_row(packed.data(), back.data(), kN);
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(back[i], 0.0f) << type_name(t.type) << " at " << i;
}

const TensorType kAllTypes[] = {TensorType::F16,  TensorType::BF16, TensorType::Q4_0,
                                TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                TensorType::Q8_0, TensorType::Q8_1, TensorType::Q4_K,
                                TensorType::Q5_K, TensorType::Q6_K, TensorType::Q8_K};

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantPropertyTest, ::testing::ValuesIn(kAllTypes),
                         [](const ::testing::TestParamInfo<TensorType>& param_info) {
                           return std::string(type_name(param_info.param));
                         });

}  // namespace
}  // namespace minfer
