// minfer's Q6_K quantizer: a least-squares search for the 16 signed 8-bit sub-block scales and
// the super-block d (the method is described in kquant_search.h). Model of one element e of
// sub-block g: y = (d * sc_g) * (q_e - 32), q in [0, 63], sc in [-128, 127], d a half
// (blocks.h). The level range [-32, 31] is asymmetric: the sign of a sub-block's scale decides
// which side gets the extra level, and the search tries both.
#include <cmath>
#include <limits>

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

constexpr int kSub = 16;      // elements per sub-block
constexpr int kNumSub = 16;   // sub-blocks per super-block
constexpr int kLevelMin = -32, kLevelMax = 31;

/// Best levels (signed, in [-32, 31]) for `scale` and the exact squared error of y = scale * l.
double requantize(const float* x, int len, float scale, int8_t* l) {
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  double err = 0.0;
  for (int i = 0; i < len; ++i) {
    const int v = round_even_clamped(x[i] * inv, kLevelMin, kLevelMax);
    l[i] = static_cast<int8_t>(v);
    const float y = scale * static_cast<float>(v);
    const double e = static_cast<double>(y) - x[i];
    err += e * e;
  }
  return err;
}

/// Least-squares scale for fixed levels: sum(l x) / sum(l^2).
float fit_levels(const float* x, const int8_t* l, int len) {
  double ll = 0, lx = 0;
  for (int i = 0; i < len; ++i) {
    ll += static_cast<double>(l[i]) * l[i];
    lx += static_cast<double>(l[i]) * x[i];
  }
  return ll > 0 ? static_cast<float>(lx / ll) : 0.0f;
}

/// Step 1: continuous fit of one sub-block's signed scale.
float fit_sub_block(const float* x) {
  float amax = 0.0f, xm = 0.0f;
  for (int i = 0; i < kSub; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      xm = x[i];
    }
  }
  if (amax == 0.0f) return 0.0f;
  int8_t l[kSub];
  float best = 0.0f;
  double best_err = std::numeric_limits<double>::infinity();
  // The largest element lands near level -32 (extra level on its side) or near +31.
  for (const float target : {-32.0f, 31.0f}) {
    for (int k = -2; k <= 2; ++k) {
      const float level = target + (target < 0 ? -0.3f : 0.3f) * static_cast<float>(k);
      const float iscale = level / xm;
      for (int i = 0; i < kSub; ++i)
        l[i] = static_cast<int8_t>(round_even_clamped(x[i] * iscale, kLevelMin, kLevelMax));
      const float s = fit_levels(x, l, kSub);
      const double err = requantize(x, kSub, s, l);
      if (err < best_err) {
        best_err = err;
        best = s;
      }
    }
  }
  {  // one Lloyd step: levels for the scale, scale for the levels
    requantize(x, kSub, best, l);
    const float s = fit_levels(x, l, kSub);
    const double err = requantize(x, kSub, s, l);
    if (err < best_err) best = s;
  }
  return best;
}

struct State {
  uint16_t d = 0;
  int8_t sc[kNumSub] = {};
  int8_t l[kQKK] = {};
  double err = std::numeric_limits<double>::infinity();
};

float effective(uint16_t d, int sc) { return fp16_to_fp32(d) * static_cast<float>(sc); }

void requantize_all(const float* x, State& s) {
  s.err = 0.0;
  for (int g = 0; g < kNumSub; ++g)
    s.err += requantize(x + kSub * g, kSub, effective(s.d, s.sc[g]), s.l + kSub * g);
}

int nearest_int_scale(float v, float unit) {
  return unit != 0.0f ? round_even_clamped(v / unit, -128, 127) : 0;
}

/// Step 3a: each sub-block picks the best integer scale near its fit and its current one.
void refine_integers(const float* x, const float fits[kNumSub], State& s) {
  const float d = fp16_to_fp32(s.d);
  int8_t l[kSub];
  s.err = 0.0;
  for (int g = 0; g < kNumSub; ++g) {
    const int c = nearest_int_scale(fits[g], d);
    const int cand[4] = {c, c - 1, c + 1, s.sc[g]};
    double best = std::numeric_limits<double>::infinity();
    for (int sc : cand) {
      if (sc < -128 || sc > 127) continue;
      const double err = requantize(x + kSub * g, kSub, effective(s.d, sc), l);
      if (err < best) {
        best = err;
        s.sc[g] = static_cast<int8_t>(sc);
        for (int i = 0; i < kSub; ++i) s.l[kSub * g + i] = l[i];
      }
    }
    s.err += best;
  }
}

/// Refines a start state whose d is set: integers, then least-squares d and its half neighbours.
State refine(const float* x, const float fits[kNumSub], State cur) {
  for (int g = 0; g < kNumSub; ++g)
    cur.sc[g] = static_cast<int8_t>(nearest_int_scale(fits[g], fp16_to_fp32(cur.d)));
  requantize_all(x, cur);
  State best = cur;
  for (int pass = 0; pass < kRefineRounds; ++pass) {
    refine_integers(x, fits, cur);
    if (cur.err < best.err) best = cur;
    double aa = 0, ax = 0;  // y = d * (sc l): least-squares d
    for (int e = 0; e < kQKK; ++e) {
      const double a = static_cast<double>(cur.sc[e / kSub]) * cur.l[e];
      aa += a * a;
      ax += a * x[e];
    }
    if (!(aa > 0)) break;
    const uint16_t dh = fp32_to_fp16(static_cast<float>(ax / aa));
    State trial = cur;
    State round_best;
    for (int k = -1; k <= 1; ++k) {
      trial.d = half_neighbor(dh, k);
      requantize_all(x, trial);
      if (trial.err < round_best.err) round_best = trial;
    }
    cur = round_best;
    if (cur.err < best.err) best = cur;
  }
  return best;
}

State search_super_block(int64_t block, const float* x) {
  float fits[kNumSub];
  float big = 0.0f;  // the fit of largest magnitude
  for (int g = 0; g < kNumSub; ++g) {
    fits[g] = fit_sub_block(x + kSub * g);
    if (std::fabs(fits[g]) > std::fabs(big)) big = fits[g];
  }
  // Two starts: the largest scale at +127 or -128 (then d has the opposite sign of it).
  State a, b;
  a.d = half_field(TensorType::Q6_K, block, "d", std::fabs(big) / 127.0f);
  b.d = half_field(TensorType::Q6_K, block, "d", -big / 128.0f);
  a = refine(x, fits, a);
  b = refine(x, fits, b);
  return b.err < a.err ? b : a;
}

}  // namespace

void quantize_row_q6_K(const float* src, void* dst, int64_t n) {
  constexpr TensorType kType = TensorType::Q6_K;
  const int64_t nb = blocks_in_row("quantize", kType, n, kQKK);
  auto* b = static_cast<block_q6_K*>(dst);
  uint8_t q[kQKK];
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kQKK;
    check_finite(kType, x, kQKK, i * kQKK);
    const State s = search_super_block(i, x);
    for (int e = 0; e < kQKK; ++e) q[e] = static_cast<uint8_t>(s.l[e] + 32);
    pack_q6_K(q, &b[i]);
    for (int g = 0; g < kNumSub; ++g) b[i].scales[g] = s.sc[g];
    b[i].d = s.d;
  }
}

}  // namespace minfer::ref
