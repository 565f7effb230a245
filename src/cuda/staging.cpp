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
  for (GatherBlock& b : gather_blocks_) {
    if (b.done != nullptr && b.pending) cudaEventSynchronize(b.done);
    if (b.done != nullptr) cudaEventDestroy(b.done);
    if (b.host != nullptr) cudaFreeHost(b.host);
  }
  if (readback_ != nullptr) cudaFreeHost(readback_);
}

cudaError_t PinnedStaging::ensure_gather_blocks() {
  if (!gather_blocks_.empty()) return cudaSuccess;
  std::vector<GatherBlock> blocks(static_cast<size_t>(kGatherBlocks));
  cudaError_t e = cudaSuccess;
  for (GatherBlock& b : blocks) {
    void* host = nullptr;
    void* dev = nullptr;
    e = cudaHostAlloc(&host, kGatherBlockBytes, cudaHostAllocMapped);
    b.host = static_cast<uint8_t*>(host);
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(&dev, host, 0);
    b.device = static_cast<const uint8_t*>(dev);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming);
    if (e != cudaSuccess) break;
  }
  if (e != cudaSuccess) {
    for (GatherBlock& b : blocks) {
      if (b.done != nullptr) cudaEventDestroy(b.done);
      if (b.host != nullptr) cudaFreeHost(b.host);
    }
    return e;
  }
  gather_blocks_ = std::move(blocks);
  gather_list_.src = gather_blocks_[0].device;
  return cudaSuccess;
}

cudaError_t PinnedStaging::gather(void* dst, const void* src, size_t bytes, bool* taken) {
  *taken = false;
  if (bytes == 0 || bytes > kGatherMaxBytes) return cudaSuccess;
  if (cudaError_t e = ensure_gather_blocks(); e != cudaSuccess) return e;
  constexpr size_t kAlign = 16;  // every entry's source starts 16-byte aligned
  const size_t at = (gather_used_ + kAlign - 1) / kAlign * kAlign;
  if (gather_list_.n == kScatterMaxEntries || at + bytes > kGatherBlockBytes) return cudaSuccess;
  const auto lo = reinterpret_cast<uintptr_t>(dst);
  for (int i = 0; i < gather_list_.n; ++i) {
    const auto o = reinterpret_cast<uintptr_t>(gather_list_.e[i].dst);
    if (lo < o + gather_list_.e[i].bytes && o < lo + bytes) return cudaSuccess;  // overlapping destinations
  }
  GatherBlock& b = gather_blocks_[static_cast<size_t>(gather_block_)];
  if (b.pending) {
    // The block's previous scatter must have read it before it is overwritten.
    if (cudaError_t e = cudaEventSynchronize(b.done); e != cudaSuccess) return e;
    b.pending = false;
  }
  std::memcpy(b.host + at, src, bytes);
  gather_list_.e[gather_list_.n++] = ScatterEntry{dst, static_cast<uint32_t>(at), static_cast<uint32_t>(bytes)};
  gather_used_ = at + bytes;
  *taken = true;
  return cudaSuccess;
}

cudaError_t PinnedStaging::flush_gather(cudaStream_t stream) {
  if (gather_list_.n == 0) return cudaSuccess;
  GatherBlock& b = gather_blocks_[static_cast<size_t>(gather_block_)];
  const ScatterList list = gather_list_;
  gather_list_.n = 0;
  gather_used_ = 0;
  gather_block_ = (gather_block_ + 1) % kGatherBlocks;
  gather_list_.src = gather_blocks_[static_cast<size_t>(gather_block_)].device;
  if (!scatter_inputs(list, stream)) return cudaErrorLaunchFailure;
  if (cudaError_t e = cudaEventRecord(b.done, stream); e != cudaSuccess) {
    // Without its event the block cannot be reused safely later: wait for the scatter now.
    cudaStreamSynchronize(stream);
    return e;
  }
  b.pending = true;
  return cudaSuccess;
}

cudaError_t PinnedStaging::ensure_readback(size_t bytes) {
  if (readback_bytes_ >= bytes) return cudaSuccess;
  if (readback_ != nullptr) cudaFreeHost(readback_);  // not in use: callers grow it with nothing queued
  readback_ = nullptr;
  readback_bytes_ = 0;
  if (cudaError_t e = cudaHostAlloc(&readback_, bytes, cudaHostAllocDefault); e != cudaSuccess) {
    readback_ = nullptr;
    return e;
  }
  readback_bytes_ = bytes;
  return cudaSuccess;
}

cudaError_t PinnedStaging::queue_readback(cudaStream_t stream, void* dst, const void* src, size_t bytes,
                                          bool* queued) {
  *queued = false;
  if (bytes == 0) {
    *queued = true;
    return cudaSuccess;
  }
  if (bytes > readback_max_) return cudaSuccess;
  constexpr size_t kAlign = 256;
  const size_t at = (readback_used_ + kAlign - 1) / kAlign * kAlign;
  if (at + bytes > readback_bytes_) {
    if (!readbacks_.empty()) return cudaSuccess;  // the buffer is in use: the caller waits first
    if (cudaError_t e = ensure_readback(bytes); e != cudaSuccess) return e;
  }
  const size_t off = readbacks_.empty() ? 0 : at;
  if (cudaError_t e = cudaMemcpyAsync(static_cast<uint8_t*>(readback_) + off, src, bytes, cudaMemcpyDeviceToHost, stream);
      e != cudaSuccess)
    return e;
  readbacks_.push_back(QueuedReadback{dst, off, bytes});
  readback_used_ = off + bytes;
  *queued = true;
  return cudaSuccess;
}

void PinnedStaging::finish_readbacks() {
  for (const QueuedReadback& r : readbacks_)
    std::memcpy(r.dst, static_cast<const uint8_t*>(readback_) + r.offset, r.bytes);
  readbacks_.clear();
  readback_used_ = 0;
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
  // A queued readback's bytes are in the buffer until finish_readbacks(): this synchronous
  // readback waits for the stream anyway, so it finishes them first.
  if (!readbacks_.empty()) {
    if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return e;
    finish_readbacks();
  }
  if (cudaError_t e = ensure_readback(std::min(bytes, readback_max_)); e != cudaSuccess) return e;
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
