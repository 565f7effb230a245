// Dynamic shared memory above the 48 KiB default must be opted in per kernel instantiation
// (cudaFuncAttributeMaxDynamicSharedMemorySize) before the first launch that uses it, and never
// inside a capture window. minfer does it once per process, when the CudaContext is created:
// before any CudaBackend exists, so before any capture window can exist. Each kernel family
// with such an instantiation lists it in smem_optins() (smem_optin.cpp); its launcher asks
// smem_opted_in() and refuses the launch (recording its site) when the opt-in failed.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>

namespace minfer::cuda {

/// One kernel instantiation that needs `bytes` (> 48 KiB) of dynamic shared memory.
struct SmemOptin {
  const char* site;  ///< the launch site name of the instantiation
  const void* func;  ///< the __global__ function
  size_t bytes;  ///< 0: the device's largest opt-in (cudaDevAttrMaxSharedMemoryPerBlockOptin)
};

/// Every such instantiation of every family (none of the non-matmul families needs one: their
/// largest static + dynamic use is ~25 KiB).
std::span<const SmemOptin> smem_optins();

/// True when the context opted `func` in to at least `bytes` of dynamic shared memory.
bool smem_opted_in(const void* func, size_t bytes);

/// Multiprocessors of the context's device (DeviceInfo::sm_count), for launch plans made below
/// the backend (matmul.cu's f16 GEMM plans).
int context_sm_count();

/// Largest dynamic shared memory one block may opt in to on the context's device, in bytes
/// (cudaDevAttrMaxSharedMemoryPerBlockOptin; 232448 on an H200).
size_t context_smem_optin_max();

/// Compute capability of the context's device as 10 major + minor (90 for an H200).
int context_compute_capability();

}  // namespace minfer::cuda
