// CudaBackend: lifecycle, pool, scratch arena, weights, transfers, row moves and synchronize.
// The op table is in cuda_ops.cpp, the capture / replay state machine in cuda_graphs.cpp.
#include "cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "graph/op_timing.h"
#include "graph/prepared_graph.h"
#include "cuda/kernels/attention.cuh"
#include "cuda/kernels/fault.h"
#include "cuda/kernels/get_rows.cuh"
#include "cuda/kernels/kv.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.cuh"
#include "graph/weight_placement.h"

namespace minfer::cuda {
namespace {

constexpr size_t kUploadSlotBytes = size_t{1} << 20;
constexpr int kUploadSlots = 8;
constexpr size_t kReadbackMaxBytes = size_t{64} << 20;
constexpr size_t kAlign = 256;

double mib(uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

/// Weight types some device kernel reads as a matrix with rows of `k` elements: the embedding
/// gather or a matmul. Whether the op that reads a given tensor has a kernel for it is checked
/// when a graph is prepared (unsupported_reason), before any token runs.
std::vector<TensorType> matrix_types(int64_t k) {
  static constexpr TensorType kCandidates[] = {
      TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q4_0,
      TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
      TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};
  std::vector<TensorType> out;
  for (TensorType t : kCandidates)
    if (get_rows_supported(t) || matmul_supported(t, k, nullptr)) out.push_back(t);
  return out;
}

}  // namespace

CudaBackend::CudaBackend() : ctx_(CudaContext::instance()) {
  attn_chunk_ = env_int("MINFER_CUDA_ATTN_CHUNK", 0);  // before anything is allocated; >= 0 (the env table's range)
  attn_head_slices_ = env_int("MINFER_CUDA_ATTN_HEAD_SLICES", 0);
  flash_attn_ = !env_flag("MINFER_CUDA_NO_FLASH_ATTN");
  check_latched("creating a CUDA backend");
  cudaError_t e = cudaSetDevice(ctx_.info().device);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("cuda: cannot create a stream for a new backend: {}", cuda_error_text(e));
  }
  staging_ = std::make_unique<PinnedStaging>(kUploadSlotBytes, kUploadSlots, kReadbackMaxBytes);
  e = cudaMalloc(&fault_dev_, 2 * sizeof(uint32_t));
  if (e == cudaSuccess) e = cudaMemsetAsync(fault_dev_, 0, 2 * sizeof(uint32_t), stream_);
  if (e == cudaSuccess) e = cudaHostAlloc(&fault_host_, 2 * sizeof(uint32_t), cudaHostAllocDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (fault_dev_ != nullptr) cudaFree(fault_dev_);
    cudaStreamDestroy(stream_);
    throw OutOfMemoryError(fmt::format("cuda: cannot allocate the backend's fault words: {}",
                                       cuda_error_text(e)));
  }
  fault_host_[0] = fault_host_[1] = 0;
  profile_ = env_flag("MINFER_CUDA_PROFILE") || graph::op_timing_enabled();
  graphs_enabled_ = !env_flag("MINFER_NO_CUDA_GRAPH") && !profile_ && !graph::trace_enabled();
  prefill_capture_ = !env_flag("MINFER_NO_PREFILL_CAPTURE");
  gather_inputs_ = !env_flag("MINFER_CUDA_NO_INPUT_GATHER");
  staged_readback_ = env_flag("MINFER_CUDA_STAGED_READBACK");
  stats_.enabled = graphs_enabled_;
}

CudaBackend::~CudaBackend() {
  print_profile();
  // Nothing can be reported from a destructor; calls that fail clear their own latch only.
  const auto quiet = [](cudaError_t e) {
    if (e != cudaSuccess) cudaGetLastError();
  };
  if (capturing_) {
    cudaGraph_t g = nullptr;
    quiet(cudaStreamEndCapture(stream_, &g));
    if (g != nullptr) quiet(cudaGraphDestroy(g));
  }
  quiet(cudaStreamSynchronize(stream_));
  for (auto& [key, st] : keys_) destroy_exec(st);
  for (Buffer& b : buffers_) quiet(cudaFree(b.ptr));
  for (void* p : retired_scratch_) quiet(cudaFree(p));
  if (scratch_ != nullptr) quiet(cudaFree(scratch_));
  if (fault_dev_ != nullptr) quiet(cudaFree(fault_dev_));
  if (fault_host_ != nullptr) quiet(cudaFreeHost(fault_host_));
  staging_.reset();
  quiet(cudaStreamDestroy(stream_));
}

std::unique_ptr<graph::Backend> create_cuda_backend() { return std::make_unique<CudaBackend>(); }

std::string CudaBackend::describe() const { return "cuda: " + ctx_.describe(); }

GraphStats CudaBackend::graph_stats() const {
  GraphStats s = stats_;
  s.enabled = graphs_enabled_;
  s.stored = 0;
  for (const auto& [key, st] : keys_)
    if (st.exec != nullptr) ++s.stored;
  return s;
}

void CudaBackend::fail_cuda(const std::string& what, cudaError_t err) const {
  cudaGetLastError();  // the error was read here; do not leave it latched
  const std::string msg = fmt::format("cuda: {}: {}", what, cuda_error_text(err));
  if (err == cudaErrorMemoryAllocation) throw OutOfMemoryError(msg);  // e.g. pinned staging refused
  throw Error(msg);
}

void CudaBackend::check_latched(const char* where) const {
  const cudaError_t e = take_latched_error();
  if (e != cudaSuccess)
    fail("cuda: an error was latched before {} (raised by an earlier CUDA call, not by a kernel "
         "of this step): {}", where, cuda_error_text(e));
}

// ---- pool ----------------------------------------------------------------------------------

int32_t CudaBackend::alloc_buffer(uint64_t bytes) {
  auto it = free_.find(bytes);
  if (it != free_.end() && !it->second.empty()) {
    const int32_t id = it->second.back();
    it->second.pop_back();
    return id;
  }
  if (capturing_) fail("cuda: internal error: pool allocation of {} bytes inside a capture window", bytes);
  const uint64_t alloc = std::max<uint64_t>((bytes + kAlign - 1) / kAlign * kAlign, kAlign);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, alloc);
  if (e != cudaSuccess) {
    cudaGetLastError();
    const auto [free_b, total_b] = ctx_.memory();
    throw OutOfMemoryError(fmt::format(
        "cuda: cannot allocate {} bytes ({:.1f} MiB) of device memory: {:.1f} MiB free of {:.1f} MiB, "
        "this backend's pool holds {:.1f} MiB ({})", bytes, mib(bytes), mib(free_b), mib(total_b),
        mib(pool_bytes_), cuda_error_text(e)));
  }
  // Zero-filled, so a kernel that reads a never-written region (a fresh KV cell) reads zeros.
  if (const cudaError_t z = cudaMemsetAsync(p, 0, alloc, stream_); z != cudaSuccess) {
    cudaFree(p);
    fail_cuda(fmt::format("zero-filling a new buffer of {} bytes", bytes), z);
  }
  buffers_.push_back(Buffer{p, bytes});
  ++generation_;
  pool_bytes_ += alloc;
  return static_cast<int32_t>(buffers_.size() - 1);
}

