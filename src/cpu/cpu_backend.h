// CpuBackend: runs every op of the graph on the host with f32 activations. Quantized matmuls
// quantize the activations to the weight type's vec_dot_type (Q8_0 / Q8_1 / Q8_K, f16, bf16)
// once per op and use the row dot products of src/quant (the arithmetic llama.cpp's CPU
// backend uses, so parity with its references is tight). Work is spread over a persistent
// thread pool owned by this instance.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/kernels.h"
#include "graph/backend.h"

namespace minfer::cpu {

class CpuBackend : public graph::Backend {
 public:
  /// `n_threads` >= 1 (0 = default_thread_count()).
  explicit CpuBackend(int n_threads = 0);
  ~CpuBackend() override;

  graph::BackendKind kind() const override { return graph::BackendKind::Cpu; }
  std::string describe() const override;
  std::string unsupported_reason(const graph::Graph& g, const graph::Node& n) const override;
  bool supports_fused(graph::Op op) const override;

  int32_t alloc_buffer(uint64_t bytes) override;
  void release_buffer(int32_t id) override;
  void* buffer_ptr(int32_t id) const override;
  uint64_t pool_generation() const override { return generation_; }
  const void* weight_data(const graph::WeightTensor& w) override { return w.data; }
  /// Makes the packed copy of a matrix weight now (see packed_weight) rather than at first use.
  void register_weight(const graph::WeightTensor& w) override;

  void upload(void* dst, const void* src, uint64_t bytes) override;
  void download(void* dst, const void* src, uint64_t bytes) override;
  void copy(void* dst, const void* src, uint64_t bytes) override;
  void move_rows(void* base, uint64_t row_bytes, int64_t src, int64_t dst, int64_t count) override;

  void execute(const graph::Graph& g, const graph::ExecPlan& plan, size_t begin, size_t end) override;
  void synchronize() override {}

  ThreadPool& pool() { return pool_; }
  /// Bytes of packed weight copies made so far.
  uint64_t packed_bytes() const { return packed_bytes_; }
  /// Bytes currently held by the pool (in use or free).
  uint64_t pool_bytes() const { return pool_bytes_; }

 private:
  struct Buffer {
    uint8_t* ptr = nullptr;
    uint64_t bytes = 0;
  };
  ThreadPool pool_;
  std::vector<Buffer> buffers_;
  std::map<uint64_t, std::vector<int32_t>> free_;  ///< bytes -> free buffer ids
  uint64_t generation_ = 0;
  uint64_t pool_bytes_ = 0;
  // Per-op scratch, kept between ops and calls so a forward pass allocates (and page-faults)
  // nothing after the first: quantized activations, and f32 intermediates of fused ops.
  std::vector<uint8_t> work_, work2_;
  std::vector<float> fwork_;

  /// Packed (row-interleaved) copies of the weights, made on first use and kept for the life of
  /// the backend, keyed by the weight's data pointer (src/cpu/simd/README.md). Once a weight is
  /// packed, the original's pages are released from this process (madvise) when the weight is
  /// file_mapped (a read-only file mapping); heap weights are left as they are.
  PackedWeight packed_weight(const graph::Node& weight_node, const void* data);
  struct Packed {
    std::unique_ptr<uint8_t, void (*)(void*)> mem{nullptr, nullptr};
    PackedWeight view;
  };
  std::unordered_map<const void*, Packed> packed_;
  uint64_t packed_bytes_ = 0;
  bool pack_enabled_;
};

}  // namespace minfer::cpu
