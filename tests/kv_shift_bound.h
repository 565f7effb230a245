// The rounding bound of a K row shifted by Engine::seq_add against a fresh prefill at the new
// positions (derived in tests/test_kv_sequences.cpp's file comment and docs/session-format.md),
// shared by the CPU and CUDA tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/types.h"

namespace minfer::test {

/// Upper bound of |shifted - fresh| for element j of a K row (see the file comment).
struct ShiftBound {
  TensorType type;
  int64_t head_dim, n_rot;
  float theta;
  double bound(const std::vector<float>& fresh, int64_t j, int32_t p, int32_t d) const {
    const double u = std::ldexp(1.0, -24);
    const int64_t h0 = j / head_dim * head_dim, i = j - h0, half = n_rot / 2;
    const int64_t pair = i % half;
    const double a = fresh[static_cast<size_t>(h0 + pair)], b = fresh[static_cast<size_t>(h0 + pair + half)];
    double amax = 0;
    for (int64_t k = 0; k < head_dim; ++k) amax = std::max(amax, std::fabs(static_cast<double>(fresh[static_cast<size_t>(h0 + k)])));
    const double s = std::pow(static_cast<double>(theta), -2.0 / static_cast<double>(n_rot));
    const auto dtheta = [&](int32_t x) { return (2.0 * static_cast<double>(pair) + 3.0) * u * std::fabs(x) * std::pow(s, pair) + 2 * u; };
    double store = 0;
    if (type == TensorType::F16) store = std::ldexp(1.0, -11) * (std::hypot(a, b) + std::sqrt(2.0) * amax * 0.01) + std::ldexp(1.0, -24);
    if (type == TensorType::Q8_0) {
      const double A = std::sqrt(2.0) * amax * 1.02;
      store = std::sqrt(2.0) * (A / 254 + A * std::ldexp(1.0, -11));
    }
    // r from the fresh (rounded) values, widened by one store rounding.
    const double r = std::hypot(a, b) + store;
    return r * (dtheta(p) + dtheta(d) + dtheta(p + d) + 18 * u) + 3 * store;
  }
};

}  // namespace minfer::test
