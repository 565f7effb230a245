#include "cuda/context.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "cuda/kernels/smem_optin.cuh"

namespace minfer::cuda {
namespace {

std::mutex g_instance_mu;
CudaContext* g_instance = nullptr;  // never destroyed: device teardown at exit is the driver's

double mib(size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

}  // namespace

std::string cuda_error_text(cudaError_t err) {
  return fmt::format("{} ({})", cudaGetErrorName(err), cudaGetErrorString(err));
}

DeviceWeight::~DeviceWeight() {
  // A failure here has nobody to report to; do not leave it latched for an unrelated caller.
  if (ptr != nullptr && cudaFree(ptr) != cudaSuccess) cudaGetLastError();
}

CudaContext& CudaContext::instance() {
  std::lock_guard lock(g_instance_mu);
  if (g_instance == nullptr) g_instance = new CudaContext();  // throws: not cached, retried
  return *g_instance;
}

bool CudaContext::available(std::string* why) {
  try {
    instance();
    return true;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

CudaContext::CudaContext() {
  if (env_flag("MINFER_DISABLE_CUDA")) fail("CUDA is disabled (MINFER_DISABLE_CUDA=1)");
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail("no CUDA device: {}", cuda_error_text(err));
  }
  if (count <= 0) fail("no CUDA device: the driver reports none");
  info_.device = 0;
  cudaDeviceProp prop{};
  cudaError_t e = cudaSetDevice(info_.device);
  if (e == cudaSuccess) e = cudaGetDeviceProperties(&prop, info_.device);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("CUDA device {}: cannot be used: {}", info_.device, cuda_error_text(e));
  }
  info_.name = prop.name;
  info_.cc_major = prop.major;
  info_.cc_minor = prop.minor;
  info_.sm_count = prop.multiProcessorCount;
  info_.smem_per_block = prop.sharedMemPerBlock;
  info_.smem_per_block_optin = prop.sharedMemPerBlockOptin;
  info_.total_memory = prop.totalGlobalMem;
  e = cudaStreamCreateWithFlags(&upload_stream_, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("CUDA device {} ({}): cannot create the upload stream: {}", info_.device, info_.name,
         cuda_error_text(e));
  }
  opt_in_shared_memory();
  log_debug("cuda: {}", describe());
}

void CudaContext::opt_in_shared_memory() {
  for (const SmemOptin& o : smem_optins()) {
    const size_t bytes = o.bytes == 0 ? static_cast<size_t>(info_.smem_per_block_optin) : o.bytes;
    if (bytes > info_.smem_per_block_optin) {
      log_warn("cuda: {} needs {} bytes of shared memory, the device allows {} per block: it "
               "will not be launched", o.site, bytes, info_.smem_per_block_optin);
      continue;
    }
    const cudaError_t e = cudaFuncSetAttribute(o.func, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes));
    if (e != cudaSuccess) {
      cudaGetLastError();
      log_warn("cuda: opting {} in to {} bytes of shared memory failed: {}", o.site, bytes,
               cuda_error_text(e));
      continue;
    }
    smem_granted_[o.func] = bytes;
  }
}

bool CudaContext::smem_opted_in(const void* func, size_t bytes) const {
  auto it = smem_granted_.find(func);
  return it != smem_granted_.end() && it->second >= bytes;
}

bool smem_opted_in(const void* func, size_t bytes) {
  return CudaContext::instance().smem_opted_in(func, bytes);
}

int context_sm_count() { return CudaContext::instance().info().sm_count; }

size_t context_smem_optin_max() { return CudaContext::instance().info().smem_per_block_optin; }

int context_compute_capability() {
  const DeviceInfo& i = CudaContext::instance().info();
  return 10 * i.cc_major + i.cc_minor;
}

std::string CudaContext::describe() const {
  return fmt::format("{} (sm_{}{}, {} SMs, {:.0f} GiB)", info_.name, info_.cc_major, info_.cc_minor,
                     info_.sm_count, static_cast<double>(info_.total_memory) / (1u << 30));
}

std::pair<size_t, size_t> CudaContext::memory() const {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return {0, 0};
  }
  return {free_b, total_b};
}

std::shared_ptr<const DeviceWeight> CudaContext::register_weight(const graph::WeightTensor& w) {
  if (w.nbytes > 0 && w.data == nullptr) fail("{}: weight has {} bytes but no data", w.name, w.nbytes);
  const uint64_t hash = w.nbytes > 0 ? XXH3_64bits(w.data, w.nbytes) : 0;
  std::lock_guard lock(mu_);
  auto it = registry_.find(w.name);
  if (it != registry_.end() && it->second->nbytes == w.nbytes && it->second->type == w.type &&
      it->second->content_hash == hash)
    return it->second;

  auto dw = std::make_shared<DeviceWeight>();
  dw->name = w.name;
  dw->type = w.type;
  dw->nbytes = w.nbytes;
  dw->content_hash = hash;
  if (w.nbytes > 0) {
    cudaError_t e = cudaMalloc(&dw->ptr, w.nbytes);
    if (e != cudaSuccess) {
      cudaGetLastError();
      dw->ptr = nullptr;
      const auto [free_b, total_b] = memory();
      throw OutOfMemoryError(fmt::format(
          "{}: cannot allocate {} bytes ({:.1f} MiB) of CUDA memory for the weight: {:.1f} MiB "
          "free of {:.1f} MiB ({})", w.name, w.nbytes, mib(w.nbytes), mib(free_b), mib(total_b),
          cuda_error_text(e)));
    }
    e = cudaMemcpyAsync(dw->ptr, w.data, w.nbytes, cudaMemcpyHostToDevice, upload_stream_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(upload_stream_);
    if (e != cudaSuccess) {
      cudaGetLastError();
      fail("{}: uploading {} bytes to the CUDA device failed: {}", w.name, w.nbytes, cuda_error_text(e));
    }
  }
  ++uploads_;
  registry_[w.name] = dw;
  return dw;
}

size_t CudaContext::registry_size() const {
  std::lock_guard lock(mu_);
  return registry_.size();
}

uint64_t CudaContext::upload_count() const {
  std::lock_guard lock(mu_);
  return uploads_;
}

}  // namespace minfer::cuda
