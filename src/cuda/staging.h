// Pinned host staging of one CudaBackend: a ring of pinned slots for host -> device input
// copies, a ring of mapped pinned blocks that gather small inputs for one scatter kernel
// (kernels/scatter.cuh), and one grow-on-demand pinned buffer for device -> host readbacks
// (immediate, or queued and copied out after the owner's next stream wait). Everything is
// issued on the owner's stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/kernels/scatter.cuh"

namespace minfer::cuda {

class PinnedStaging {
 public:
  /// `slot_bytes` per upload slot, `n_slots` slots, readback buffer at most `readback_max` bytes
  /// (larger readbacks go in pieces). Memory is allocated on first use.
  PinnedStaging(size_t slot_bytes, int n_slots, size_t readback_max);
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  /// Host -> device on `stream`: the bytes are copied into pinned slots before this returns (the
  /// caller may reuse `src` at once); the device copies are queued, ordered with later work on
  /// `stream`. A slot is reused only after its previous copy completed (an event wait).
  /// Returns the first CUDA error (cudaErrorMemoryAllocation when pinned memory is refused).
  cudaError_t upload(cudaStream_t stream, void* dst, const void* src, size_t bytes);

  /// Device -> host on `stream`, complete when it returns (waits for the stream).
  cudaError_t download(cudaStream_t stream, void* dst, const void* src, size_t bytes);

  /// Largest upload gather() takes (bytes); larger ones are better as one DMA copy.
  static constexpr size_t kGatherMaxBytes = size_t{64} << 10;
  /// Bytes of one gather block (mapped pinned memory; kGatherBlocks in a ring).
  static constexpr size_t kGatherBlockBytes = size_t{256} << 10;
  static constexpr int kGatherBlocks = 4;

  /// Allocates the gather blocks (kGatherBlocks x kGatherBlockBytes of mapped page-locked
  /// memory) once; cudaErrorMemoryAllocation (or another CUDA error) when the driver refuses.
  cudaError_t ensure_gather_blocks();
  /// Copies `bytes` from `src` into the current gather block for the next flush_gather() and
  /// returns cudaSuccess with *taken = true; *taken = false (nothing done) when the upload is
  /// larger than kGatherMaxBytes, the block or its entry list is full, or `dst` overlaps a
  /// pending entry's destination (the caller flushes and copies it another way, keeping order).
  /// The first entry of a block waits for that block's previous scatter when it is still in
  /// flight: the error of that wait (a fault of earlier device work) is returned, as is that of
  /// ensure_gather_blocks().
  cudaError_t gather(void* dst, const void* src, size_t bytes, bool* taken);
  /// Queues one scatter kernel for the pending gathered uploads on `stream` (none: nothing),
  /// records the block's event and moves to the next block. Returns cudaSuccess, a CUDA error,
  /// or cudaErrorLaunchFailure when the launch failed (the site is recorded for
  /// launch_failure()); the pending list is empty afterwards either way.
  cudaError_t flush_gather(cudaStream_t stream);
  bool gather_pending() const { return gather_list_.n > 0; }

  /// Device -> host through the readback buffer, queued on `stream`: the host copy into `dst` is
  /// done by finish_readbacks() after the caller waited for the stream. *queued = false (nothing
  /// done) when the buffer cannot take `bytes` beside the readbacks already queued (the caller
  /// waits, finishes them and asks again) or `bytes` is above the readback limit.
  cudaError_t queue_readback(cudaStream_t stream, void* dst, const void* src, size_t bytes, bool* queued);
  /// The queued readbacks' host copies (call after a successful wait on the stream).
  void finish_readbacks();
  /// Forgets the queued readbacks (their stream wait failed).
  void drop_readbacks() {
    readbacks_.clear();
    readback_used_ = 0;
  }

 private:
  struct Slot {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
    bool pending = false;  ///< an event was recorded after the slot's last copy
  };
  cudaError_t ensure_slots();
  cudaError_t ensure_readback(size_t bytes);

  struct GatherBlock {
    uint8_t* host = nullptr;
    const uint8_t* device = nullptr;  ///< the same memory seen from the device
    cudaEvent_t done = nullptr;
    bool pending = false;  ///< an event was recorded after the block's last scatter
  };
  struct QueuedReadback {
    void* dst;
    size_t offset, bytes;
  };

  size_t slot_bytes_;
  int n_slots_;
  size_t readback_max_;
  std::vector<Slot> slots_;
  int next_ = 0;
  void* readback_ = nullptr;
  size_t readback_bytes_ = 0;
  std::vector<GatherBlock> gather_blocks_;
  int gather_block_ = 0;
  size_t gather_used_ = 0;
  ScatterList gather_list_;
  std::vector<QueuedReadback> readbacks_;
  size_t readback_used_ = 0;
};

}  // namespace minfer::cuda
