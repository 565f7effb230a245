// The launch-check helpers of kernels/launch.cuh: latched-error handling, the failure-injection
// switch (MINFER_CUDA_FAIL_LAUNCH) and the per-thread record of the first failed launch.
#include "cuda/kernels/launch.cuh"

#include <string>
#include <string_view>

#include "core/env.h"

namespace minfer::cuda {
namespace {

thread_local LaunchFailure t_failure{nullptr, cudaSuccess};
thread_local bool t_has_failure = false;

}  // namespace

cudaError_t take_latched_error() { return cudaGetLastError(); }

bool pdl_enabled() {
  static const bool enabled = [] {
    if (env_flag("MINFER_NO_PDL")) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
      (void)cudaGetLastError();  // not blamed on the next launch
      return false;
    }
    return major >= 9;
  }();
  return enabled;
}

bool launch_fault_injected(const char* site) {
  const std::string& list = env_string("MINFER_CUDA_FAIL_LAUNCH");
  if (list.empty() || site == nullptr) return false;
  const std::string_view want(site);
  std::string_view rest(list);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (item == want) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

void note_launch_failure(const char* site, cudaError_t err) {
  if (t_has_failure) return;  // the first failure is the one to report
  t_failure = LaunchFailure{site, err};
  t_has_failure = true;
}

const LaunchFailure* launch_failure() { return t_has_failure ? &t_failure : nullptr; }

void clear_launch_failure() {
  t_has_failure = false;
  t_failure = LaunchFailure{nullptr, cudaSuccess};
}

}  // namespace minfer::cuda
