// Kernel launch checking, shared by every kernel family. Every <<<>>> in src/cuda/kernels is
// followed by MINFER_LAUNCH_CHECK(site), which reads the launch's own error at once, so a
// failure names its launch site; an error latched earlier (by something that was not checked)
// is cleared and reported as latched *before* the launch, never blamed on it.
// Failure injection: when MINFER_CUDA_FAIL_LAUNCH names a site (exact match, comma-separated
// list allowed), that launch reports cudaErrorLaunchFailure without running, so tests can prove
// the error path.
#pragma once

#include <cuda_runtime.h>

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
