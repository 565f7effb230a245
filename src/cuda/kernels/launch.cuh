// Kernel launch checking, shared by every kernel family. Every <<<>>> in src/cuda/kernels is
// followed by MINFER_LAUNCH_CHECK(site), which reads the launch's own error at once, so a
// failure names its launch site; an error latched earlier (by something that was not checked)
// is cleared and reported as latched *before* the launch, never blamed on it.
// Failure injection: when MINFER_CUDA_FAIL_LAUNCH names a site (exact match, comma-separated
// list allowed), that launch reports cudaErrorLaunchFailure without running, so tests can prove
// the error path.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace minfer::cuda {

/// Clears and returns an error latched before a launch (cudaSuccess when none). Call before
/// launching; a non-success result must be reported as latched, not as this launch's error.
cudaError_t take_latched_error();

/// True when MINFER_CUDA_FAIL_LAUNCH names `site` (read once per process; tests reload it
/// through env_reload()).
bool launch_fault_injected(const char* site);

/// Records the first launch failure of the current host thread: `site` and the error. The
/// backend turns it into a minfer::Error naming the site after the op (launch_failure()).
void note_launch_failure(const char* site, cudaError_t err);

/// The failure recorded by note_launch_failure since the last clear, or nullptr.
struct LaunchFailure {
  const char* site;
  cudaError_t err;
};
const LaunchFailure* launch_failure();
void clear_launch_failure();

/// True when launches made with launch_pdl() carry the programmatic-dependent-launch attribute:
/// the current device is sm_90 or newer and MINFER_NO_PDL is not set (read once per process).
bool pdl_enabled();

/// Launches kernel<<<grid, block, smem, stream>>>(args...) with programmatic dependent launch
/// (PDL, sm_90+) when pdl_enabled(): the kernel's blocks may start while the previous kernel in
/// the stream is still running, so its launch latency hides behind that kernel's tail. The kernel
/// MUST begin with pdl_prologue() (it waits for the previous kernel's completion and memory
/// before any global access). Same error reporting as <<<>>>: follow with MINFER_LAUNCH_CHECK.
template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);  // the error stays latched for the check
}

/// First statement of every kernel launched with launch_pdl(): waits until the grids this one
/// depends on have completed and their writes are visible (griddepcontrol.wait), then lets the
/// next PDL launch in the stream start its blocks (griddepcontrol.launch_dependents). Both are
/// no-ops for a launch without the attribute and below sm_90.
/// One exception: mmvq_lane.cu reads its weights (constant model tensors, uploaded with copies,
/// never written by a kernel) before the wait, so they stream while the previous kernel ends;
/// it waits before it touches anything else.
__device__ __forceinline__ void pdl_prologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace minfer::cuda

/// After a kernel launch: reads its error; on failure (or injection) records it for the backend.
/// Evaluates to true when the launch succeeded.
#define MINFER_LAUNCH_CHECK(site)                                                          \
  ([&]() -> bool {                                                                         \
    cudaError_t minfer_err_ = cudaGetLastError();                                          \
    if (minfer_err_ == cudaSuccess && ::minfer::cuda::launch_fault_injected(site))         \
      minfer_err_ = cudaErrorLaunchFailure;                                                \
    if (minfer_err_ != cudaSuccess) ::minfer::cuda::note_launch_failure(site, minfer_err_); \
    return minfer_err_ == cudaSuccess;                                                     \
  }())
