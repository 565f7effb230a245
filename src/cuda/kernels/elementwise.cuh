// Elementwise kernels on f32 tensors: Add/Mul with the graph's broadcast rule, Silu, SwiGLU, and
// the bias add of the fused projections. Shapes are ggml order (ne[0] contiguous). Each launcher
// issues on `stream` and returns false when its launch failed (recorded with its site,
// launch.cuh).
//
// Numerics against the CPU backend (src/cpu/kernels_elementwise.cpp): Add, Mul and the bias add
// are the same single rounded operation, so bit-exact. Silu and SwiGLU evaluate
// exp in double and round it to float (the correctly rounded expf, which glibc's expf matches
// except in rare last-bit cases), then the CPU's float operations in the CPU's order. Tolerance
// class "transcendental": a few ulp (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>

namespace minfer::cuda {

using Shape4 = std::array<int64_t, 4>;

enum class BinaryOp : uint8_t { Add, Mul };

/// out = a (op) b, out and a of shape `ne`, b of shape `nb` where nb[i] == ne[i] or 1 (repeats).
bool binary(BinaryOp op, const float* a, const float* b, float* out, const Shape4& ne,
            const Shape4& nb, cudaStream_t stream);
/// out[i] = a[i] / (1 + exp(-a[i])).
bool silu(const float* a, float* out, int64_t n, cudaStream_t stream);
/// out[i] = silu(gate[i]) * up[i] (out may alias gate).
bool swiglu(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);
/// y[t * m + j] += b[j] for j < m, t < n.
bool add_bias(float* y, const float* b, int64_t m, int64_t n, cudaStream_t stream);

}  // namespace minfer::cuda
