// minfer's Q4_K / Q5_K quantizer: a least-squares search for the sub-block scales and mins and
// the super-block d / dmin (the method is described in kquant_search.h). Model of one element e
// of sub-block j: y = (d * sc_j) * q_e - (dmin * m_j), q in [0, nmax] (15 or 31), sc, m in
// [0, 63], d and dmin halves >= 0 (blocks.h).
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/fp16.h"
#include "quant/blocks.h"
#include "quant/kquant_search.h"
#include "quant/quant_ref.h"
#include "quant/rounding.h"
#include "quant/row_check.h"

namespace minfer::ref {
namespace {

/// Rounds of step 3 (integers, then super-block scale); more rounds changed the RMSE by < 0.1%.
constexpr int kRefineRounds = 2;

using quant_detail::blocks_in_row;
using quant_detail::check_finite;
using quant_detail::half_field;
using quant_detail::half_neighbor;
using quant_detail::round_even_clamped;

constexpr int kSub = 32;       // elements per sub-block
constexpr int kNumSub = 8;     // sub-blocks per super-block
constexpr int kScaleMax = 63;  // 6-bit scales and mins

/// x ~ scale * q - offset.
struct Affine {
  float scale = 0.0f;
  float offset = 0.0f;
};

/// Best levels for (scale, offset) and the exact squared error of y = scale * q - offset.
double requantize(const float* x, int len, Affine f, int nmax, uint8_t* q) {
  const float inv = f.scale > 0.0f ? 1.0f / f.scale : 0.0f;
  double err = 0.0;
  for (int i = 0; i < len; ++i) {
    const int l = round_even_clamped((x[i] + f.offset) * inv, 0, nmax);
    q[i] = static_cast<uint8_t>(l);
    const float y = f.scale * static_cast<float>(l) - f.offset;
    const double e = static_cast<double>(y) - x[i];
    err += e * e;
  }
  return err;
}

/// Least-squares (scale, offset) >= 0 for fixed levels q: minimises sum (s q - o - x)^2. The
/// problem is a convex quadratic in (s, b = -o) over the quadrant s >= 0, b <= 0: the
/// unconstrained optimum when feasible, else the better of the two edge optima.
Affine fit_levels(const float* x, const uint8_t* q, int len) {
  double sq = 0, sqq = 0, sx = 0, sqx = 0;
  for (int i = 0; i < len; ++i) {
    sq += q[i];
    sqq += static_cast<double>(q[i]) * q[i];
    sx += x[i];
    sqx += static_cast<double>(q[i]) * x[i];
  }
  const double n = len;
  // Squared error up to the constant sum x^2.
  auto cost = [&](double s, double b) {
    return s * s * sqq + 2 * s * b * sq + n * b * b - 2 * s * sqx - 2 * b * sx;
  };
  const double det = n * sqq - sq * sq;
  if (det > 0) {
    const double s = (n * sqx - sq * sx) / det;
    const double b = (sqq * sx - sq * sqx) / det;
    if (s >= 0 && b <= 0) return {static_cast<float>(s), static_cast<float>(-b)};
  }
  const double s_edge = sqq > 0 ? std::fmax(0.0, sqx / sqq) : 0.0;  // b = 0
  const double b_edge = std::fmin(0.0, sx / n);                      // s = 0
  if (cost(s_edge, 0.0) <= cost(0.0, b_edge)) return {static_cast<float>(s_edge), 0.0f};
  return {0.0f, static_cast<float>(-b_edge)};
}

/// Step 1: continuous fit of one sub-block.
Affine fit_sub_block(const float* x, int nmax) {
  float lo = 0.0f, hi = x[0];
  for (int i = 0; i < kSub; ++i) {
    lo = std::fmin(lo, x[i]);
    hi = std::fmax(hi, x[i]);
  }
  if (!(hi > lo)) return {0.0f, -lo};  // constant sub-block (zero or negative)
  uint8_t q[kSub];
  Affine best;
  double best_err = std::numeric_limits<double>::infinity();
  for (int k = -3; k <= 3; ++k) {  // inverse scales around nmax / range
    const float iscale = (static_cast<float>(nmax) + 0.3f * static_cast<float>(k)) / (hi - lo);
    for (int i = 0; i < kSub; ++i)
      q[i] = static_cast<uint8_t>(round_even_clamped((x[i] - lo) * iscale, 0, nmax));
    const Affine f = fit_levels(x, q, kSub);
    const double err = requantize(x, kSub, f, nmax, q);
    if (err < best_err) {
      best_err = err;
      best = f;
    }
  }
  for (int it = 0; it < 4; ++it) {  // Lloyd: levels for the fit, fit for the levels
    requantize(x, kSub, best, nmax, q);
    const Affine f = fit_levels(x, q, kSub);
    const double err = requantize(x, kSub, f, nmax, q);
    if (!(err < best_err)) break;
    best_err = err;
    best = f;
  }
  return best;
}

/// A candidate encoding of one super-block.
struct State {
  uint16_t d = 0, dmin = 0;
  uint8_t sc[kNumSub] = {}, m[kNumSub] = {};
  uint8_t q[kQKK] = {};
  double err = std::numeric_limits<double>::infinity();
};

/// The sub-block's scale and offset exactly as dequantization forms them.
Affine effective(uint16_t d, uint16_t dmin, int sc, int m) {
  return {fp16_to_fp32(d) * static_cast<float>(sc), fp16_to_fp32(dmin) * static_cast<float>(m)};
}

/// Requantizes every sub-block of `s` for its current d, dmin, sc, m and sets s.err.
void requantize_all(const float* x, int nmax, State& s) {
  s.err = 0.0;
  for (int j = 0; j < kNumSub; ++j)
    s.err += requantize(x + kSub * j, kSub, effective(s.d, s.dmin, s.sc[j], s.m[j]), nmax,
                        s.q + kSub * j);
}

int nearest_int_scale(float v, float unit) {
  return unit > 0.0f ? round_even_clamped(v / unit, 0, kScaleMax) : 0;
}

/// Step 3a: each sub-block picks the best integer (sc, m) near its fit and its current values.
void refine_integers(const float* x, int nmax, const Affine fits[kNumSub], State& s) {
  const float d = fp16_to_fp32(s.d), dmin = fp16_to_fp32(s.dmin);
  uint8_t q[kSub];
  s.err = 0.0;
  for (int j = 0; j < kNumSub; ++j) {
    const int sc0 = nearest_int_scale(fits[j].scale, d);
    const int m0 = nearest_int_scale(fits[j].offset, dmin);
    const int sc_cand[4] = {sc0, sc0 - 1, sc0 + 1, s.sc[j]};
    const int m_cand[4] = {m0, m0 - 1, m0 + 1, s.m[j]};
    double best = std::numeric_limits<double>::infinity();
    for (int a = 0; a < 4; ++a) {
      const int sc = sc_cand[a];
      if (sc < 0 || sc > kScaleMax || (a == 3 && sc >= sc0 - 1 && sc <= sc0 + 1)) continue;
      for (int c = 0; c < 4; ++c) {
        const int m = m_cand[c];
        if (m < 0 || m > kScaleMax || (c == 3 && m >= m0 - 1 && m <= m0 + 1)) continue;
        const double err = requantize(x + kSub * j, kSub, effective(s.d, s.dmin, sc, m), nmax, q);
        if (err < best) {
          best = err;
          s.sc[j] = static_cast<uint8_t>(sc);
          s.m[j] = static_cast<uint8_t>(m);
          for (int i = 0; i < kSub; ++i) s.q[kSub * j + i] = q[i];
        }
      }
    }
    s.err += best;
  }
}

/// Step 3b: least-squares d, dmin >= 0 for the current integers and levels:
/// y = d * (sc q) - dmin * m. Returns false when there is nothing to fit.
bool fit_super_scales(const float* x, const State& s, double* d, double* dmin) {
  double aa = 0, ab = 0, bb = 0, ax = 0, bx = 0;
  for (int e = 0; e < kQKK; ++e) {
    const double a = static_cast<double>(s.sc[e / kSub]) * s.q[e];
    const double b = s.m[e / kSub];
    aa += a * a;
    ab += a * b;
    bb += b * b;
    ax += a * x[e];
    bx += b * x[e];
  }
  // minimise sum (d a - t b - x)^2 over d >= 0, t >= 0 (t = dmin)
  auto cost = [&](double dd, double t) {
    return dd * dd * aa - 2 * dd * t * ab + t * t * bb - 2 * dd * ax + 2 * t * bx;
  };
  const double det = aa * bb - ab * ab;
  if (det > 0) {
    const double dd = (ax * bb - bx * ab) / det;
    const double t = (ax * ab - bx * aa) / det;
    if (dd >= 0 && t >= 0) {
      *d = dd;
      *dmin = t;
      return true;
    }
  }
  if (aa <= 0 && bb <= 0) return false;
  const double d_edge = aa > 0 ? std::fmax(0.0, ax / aa) : 0.0;    // t = 0
  const double t_edge = bb > 0 ? std::fmax(0.0, -bx / bb) : 0.0;   // d = 0
  if (cost(d_edge, 0.0) <= cost(0.0, t_edge)) {
    *d = d_edge;
    *dmin = 0.0;
  } else {
    *d = 0.0;
    *dmin = t_edge;
  }
  return true;
}

/// Quantizes one super-block into the common fields of Q4_K / Q5_K.
State search_super_block(TensorType type, int64_t block, const float* x, int nmax) {
  Affine fits[kNumSub];
  float max_scale = 0.0f, max_offset = 0.0f;
  for (int j = 0; j < kNumSub; ++j) {
    fits[j] = fit_sub_block(x + kSub * j, nmax);
    max_scale = std::fmax(max_scale, fits[j].scale);
    max_offset = std::fmax(max_offset, fits[j].offset);
  }
  State cur;
  cur.d = half_field(type, block, "d", max_scale / kScaleMax);
  cur.dmin = half_field(type, block, "dmin", max_offset / kScaleMax);
  for (int j = 0; j < kNumSub; ++j) {
    cur.sc[j] = static_cast<uint8_t>(nearest_int_scale(fits[j].scale, fp16_to_fp32(cur.d)));
    cur.m[j] = static_cast<uint8_t>(nearest_int_scale(fits[j].offset, fp16_to_fp32(cur.dmin)));
  }
  requantize_all(x, nmax, cur);
  State best = cur;
  for (int pass = 0; pass < kRefineRounds; ++pass) {
    refine_integers(x, nmax, fits, cur);
    if (cur.err < best.err) best = cur;
    double d, dmin;
    if (!fit_super_scales(x, cur, &d, &dmin)) break;
    const uint16_t dh = fp32_to_fp16(static_cast<float>(d));
    const uint16_t mh = fp32_to_fp16(static_cast<float>(dmin));
    // The half values around the fit: d first (dmin at its nearest half), then dmin.
    State trial = cur;
    State round_best;
    trial.dmin = mh;
    for (int kd = -1; kd <= 1; ++kd) {
      trial.d = half_neighbor(dh, kd);
      requantize_all(x, nmax, trial);
      if (trial.err < round_best.err) round_best = trial;
    }
    trial.d = round_best.d;
    for (int km = -1; km <= 1; km += 2) {
      trial.dmin = half_neighbor(mh, km);
      requantize_all(x, nmax, trial);
      if (trial.err < round_best.err) round_best = trial;
    }
    cur = round_best;
    if (cur.err < best.err) best = cur;
  }
  return best;
}

template <typename Block>
void quantize_q45_K(TensorType type, const float* src, void* dst, int64_t n, int nmax) {
  const int64_t nb = blocks_in_row("quantize", type, n, kQKK);
  auto* b = static_cast<Block*>(dst);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kQKK;
    check_finite(type, x, kQKK, i * kQKK);
    const State s = search_super_block(type, i, x, nmax);
    b[i].d = s.d;
    b[i].dmin = s.dmin;
    k4_pack_scale_min(s.sc, s.m, b[i].scales);
    if constexpr (std::is_same_v<Block, block_q4_K>) {
      pack_q4_K(s.q, &b[i]);
    } else {
      pack_q5_K(s.q, &b[i]);
    }
  }
}

}  // namespace

void quantize_row_q4_K(const float* src, void* dst, int64_t n) {
  quantize_q45_K<block_q4_K>(TensorType::Q4_K, src, dst, n, 15);
}

void quantize_row_q5_K(const float* src, void* dst, int64_t n) {
  quantize_q45_K<block_q5_K>(TensorType::Q5_K, src, dst, n, 31);
}

}  // namespace minfer::ref
