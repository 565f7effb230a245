// Pinned host staging of one CudaBackend: a ring of pinned slots for host -> device input
// copies and one grow-on-demand pinned buffer for device -> host readbacks. Everything is
// issued on the owner's stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

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

 private:
  struct Slot {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
    bool pending = false;  ///< an event was recorded after the slot's last copy
  };
  cudaError_t ensure_slots();

  size_t slot_bytes_;
  int n_slots_;
  size_t readback_max_;
  std::vector<Slot> slots_;
  int next_ = 0;
  void* readback_ = nullptr;
  size_t readback_bytes_ = 0;
};

}  // namespace minfer::cuda
