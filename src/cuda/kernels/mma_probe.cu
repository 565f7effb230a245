// The int8 mma.sync throughput probe (mma_probe.cuh).
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mma_probe.cuh"

namespace minfer::cuda {
namespace {

__global__ void __launch_bounds__(kMmaProbeWarps * 32) mma_probe_kernel(int iters, int* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t t = threadIdx.x;
  const uint32_t a0 = t * 0x01010101u, a1 = a0 ^ 0x5A5A5A5Au, a2 = a0 + 7u, a3 = a0 * 3u;
  const uint32_t b0 = t ^ 0x33333333u, b1 = t + 0x11111111u;
  int c[kMmaProbeChains][4];
#pragma unroll
  for (int i = 0; i < kMmaProbeChains; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = i;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < kMmaProbeChains; ++i)
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
          "{%8, %9}, {%0, %1, %2, %3};\n"
          : "+r"(c[i][0]), "+r"(c[i][1]), "+r"(c[i][2]), "+r"(c[i][3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  int s = 0;
#pragma unroll
  for (int i = 0; i < kMmaProbeChains; ++i) s += c[i][0] ^ c[i][1] ^ c[i][2] ^ c[i][3];
  if (threadIdx.x == 0) sink[blockIdx.x] = s;
#else
  (void)iters;
  (void)sink;
  __trap();
#endif
}

}  // namespace

bool launch_mma_probe(int blocks, int iters, int* sink, cudaStream_t stream) {
  mma_probe_kernel<<<blocks, kMmaProbeWarps * 32, 0, stream>>>(iters, sink);
  return MINFER_LAUNCH_CHECK("mma_probe");
}

}  // namespace minfer::cuda
