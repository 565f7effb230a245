// CudaBackend: the graph Backend of one engine on the CUDA device. It owns everything that is
// per engine: a non-blocking stream that every launch, copy, event and capture of this instance
// uses; a buffer pool (exact byte-length reuse, memory returned only on destruction); pinned
// staging for inputs and readbacks; a scratch arena for ops that need temporary device memory;
// the captured CUDA graphs and their warm-up counters. Process-wide facts (the device, its
// limits, the weight registry) live in CudaContext (context.h). docs/cuda.md describes the
// design; the capture state machine is in cuda_graphs.cpp, the op table in cuda_ops.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/context.h"
#include "cuda/staging.h"
#include "graph/backend.h"

namespace minfer::cuda {

/// Capture / replay counters of one backend (tests and diagnostics).
struct GraphStats {
  uint64_t direct = 0;    ///< split executions by direct launches
  uint64_t captures = 0;  ///< capture windows closed into an executable graph
  uint64_t replays = 0;   ///< launches of a stored executable graph
  uint64_t aborted = 0;   ///< capture windows aborted (graphs are then disabled)
  bool enabled = true;    ///< false with MINFER_NO_CUDA_GRAPH=1 or after an error
  size_t stored = 0;      ///< executable graphs held now
};

class CudaBackend final : public graph::Backend {
 public:
  /// Uses CudaContext::instance() (throws minfer::Error when CUDA is disabled or absent) and
  /// creates this instance's stream. Reads MINFER_NO_CUDA_GRAPH, MINFER_NO_PREFILL_CAPTURE,
  /// MINFER_CUDA_NO_INPUT_GATHER and MINFER_CUDA_STAGED_READBACK.
  CudaBackend();
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  graph::BackendKind kind() const override { return graph::BackendKind::Cuda; }
  std::string describe() const override;
  std::string unsupported_reason(const graph::Graph& g, const graph::Node& n) const override;
  bool supports_fused(graph::Op op) const override;

  /// Exact byte-length reuse; a new buffer is zero-filled (stream-ordered). Throws
  /// OutOfMemoryError naming the bytes and the device's free memory when cudaMalloc fails.
  int32_t alloc_buffer(uint64_t bytes) override;
  void release_buffer(int32_t id) override;
  void* buffer_ptr(int32_t id) const override;
  uint64_t pool_generation() const override { return generation_; }

  /// Places `w` by place_weight (graph/weight_placement.h): refused -> minfer::Error naming the
  /// tensor and its type; otherwise the context uploads it (or reuses an identical copy).
  void register_weight(const graph::WeightTensor& w) override;
  /// The device copy this backend registered for `w` (minfer::Error when never registered, or
  /// registered with another size / type).
  const void* weight_data(const graph::WeightTensor& w) override;

  /// Uploads of at most 64 KiB are gathered and done by one scatter kernel queued before this
  /// backend's next stream operation (MINFER_CUDA_NO_INPUT_GATHER=1, or when the driver refuses
  /// the mapped page-locked blocks (one warning): one DMA copy each). Throws minfer::Error naming
  /// the bytes when a copy cannot be queued.
  void upload(void* dst, const void* src, uint64_t bytes) override;
  void download(void* dst, const void* src, uint64_t bytes) override;
  /// Into page-locked memory (alloc_host): one DMA copy straight into `dst`; into pageable
  /// memory (or with MINFER_CUDA_STAGED_READBACK=1): through the pinned readback buffer, copied
  /// into `dst` by synchronize() after a wait that found no error, or at once by a synchronous
  /// download when the buffer is busy with other queued readbacks or `bytes` is above 64 MiB.
  void download_at_sync(void* dst, const void* src, uint64_t bytes) override;
  /// Page-locked host memory (cudaHostAlloc); OutOfMemoryError naming the bytes when the driver
  /// has none, minfer::Error for another CUDA error.
  graph::HostBuffer alloc_host(uint64_t bytes) override;
  /// kAttnDecodeMaxTokens (8): up to that many tokens of one sequence take the decode kernels
  /// (attention's split plan and the matrix-vector products do not depend on the token count;
  /// docs/cuda.md's identity gates); more take the prefill kernels, whose roundings differ.
  int64_t exact_step_tokens() const override;
  void copy(void* dst, const void* src, uint64_t bytes) override;
  void move_rows(void* base, uint64_t row_bytes, int64_t src, int64_t dst, int64_t count) override;

  /// Runs nodes [begin, end): direct launches, or a capture / replay of a CUDA graph for the key
  /// (g.uid(), begin, end) (cuda_graphs.cpp). A failed launch throws minfer::Error naming the
  /// node and the launch site (and aborts an open capture, disabling graphs for this backend).
  void execute(const graph::Graph& g, const graph::ExecPlan& plan, size_t begin, size_t end) override;
  /// Waits for the stream. Reports an error latched before the call as latched (never blamed
  /// on a kernel), a device fault raised by earlier work, and bad kernel inputs (a row id or KV
  /// cell out of range) as one-line minfer::Errors.
  void synchronize() override;