void CudaBackend::release_buffer(int32_t id) {
  MINFER_ASSERT(id >= 0 && static_cast<size_t>(id) < buffers_.size());
  free_[buffers_[static_cast<size_t>(id)].bytes].push_back(id);
}

void* CudaBackend::buffer_ptr(int32_t id) const {
  MINFER_ASSERT(id >= 0 && static_cast<size_t>(id) < buffers_.size());
  return buffers_[static_cast<size_t>(id)].ptr;
}

void CudaBackend::ensure_scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return;
  MINFER_ASSERT(!capturing_);
  // Grow by at least half again, so a slowly growing need does not reallocate every step.
  const size_t want = std::max(bytes, scratch_bytes_ + scratch_bytes_ / 2);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, want);
  if (e != cudaSuccess) {
    cudaGetLastError();
    const auto [free_b, total_b] = ctx_.memory();
    throw OutOfMemoryError(fmt::format(
        "cuda: cannot allocate {} bytes ({:.1f} MiB) of op scratch: {:.1f} MiB free of {:.1f} MiB ({})",
        want, mib(want), mib(free_b), mib(total_b), cuda_error_text(e)));
  }
  // The old arena may still be read by queued work or referenced by a captured graph of an
  // older generation: it is kept until destruction, like every pool buffer.
  if (scratch_ != nullptr) retired_scratch_.push_back(scratch_);
  scratch_ = p;
  scratch_bytes_ = want;
  pool_bytes_ += want;
  ++generation_;
}

