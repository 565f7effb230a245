// Input scatter: several small host -> device copies done by one kernel that reads page-locked
// host memory mapped into the device's address space (unified addressing: a cudaHostAlloc'd
// pointer is valid in device code), instead of one DMA copy per input. A decode step's inputs
// (token ids, positions, sequence ids, KV cells, the KV window's positions and sequences, output
// rows) are a few KiB in seven arrays; one launch replaces seven copies on the stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace minfer::cuda {

/// Entries of one scatter launch at most (one block each; the list is a by-value kernel argument).
constexpr int kScatterMaxEntries = 16;

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

/// Queues the copies of `list` (1..kScatterMaxEntries entries) on `stream`: one block per entry,
/// 4-byte words when the entry's source, destination and length allow, bytes otherwise.
/// Returns false when the launch fails (site "scatter_inputs", recorded for launch_failure()).
bool scatter_inputs(const ScatterList& list, cudaStream_t stream);

}  // namespace minfer::cuda
