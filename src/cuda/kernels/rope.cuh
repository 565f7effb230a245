// Rotary position embedding (graph/rope_math.h): in each head, rotation pair i < n_rot/2 is
// (i, i + n_rot/2) in the NEOX layout (Qwen2/Qwen3) and (2i, 2i + 1) in the normal layout
// (Llama, Mistral), rotated by the angle rope_angle(pos * theta_scale^i, i, freq_factors[i],
// cfg) (frequency factors, linear and YaRN scaling); dimensions >= n_rot are copied.
//
// Numerics: the angles are the CPU's bit for bit (src/cpu/kernels_norm_rope.cpp): a running
// float product theta_{i+1} = theta_i * theta_scale starting at float(pos), with theta_scale
// computed on the host by the CPU's expression, then rope_angle's rounded steps. cos and sin are
// evaluated in double and rounded to float (correctly rounded; glibc's cosf/sinf agree except
// in rare last-bit cases), times cfg.mscale, and the rotation uses the CPU's four rounded
// multiplies and one rounded add/sub each. Tolerance class "rope": |d| <= 2 ulp of
// max(|x0|, |x1|) per pair (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "graph/rope_math.h"

namespace minfer::cuda {

/// x, out: [head_dim * n_head, n_tok] (token-major rows), pos: i32 [n_tok]. `theta_scale` =
/// pow(rope_theta, -2 / n_rot) computed by the caller in float. n_rot even, <= head_dim.
/// `freq_factors`: f32 [n_rot / 2] on the device, or null (then every factor is 1).
bool rope(const float* x, const int32_t* pos, float* out, int64_t head_dim, int64_t n_head, int64_t n_tok,
          int64_t n_rot, float theta_scale, const graph::RopeConfig& cfg, const float* freq_factors,
          cudaStream_t stream);

}  // namespace minfer::cuda