// ---- weights -------------------------------------------------------------------------------

void CudaBackend::register_weight(const graph::WeightTensor& w) {
  const std::vector<TensorType> types = matrix_types(w.ne[0]);
  const WeightPlacement p = place_weight(w, types, "CUDA");
  if (p.kind == WeightPlacementKind::Refused) fail("{}", p.reason);
  weights_[w.name] = ctx_.register_weight(w);
}

const void* CudaBackend::weight_data(const graph::WeightTensor& w) {
  auto it = weights_.find(w.name);
  if (it == weights_.end())
    fail("{}: the weight was never registered with this CUDA backend", w.name);
  const DeviceWeight& d = *it->second;
  if (d.nbytes != w.nbytes || d.type != w.type)
    fail("{}: registered with this CUDA backend as {} ({} bytes), asked for as {} ({} bytes)", w.name,
         type_name(d.type), d.nbytes, type_name(w.type), w.nbytes);
  return d.ptr;
}

// ---- transfers -----------------------------------------------------------------------------

void CudaBackend::flush_uploads(const char* before) {
  if (!staging_->gather_pending()) return;
  MINFER_ASSERT(!capturing_);
  clear_launch_failure();
  if (const cudaError_t e = staging_->flush_gather(stream_); e != cudaSuccess) {
    const LaunchFailure* f = launch_failure();
    if (f == nullptr) fail_cuda(fmt::format("queueing the gathered input copies before {}", before), e);
    const std::string site = f->site;
    const cudaError_t err = f->err;
    clear_launch_failure();
    fail("cuda: the gathered input copies before {}: launch {} failed: {}", before, site, cuda_error_text(err));
  }
}

void CudaBackend::upload(void* dst, const void* src, uint64_t bytes) {
  MINFER_ASSERT(!capturing_);
  if (bytes == 0) return;
  if (gather_inputs_ && bytes <= PinnedStaging::kGatherMaxBytes) {
    if (const cudaError_t e = staging_->ensure_gather_blocks(); e != cudaSuccess) {
      cudaGetLastError();
      log_warn("cuda: no mapped page-locked memory to gather inputs in ({}): each input is its own copy",
               cuda_error_text(e));
      gather_inputs_ = false;
    }
  }
  if (gather_inputs_) {
    bool taken = false;
    if (const cudaError_t e = staging_->gather(dst, src, bytes, &taken); e != cudaSuccess)
      fail_cuda(fmt::format("gathering an upload of {} bytes: waiting for an earlier input scatter to free its "
                            "page-locked block (a fault of earlier device work on this stream is reported here too)",
                            bytes), e);
    if (taken) return;
  }
  flush_uploads("an upload");
  if (const cudaError_t e = staging_->upload(stream_, dst, src, bytes); e != cudaSuccess)
    fail_cuda(fmt::format("uploading {} bytes to the device", bytes), e);
}

void CudaBackend::download(void* dst, const void* src, uint64_t bytes) {
  MINFER_ASSERT(!capturing_);
  check_latched("a device-to-host readback");
  flush_uploads("a readback");
  if (const cudaError_t e = staging_->download(stream_, dst, src, bytes); e != cudaSuccess)
    fail_cuda(fmt::format("reading back {} bytes from the device (a fault of earlier device work on "
                          "this stream is reported here too)", bytes), e);
}

namespace {

/// True when [p, p + bytes) begins and ends in page-locked host memory (a DMA target).
bool page_locked(const void* p, uint64_t bytes) {
  for (const void* at : {p, static_cast<const void*>(static_cast<const uint8_t*>(p) + bytes - 1)}) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, at) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    if (a.type != cudaMemoryTypeHost) return false;
  }
  return true;
}

void free_page_locked(void* p) {
  if (cudaFreeHost(p) != cudaSuccess) cudaGetLastError();
}

}  // namespace

void CudaBackend::download_at_sync(void* dst, const void* src, uint64_t bytes) {
  MINFER_ASSERT(!capturing_);
  if (bytes == 0) return;
  check_latched("a device-to-host readback");
  flush_uploads("a readback");
  if (!staged_readback_ && page_locked(dst, bytes)) {
    if (const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_); e != cudaSuccess)
      fail_cuda(fmt::format("queueing a readback of {} bytes", bytes), e);
    return;
  }
  bool queued = false;
  if (const cudaError_t e = staging_->queue_readback(stream_, dst, src, bytes, &queued); e != cudaSuccess)
    fail_cuda(fmt::format("queueing a readback of {} bytes", bytes), e);
  if (queued) return;
  download(dst, src, bytes);  // the buffer is busy or too small for both: this one at once
}

