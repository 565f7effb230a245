#include "cuda/staging.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace minfer::cuda {

PinnedStaging::PinnedStaging(size_t slot_bytes, int n_slots, size_t readback_max)
    : slot_bytes_(slot_bytes), n_slots_(n_slots), readback_max_(readback_max) {}

PinnedStaging::~PinnedStaging() {
  for (Slot& s : slots_) {
    if (s.done != nullptr && s.pending) cudaEventSynchronize(s.done);
    if (s.done != nullptr) cudaEventDestroy(s.done);
    if (s.host != nullptr) cudaFreeHost(s.host);
  }
  if (readback_ != nullptr) cudaFreeHost(readback_);
}

cudaError_t PinnedStaging::ensure_slots() {
  if (!slots_.empty()) return cudaSuccess;
  std::vector<Slot> slots(static_cast<size_t>(n_slots_));
  for (Slot& s : slots) {
    cudaError_t e = cudaHostAlloc(&s.host, slot_bytes_, cudaHostAllocDefault);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      for (Slot& r : slots) {
        if (r.done != nullptr) cudaEventDestroy(r.done);
        if (r.host != nullptr) cudaFreeHost(r.host);
      }
      return e;
    }
  }
  slots_ = std::move(slots);
  return cudaSuccess;
}

cudaError_t PinnedStaging::upload(cudaStream_t stream, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (cudaError_t e = ensure_slots(); e != cudaSuccess) return e;
  auto* d = static_cast<uint8_t*>(dst);
  const auto* h = static_cast<const uint8_t*>(src);
  for (size_t off = 0; off < bytes; off += slot_bytes_) {
    const size_t len = std::min(slot_bytes_, bytes - off);
    Slot& s = slots_[static_cast<size_t>(next_)];
    next_ = (next_ + 1) % n_slots_;
    if (s.pending) {
      // The slot's previous copy must have read the pinned bytes before they are overwritten.
      if (cudaError_t e = cudaEventSynchronize(s.done); e != cudaSuccess) return e;
      s.pending = false;
    }
    std::memcpy(s.host, h + off, len);
    if (cudaError_t e = cudaMemcpyAsync(d + off, s.host, len, cudaMemcpyHostToDevice, stream); e != cudaSuccess)
      return e;
    if (cudaError_t e = cudaEventRecord(s.done, stream); e != cudaSuccess) return e;
    s.pending = true;
  }
  return cudaSuccess;
}

cudaError_t PinnedStaging::download(cudaStream_t stream, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  const size_t want = std::min(bytes, readback_max_);
  if (readback_bytes_ < want) {
    if (readback_ != nullptr) cudaFreeHost(readback_);  // not in use: every readback completes
    readback_ = nullptr;
    readback_bytes_ = 0;
    if (cudaError_t e = cudaHostAlloc(&readback_, want, cudaHostAllocDefault); e != cudaSuccess) {
      readback_ = nullptr;
      return e;
    }
    readback_bytes_ = want;
  }
  auto* h = static_cast<uint8_t*>(dst);
  const auto* d = static_cast<const uint8_t*>(src);
  for (size_t off = 0; off < bytes; off += readback_bytes_) {
    const size_t len = std::min(readback_bytes_, bytes - off);
    if (cudaError_t e = cudaMemcpyAsync(readback_, d + off, len, cudaMemcpyDeviceToHost, stream); e != cudaSuccess)
      return e;
    if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return e;
    std::memcpy(h + off, readback_, len);
  }
  return cudaSuccess;
}

}  // namespace minfer::cuda
