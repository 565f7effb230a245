// Rotary position embedding, NEOX layout (Qwen2/Qwen3): in each head, dimension i < n_rot/2 is
// rotated with dimension i + n_rot/2 by the angle pos * theta_scale^i; dimensions >= n_rot are
// copied.
//
// Numerics: the angles are the CPU's bit for bit (src/cpu/kernels_norm_rope.cpp): a running
// float product theta_{i+1} = theta_i * theta_scale starting at float(pos), with theta_scale
// computed on the host by the CPU's expression. cos and sin are evaluated in double and rounded
// to float (correctly rounded; glibc's cosf/sinf agree except in rare last-bit cases), and the
// rotation uses the CPU's four rounded multiplies and one rounded add/sub each. Tolerance class
// "rope": |d| <= 2 ulp of max(|x0|, |x1|) per pair (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

/// x, out: [head_dim * n_head, n_tok] (token-major rows), pos: i32 [n_tok]. `theta_scale` =
/// pow(rope_theta, -2 / n_rot) computed by the caller in float. n_rot even, <= head_dim.
bool rope_neox(const float* x, const int32_t* pos, float* out, int64_t head_dim, int64_t n_head,
               int64_t n_tok, int64_t n_rot, float theta_scale, cudaStream_t stream);

}  // namespace minfer::cuda
