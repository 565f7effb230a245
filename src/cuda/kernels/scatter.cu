#include "cuda/kernels/scatter.cuh"

#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {

constexpr int kScatterThreads = 256;

// Block (entry e, chunk c) copies bytes [c * kScatterChunkBytes, +kScatterChunkBytes) of entry e,
// one 16-byte load per thread when the entry's source, destination and length allow (the loads
// over PCIe are all in flight at once: one round trip per chunk), else 4-byte words, else bytes.
__global__ void scatter_kernel(ScatterList list) {
  const ScatterEntry e = list.e[blockIdx.x];
  const uint32_t begin = blockIdx.y * kScatterChunkBytes;
  if (begin >= e.bytes) return;
  const uint32_t len = min(e.bytes - begin, kScatterChunkBytes);
  const uint8_t* __restrict__ src = list.src + e.src_offset + begin;
  uint8_t* __restrict__ dst = static_cast<uint8_t*>(e.dst) + begin;
  const uintptr_t align = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | len;
  if ((align & 15u) == 0) {
    for (uint32_t i = threadIdx.x; i < len / 16; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else if ((align & 3u) == 0) {
    for (uint32_t i = threadIdx.x; i < len / 4; i += blockDim.x)
      reinterpret_cast<uint32_t*>(dst)[i] = reinterpret_cast<const uint32_t*>(src)[i];
  } else {
    for (uint32_t i = threadIdx.x; i < len; i += blockDim.x) dst[i] = src[i];
  }
}

}  // namespace

bool scatter_inputs(const ScatterList& list, cudaStream_t stream) {
  if (list.n <= 0) return true;
  uint32_t most = 0;
  for (int i = 0; i < list.n; ++i) most = list.e[i].bytes > most ? list.e[i].bytes : most;
  const uint32_t chunks = (most + kScatterChunkBytes - 1) / kScatterChunkBytes;
  scatter_kernel<<<dim3(static_cast<unsigned>(list.n), chunks > 0 ? chunks : 1), kScatterThreads, 0, stream>>>(list);
  return MINFER_LAUNCH_CHECK("scatter_inputs");
}

}  // namespace minfer::cuda
