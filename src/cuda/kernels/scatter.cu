#include "cuda/kernels/scatter.cuh"

#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {

constexpr int kScatterThreads = 256;

__global__ void scatter_kernel(ScatterList list) {
  const ScatterEntry e = list.e[blockIdx.x];
  const uint8_t* src = list.src + e.src_offset;
  auto* dst = static_cast<uint8_t*>(e.dst);
  const bool words = ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | e.bytes) & 3u) == 0;
  if (words) {
    const auto* s = reinterpret_cast<const uint32_t*>(src);
    auto* d = reinterpret_cast<uint32_t*>(dst);
    for (uint32_t i = threadIdx.x; i < e.bytes / 4; i += blockDim.x) d[i] = s[i];
  } else {
    for (uint32_t i = threadIdx.x; i < e.bytes; i += blockDim.x) dst[i] = src[i];
  }
}

}  // namespace

bool scatter_inputs(const ScatterList& list, cudaStream_t stream) {
  if (list.n <= 0) return true;
  scatter_kernel<<<static_cast<unsigned>(list.n), kScatterThreads, 0, stream>>>(list);
  return MINFER_LAUNCH_CHECK("scatter_inputs");
}

}  // namespace minfer::cuda
