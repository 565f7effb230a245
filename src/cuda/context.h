// The process-wide CUDA context: the device, its limits (queried at run time), the weight
// registry, and a context stream used only for weight uploads (each upload is synchronized, so it
// can never be part of anybody's capture window). Everything an engine owns (its stream, pool,
// staging, captured graphs) lives in its CudaBackend instead (cuda_backend.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/types.h"
#include "graph/graph.h"

namespace minfer::cuda {

/// Device facts, read once when the context is created.
struct DeviceInfo {
  int device = 0;
  std::string name;                 ///< e.g. "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;   ///< compute capability
  int sm_count = 0;                 ///< multiprocessors
  size_t smem_per_block = 0;        ///< default dynamic + static shared memory per block (bytes)
  size_t smem_per_block_optin = 0;  ///< the opt-in limit (bytes), e.g. 232448 on an H200
  size_t total_memory = 0;          ///< bytes
};

/// A weight's device copy, shared by the registry and the backends that registered it; the
/// device memory is freed when the last owner lets go (a backend keeps what it registered, so
/// a replaced entry is never freed under a backend or its captured graphs).
struct DeviceWeight {
  std::string name;
  TensorType type = TensorType::F32;
  uint64_t nbytes = 0;
  uint64_t content_hash = 0;  ///< XXH3-64 of the bytes
  void* ptr = nullptr;        ///< device memory (null for an empty tensor)
  DeviceWeight() = default;
  DeviceWeight(const DeviceWeight&) = delete;
  DeviceWeight& operator=(const DeviceWeight&) = delete;
  ~DeviceWeight();
};

class CudaContext {
 public:
  /// The context, created on first use. Throws minfer::Error with one line when
  /// MINFER_DISABLE_CUDA=1 ("CUDA is disabled ...") or when no device can be used ("no CUDA
  /// device: <cuda error>"); a failed creation is retried on the next call.
  static CudaContext& instance();

  /// True when instance() succeeds; otherwise false and the reason in `why` (tests use it to
  /// skip). Never throws.
  static bool available(std::string* why = nullptr);

  const DeviceInfo& info() const { return info_; }
  /// "NVIDIA H200 (sm_90, 132 SMs, 141 GiB)".
  std::string describe() const;

  /// Free and total device memory now (cudaMemGetInfo); {0, 0} when the query fails.
  std::pair<size_t, size_t> memory() const;

  /// Uploads weight `w` (its file bytes, unchanged) unless the registry already holds a copy
  /// with the same name, size, type and content, which is returned as is (no upload). A
  /// different size, type or content under the same name replaces the registry entry (the old
  /// copy lives on while a backend holds it). Thread-safe. Throws OutOfMemoryError naming the
  /// tensor, the bytes and the free memory when the copy does not fit, minfer::Error naming the
  /// tensor when the copy fails.
  std::shared_ptr<const DeviceWeight> register_weight(const graph::WeightTensor& w);

  /// Registry entries and device uploads done so far (tests: registering twice uploads once).
  size_t registry_size() const;
  uint64_t upload_count() const;

  /// The opt-in result of a kernel listed in smem_optins() (kernels/smem_optin.cuh).
  bool smem_opted_in(const void* func, size_t bytes) const;

 private:
  CudaContext();
  void opt_in_shared_memory();

  DeviceInfo info_;
  cudaStream_t upload_stream_ = nullptr;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<DeviceWeight>, std::less<>> registry_;
  uint64_t uploads_ = 0;
  std::map<const void*, size_t> smem_granted_;  ///< written once at creation
};

/// "cudaErrorMemoryAllocation (out of memory)".
std::string cuda_error_text(cudaError_t err);

}  // namespace minfer::cuda
