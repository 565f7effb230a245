// RMS norm (per row and per head) and rotary position embedding (neox and normal layouts).
#include <cmath>

#include "cpu/kernels.h"
#include "graph/rope_math.h"

namespace minfer::cpu {
namespace {

using graph::Node;

// out = x / sqrt(mean(x^2) + eps) * w over `len` elements. Each square is a float product
// accumulated in double, the mean rounded to float, then x * scale * w in float: the
// arithmetic of llama.cpp's CPU rms_norm followed by its weight multiply.
inline void rms_norm_row(const float* x, const float* w, float* out, int64_t len, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < len; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(len));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < len; ++i) out[i] = (x[i] * scale) * w[i];
}

}  // namespace

void op_rms_norm(const OpContext& c, const Node& n, float* out) {
  const float* x = c.src(n, 0);
  const float* w = c.src(n, 1);
  const int64_t d = n.ne[0];
  const int64_t rows = n.n_elements() / d;
  c.pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) rms_norm_row(x + r * d, w, out + r * d, d, n.p.eps);
  });
}

void op_qk_norm(const OpContext& c, const Node& n, float* out) {
  const float* x = c.src(n, 0);
  const float* w = c.src(n, 1);
  const int64_t hd = n.p.head_dim;
  const int64_t heads = n.n_elements() / hd;
  c.pool.parallel_for(heads, 8, [&](int64_t h0, int64_t h1, int) {
    for (int64_t h = h0; h < h1; ++h) rms_norm_row(x + h * hd, w, out + h * hd, hd, n.p.eps);
  });
}

// Rotary embedding. Within each head, rotation pair i < n_rot/2 is (i, i + n_rot/2) in the NEOX
// layout (Qwen2/Qwen3) and (2i, 2i + 1) in the normal layout (Llama, Mistral); its angle is
// rope_angle(pos * base^(-2i/n_rot), i, ...) (graph/rope_math.h: frequency factors, linear and
// YaRN scaling). theta_base is a running product theta_{i+1} = theta_i * base^(-2/n_rot), in
// float, as ggml computes it; dimensions >= n_rot are copied.
void op_rope(const OpContext& c, const Node& n, float* out) {
  const float* x = c.src(n, 0);
  const int32_t* pos = c.src<int32_t>(n, 1);
  const graph::RopeConfig& cfg = n.p.rope;
  const float* ff = cfg.has_freq_factors ? c.src(n, 2) : nullptr;
  const int64_t hd = n.p.head_dim;
  const int64_t n_rot = n.p.n_rot;
  const int64_t half = n_rot / 2;
  const int64_t n_head = n.ne[0] / hd;
  const int64_t n_tok = n.ne[1];
  const bool neox = cfg.layout == graph::RopeLayout::Neox;
  // Element offsets of the two members of pair i.
  const int64_t stride = neox ? 1 : 2, other = neox ? half : 1;
  const float theta_scale = std::pow(n.p.rope_theta, -2.0f / static_cast<float>(n_rot));
  c.pool.parallel_for(n_tok, 1, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> cs(static_cast<size_t>(n_rot));
    for (int64_t t = t0; t < t1; ++t) {
      float theta = static_cast<float>(pos[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float th = graph::rope_angle(theta, i, ff ? ff[i] : 1.0f, cfg);
        cs[static_cast<size_t>(2 * i)] = std::cos(th) * cfg.mscale;
        cs[static_cast<size_t>(2 * i + 1)] = std::sin(th) * cfg.mscale;
        theta *= theta_scale;
      }
      for (int64_t h = 0; h < n_head; ++h) {
        const float* src = x + (t * n_head + h) * hd;
        float* dst = out + (t * n_head + h) * hd;
        for (int64_t i = 0; i < half; ++i) {
          const float cos_t = cs[static_cast<size_t>(2 * i)], sin_t = cs[static_cast<size_t>(2 * i + 1)];
          const int64_t a = i * stride, b = a + other;
          const float x0 = src[a], x1 = src[b];
          dst[a] = x0 * cos_t - x1 * sin_t;
          dst[b] = x0 * sin_t + x1 * cos_t;
        }
        for (int64_t i = n_rot; i < hd; ++i) dst[i] = src[i];
      }
    }
  });
}

}  // namespace minfer::cpu
