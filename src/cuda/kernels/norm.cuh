// RMS norm over rows (RmsNorm: rows of n_embd; QkNorm: each head of head_dim is a row):
// out = x / sqrt(mean(x^2) + eps) * w.
//
// Numerics: the CPU's steps (src/cpu/kernels_norm_rope.cpp): each square rounded to float and
// accumulated in double, the mean rounded to float, scale = 1 / sqrt(mean + eps) in float
// (IEEE sqrt and division), out = (x * scale) * w with two rounded multiplies. Only the order of
// the double sum differs, so a result differs from the CPU's only when that changes the float
// mean: tolerance class "rms_norm", at most 1 ulp of the scale (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

/// Threads of the one block per row of rms_norm. The order of the double sum of squares follows
/// from it, so the fused norm + quantize kernel (norm_quantize.cuh) uses it too: both give the
/// same scale bit for bit.
inline constexpr int kRmsNormThreads = 128;

/// x, out: `rows` rows of `len` floats; w: `len` floats. `site` names the launch ("rms_norm",
/// "qk_norm"). Issued on `stream`; false when the launch failed.
bool rms_norm(const float* x, const float* w, float* out, int64_t len, int64_t rows, float eps,
              const char* site, cudaStream_t stream);

}  // namespace minfer::cuda
