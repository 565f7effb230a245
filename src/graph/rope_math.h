// The RoPE angle rule shared by the CPU and CUDA kernels (one rule in one place): for rotation
// pair i of a head (i < n_rot / 2), with theta_base = pos * base^(-2i/n_rot) (the caller's
// running float product, as ggml computes it),
//   theta_extrap = theta_base / freq_factor[i]          (Llama-3.1 rope_freqs; 1 when absent)
//   theta_interp = freq_scale * theta_extrap            (linear / YaRN: freq_scale = 1 / factor)
//   YaRN (ext_factor > 0): theta = theta_interp * (1 - mix) + theta_extrap * mix with
//     mix = ext_factor * (1 - clamp((i - corr_low) / max(0.001, corr_high - corr_low), 0, 1)),
//   otherwise theta = theta_interp;
// and the pair is rotated by cos(theta) * mscale, sin(theta) * mscale.
//
// YaRN: Peng et al., "YaRN: Efficient Context Window Extension of Large Language Models",
// arXiv:2309.00071, section 3.2 (NTK-by-parts: dimensions whose wavelength fits more than
// beta_fast = 32 times in the original context keep their frequency, those fitting fewer than
// beta_slow = 1 times are interpolated by 1/s, a linear ramp between), section 3.3-3.4 (the
// attention temperature sqrt(1/t) = 0.1 ln(s) + 1, applied to q and k through mscale). The
// ramp runs over the pair index between the dimensions where the rotation counts equal beta_fast
// and beta_slow (floor / ceil), as the paper's reference code (find_correction_range,
// linear_ramp_mask) and llama.cpp define it; rope_yarn_corr_dims computes them.
//
// Float arithmetic: each step is one rounded operation in the order written (CUDA code gets the
// _rn intrinsics so nvcc cannot contract a multiply and an add into an FMA), so both backends
// compute bitwise the same angle. Unscaled RoPE (freq_scale 1, ext_factor 0, no factors, mscale
// 1) gives theta = theta_base exactly.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MINFER_ROPE_HD __host__ __device__ __forceinline__
#else
#define MINFER_ROPE_HD inline
#endif

namespace minfer::graph {

/// Which dimensions form a rotation pair. GGUF rope types: llama.cpp's LLAMA_ROPE_TYPE_NORM
/// (llama, mistral) and LLAMA_ROPE_TYPE_NEOX (qwen2, qwen3).
enum class RopeLayout : uint8_t {
  Neox = 0,    ///< dimension i with i + n_rot/2
  Normal = 1,  ///< dimension 2i with 2i + 1
};

/// Everything about a RoPE node beyond the base and the rotated dimensions (NodeParams::rope).
struct RopeConfig {
  RopeLayout layout = RopeLayout::Neox;
  float freq_scale = 1.0f;   ///< 1 / rope.scaling.factor for linear and YaRN, else 1
  float ext_factor = 0.0f;   ///< YaRN: weight of the ramp (1), else 0
  float mscale = 1.0f;       ///< factor on cos and sin (YaRN: attn_factor * (0.1 ln(s) + 1))
  float corr_low = 0.0f;     ///< YaRN ramp: pair index where the ramp starts (rope_yarn_corr_dims)
  float corr_high = 0.0f;    ///< YaRN ramp: pair index where it ends
  bool has_freq_factors = false;  ///< the node has a source f32 [n_rot / 2] of frequency divisors
  bool operator==(const RopeConfig&) const = default;
};

namespace rope_detail {
MINFER_ROPE_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MINFER_ROPE_HD float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
MINFER_ROPE_HD float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
}  // namespace rope_detail

/// The angle of rotation pair `i` (header comment). `freq_factor` is 1 when the node has none.
MINFER_ROPE_HD float rope_angle(float theta_base, int64_t i, float freq_factor, const RopeConfig& c) {
  using namespace rope_detail;
  const float extrap = div(theta_base, freq_factor);
  const float interp = mul(c.freq_scale, extrap);
  if (c.ext_factor == 0.0f) return interp;
  const float span = add(c.corr_high, -c.corr_low);
  const float y = div(add(static_cast<float>(i), -c.corr_low), span > 0.001f ? span : 0.001f);
  const float ramp = add(1.0f, -(y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y));
  const float mix = mul(ramp, c.ext_factor);
  return add(mul(interp, add(1.0f, -mix)), mul(extrap, mix));
}

/// YaRN's ramp ends (RopeConfig::corr_low / corr_high) for `n_rot` rotated dimensions, frequency
/// base `base`, original (training) context `n_ctx_orig`: the pair index d at which a dimension
/// turns r times in n_ctx_orig positions is n_rot * ln(n_ctx_orig / (2 pi r)) / (2 ln base);
/// low = floor(d(beta_fast)), high = ceil(d(beta_slow)), clamped to [0, n_rot - 1]
/// (arXiv:2309.00071 section 3.2 and its reference code). Host only.
inline void rope_yarn_corr_dims(int64_t n_rot, int64_t n_ctx_orig, float base, float beta_fast, float beta_slow,
                                float* low, float* high) {
  const double pi = 3.14159265358979323846;
  const auto dim = [&](double rotations) {
    return static_cast<double>(n_rot) * std::log(static_cast<double>(n_ctx_orig) / (rotations * 2.0 * pi)) /
           (2.0 * std::log(static_cast<double>(base)));
  };
  const double lo = std::floor(dim(beta_fast)), hi = std::ceil(dim(beta_slow));
  *low = static_cast<float>(lo < 0.0 ? 0.0 : lo);
  *high = static_cast<float>(hi > static_cast<double>(n_rot - 1) ? static_cast<double>(n_rot - 1) : hi);
}

}  // namespace minfer::graph
