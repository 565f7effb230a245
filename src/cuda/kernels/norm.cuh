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

/// Most threads of the one block per row of rms_norm (and of each of rms_norm_quantize's blocks).
inline constexpr int kRmsNormMaxThreads = 1024;

/// Threads of the one block per row of rms_norm for rows of `len` elements: one thread per 4
/// elements, rounded up to whole warps, in [32, kRmsNormMaxThreads]. Thread i sums elements
/// i, i + threads, ... so the order of the double sum of squares follows from this function; the
/// fused norm + quantize kernel (norm_quantize.cuh) uses it too, so both give the same scale bit
/// for bit. (A decode row of 3584 elements gets 896 threads and 4 loads each: a block of 128
/// threads needed 28 dependent load round trips, ~28 us on the H200.)
inline int rms_norm_threads(int64_t len) {
  const int64_t warps = (len + 127) / 128;
  const int64_t t = 32 * (warps < 1 ? 1 : warps);
  return static_cast<int>(t > kRmsNormMaxThreads ? kRmsNormMaxThreads : t);
}

/// x, out: `rows` rows of `len` floats; w: `len` floats. `site` names the launch ("rms_norm",
/// "qk_norm"). Issued on `stream`; false when the launch failed.
bool rms_norm(const float* x, const float* w, float* out, int64_t len, int64_t rows, float eps,
              const char* site, cudaStream_t stream);

}  // namespace minfer::cuda