int64_t CudaBackend::exact_step_tokens() const { return kAttnDecodeMaxTokens; }

graph::HostBuffer CudaBackend::alloc_host(uint64_t bytes) {
  void* p = nullptr;
  if (const cudaError_t e = cudaHostAlloc(&p, std::max<uint64_t>(bytes, 1), cudaHostAllocDefault); e != cudaSuccess) {
    cudaGetLastError();
    const std::string msg = fmt::format("cuda: cannot allocate {} bytes ({:.1f} MiB) of page-locked host memory: {}",
                                        bytes, mib(bytes), cuda_error_text(e));
    if (e == cudaErrorMemoryAllocation) throw OutOfMemoryError(msg);
    throw Error(msg);
  }
  return graph::HostBuffer(p, graph::HostBufferFree{free_page_locked});
}

void CudaBackend::copy(void* dst, const void* src, uint64_t bytes) {
  MINFER_ASSERT(!capturing_);
  if (bytes == 0) return;
  flush_uploads("a device-to-device copy");
  if (const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_); e != cudaSuccess)
    fail_cuda(fmt::format("device-to-device copy of {} bytes", bytes), e);
}

void CudaBackend::move_rows(void* base, uint64_t row_bytes, int64_t src, int64_t dst, int64_t count) {
  MINFER_ASSERT(!capturing_);
  if (src < 0 || dst < 0 || count < 0)
    fail("cuda: move_rows: invalid rows (src {}, dst {}, count {})", src, dst, count);
  check_latched("a KV row move");
  flush_uploads("a KV row move");
  clear_launch_failure();
  if (!cuda::move_rows(base, row_bytes, src, dst, count, stream_)) {
    const LaunchFailure* f = launch_failure();
    const std::string site = f ? f->site : "kv_move_rows";
    const cudaError_t err = f ? f->err : cudaErrorUnknown;
    clear_launch_failure();
    fail("cuda: moving {} KV rows of {} bytes from row {} to row {}: launch {} failed: {}", count,
         row_bytes, src, dst, site, cuda_error_text(err));
  }
}

// ---- synchronize ---------------------------------------------------------------------------

void CudaBackend::synchronize() {
  MINFER_ASSERT(!capturing_);
  // Queued readbacks are finished only after a wait that found no error. On any throw the
  // stream is waited for (quietly) before the error leaves, so a readback
  // already queued into the caller's memory (a DMA into page-locked memory) has landed and none
  // lands later; the staged ones are dropped.
  struct DropOnThrow {
    PinnedStaging& s;
    cudaStream_t stream;
    bool armed = true;
    ~DropOnThrow() {
      if (!armed) return;
      if (cudaStreamSynchronize(stream) != cudaSuccess) cudaGetLastError();
      s.drop_readbacks();
    }
  } guard{*staging_, stream_};
  check_latched("synchronize");
  flush_uploads("a synchronize");
  cudaError_t e = cudaMemcpyAsync(fault_host_, fault_dev_, 2 * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream_);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess)
    fail_cuda("synchronize found a fault of earlier device work on this stream (not attributed to "
              "a particular kernel)", e);
  const uint32_t code = fault_host_[0];
  if (code == 0) {
    guard.armed = false;
    staging_->finish_readbacks();
    return;
  }
  const auto value = static_cast<int32_t>(fault_host_[1]);
  fault_host_[0] = fault_host_[1] = 0;
  if (const cudaError_t z = cudaMemsetAsync(fault_dev_, 0, 2 * sizeof(uint32_t), stream_); z != cudaSuccess)
    fail_cuda("resetting the fault words", z);
  if (code & kFaultRowId)
    fail("cuda: get_rows read row id {}, outside its table (the ids input is out of range)", value);
  if (code & kFaultF16Range)
    fail("cuda: a prefill activation of magnitude {} is beyond the f16 range (65504) of the f16 tensor-core GEMM; "
         "run with MINFER_CUDA_PREFILL_MATMUL=mmq (int8 products, no such limit)",
         static_cast<uint32_t>(value));
  fail("cuda: a KV store wrote to cell {}, outside the KV region (the cells input is out of range)", value);
}

}  // namespace minfer::cuda
