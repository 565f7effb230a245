// Input scatter: several small host -> device copies done by one kernel that reads page-locked
// host memory mapped into the device's address space (unified addressing: a cudaHostAlloc'd
// pointer is valid in device code), instead of one DMA copy per input. A decode step's inputs
// (token ids, positions, sequence ids, KV cells, the KV window's positions and sequences, output
// rows) are a few KiB in seven arrays; one launch replaces seven copies on the stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

/// Entries of one scatter launch at most (the list is a by-value kernel argument, 272 bytes).
constexpr int kScatterMaxEntries = 16;
/// Bytes one block copies (256 threads x 16 bytes): an entry of B bytes takes ceil(B / 4096)
/// blocks, so every load of a launch is in flight at once.
constexpr uint32_t kScatterChunkBytes = 4096;

/// One copy: `bytes` from the list's host block at `src_offset` to device memory at `dst`.
struct ScatterEntry {
  void* dst = nullptr;
  uint32_t src_offset = 0;
  uint32_t bytes = 0;
};

/// The copies of one launch. `src` is the device view of the page-locked host block
/// (cudaHostGetDevicePointer); destinations must not overlap one another (blocks run in any order).
struct ScatterList {
  const uint8_t* src = nullptr;
  int32_t n = 0;
  ScatterEntry e[kScatterMaxEntries];
};

/// Queues the copies of `list` (0..kScatterMaxEntries entries; 0: nothing) on `stream`: a grid of
/// entries x 4096-byte chunks, 16-byte loads where the entry's source, destination and length
/// allow, 4-byte words or bytes otherwise. Returns false when the launch fails (site
/// "scatter_inputs", recorded for launch_failure()).
bool scatter_inputs(const ScatterList& list, cudaStream_t stream);

}  // namespace minfer::cuda