  cudaStream_t stream() const { return stream_; }
  GraphStats graph_stats() const;
  /// Bytes held by the pool (in use or free) and the scratch arena.
  uint64_t pool_bytes() const { return pool_bytes_; }
  size_t scratch_bytes() const { return scratch_bytes_; }

 private:
  struct Buffer {
    void* ptr = nullptr;
    uint64_t bytes = 0;
  };
  struct GraphKey {
    uint64_t uid = 0;
    size_t begin = 0, end = 0;
    auto operator<=>(const GraphKey&) const = default;
  };
  struct KeyState {
    uint64_t runs = 0;       ///< executions since the key was (re)armed
    cudaGraphExec_t exec = nullptr;
    uint64_t generation = 0;  ///< pool generation the exec was captured at
    uint64_t signature = 0;   ///< split_signature at capture (addresses, KV layout)
    uint64_t last_use = 0;
  };
  enum class Mode { Direct, Capture, Replay };

  // cuda_ops.cpp
  size_t node_scratch_bytes(const graph::Graph& g, const graph::Node& n) const;
  /// Runs node `id` of a split that ends before node `end` (the split bounds where run_node
  /// looks for the next matrix product, whose weights the L2 prefetch hint names).
  void run_node(const graph::Graph& g, const graph::ExecPlan& plan, graph::NodeId id, size_t end);
  void run_direct(const graph::Graph& g, const graph::ExecPlan& plan, size_t begin, size_t end);
  /// MINFER_CUDA_PROFILE=1: run_direct with an event pair around every node; the device time of
  /// each (op, weight type, shape) class is summed and printed when the backend is destroyed.
  void run_profiled(const graph::Graph& g, const graph::ExecPlan& plan, size_t begin, size_t end);
  void print_profile() const;

  // cuda_graphs.cpp
  Mode choose_mode(const graph::Graph& g, const graph::ExecPlan& plan, size_t begin, size_t end,
                   KeyState** state);
  void begin_capture();
  bool end_capture(KeyState& st, uint64_t signature);
  void abort_capture(const std::string& why);
  void disable_graphs(const std::string& why);
  void destroy_exec(KeyState& st);
  void evict_keys();

  // cuda_backend.cpp
  void ensure_scratch(size_t bytes);
  /// Queues the gathered uploads' scatter kernel (before any other operation on the stream, so
  /// stream order is upload order); throws naming `before` when it cannot be queued.
  void flush_uploads(const char* before);
  /// Throws "cuda: <what>: <error>" (OutOfMemoryError for cudaErrorMemoryAllocation) after
  /// clearing the error so it is not reported again as latched.
  [[noreturn]] void fail_cuda(const std::string& what, cudaError_t err) const;
  void check_latched(const char* where) const;

  CudaContext& ctx_;
  cudaStream_t stream_ = nullptr;
  std::vector<Buffer> buffers_;
  std::map<uint64_t, std::vector<int32_t>> free_;  ///< bytes -> free buffer ids
  uint64_t generation_ = 0;
  uint64_t pool_bytes_ = 0;

  void* scratch_ = nullptr;  ///< arena for op temporaries (grow-only)
  size_t scratch_bytes_ = 0;
  std::vector<void*> retired_scratch_;  ///< outgrown arenas (freed on destruction)

  uint32_t* fault_dev_ = nullptr;   ///< 2 words (kernels/common.cuh FaultCode)
  uint32_t* fault_host_ = nullptr;  ///< pinned copy read at synchronize()

  std::unique_ptr<PinnedStaging> staging_;
  std::unordered_map<std::string, std::shared_ptr<const DeviceWeight>> weights_;

  bool graphs_enabled_ = true;
  bool prefill_capture_ = true;
  int64_t attn_chunk_ = 0;  ///< MINFER_CUDA_ATTN_CHUNK: decode attention cells per range (0 = auto)
  int64_t attn_head_slices_ = 0;  ///< MINFER_CUDA_ATTN_HEAD_SLICES: decode attention blocks per KV head (0 = auto)
  bool flash_attn_ = true;  ///< !MINFER_CUDA_NO_FLASH_ATTN: prefill attention through flash_attn.cuh
  bool capturing_ = false;
  bool gather_inputs_ = true;     ///< !MINFER_CUDA_NO_INPUT_GATHER
  bool staged_readback_ = false;  ///< MINFER_CUDA_STAGED_READBACK
  std::map<GraphKey, KeyState> keys_;
  uint64_t use_clock_ = 0;
  GraphStats stats_;

  struct ProfileEntry {
    double ms = 0.0;
    uint64_t count = 0;
  };
  bool profile_ = false;
  std::map<std::string, ProfileEntry> profile_entries_;
  double profile_total_ms_ = 0.0;
};

/// A new CudaBackend (throws minfer::Error when CUDA is disabled or no device is present).
std::unique_ptr<graph::Backend> create_cuda_backend();

}  // namespace minfer::cuda
