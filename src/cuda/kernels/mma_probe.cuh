// A throughput probe of the int8 tensor-core instruction MMQ uses (mma.sync m16n8k32 s8 x s8 ->
// s32), for the MMQ benchmark (bench/bench_cuda_mmq.cpp): how many int8 operations per second
// the device sustains with this instruction alone, the ceiling any mma.sync kernel can reach.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

/// Multiply-accumulates issued by one probe launch: blocks x warps x iters x chains mma
/// instructions of 16 x 8 x 32 products each.
inline constexpr int kMmaProbeChains = 8;   ///< independent accumulator chains per warp
inline constexpr int kMmaProbeWarps = 8;    ///< warps per block

/// Launches `blocks` blocks that each run `iters` rounds of kMmaProbeChains independent
/// m16n8k32 int8 mma instructions per warp; one int per block is written to `sink` (blocks
/// ints) so the work cannot be removed. Returns false when the launch failed (site
/// "mma_probe"). Operations = 2 * 16 * 8 * 32 * blocks * kMmaProbeWarps * iters * kMmaProbeChains.
bool launch_mma_probe(int blocks, int iters, int* sink, cudaStream_t stream);

}  // namespace minfer::cuda
