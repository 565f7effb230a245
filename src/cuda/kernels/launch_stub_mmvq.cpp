// TEMPORARY (mmvq branch only): a minimal implementation of launch.cuh so the matmul kernels and
// their tests link before the "cuda" helper's real one lands. The lead drops this file when
// merging that branch. No failure injection here: launch_fault_injected is always false.
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {
thread_local LaunchFailure g_failure{nullptr, cudaSuccess};
thread_local bool g_has_failure = false;
}  // namespace

cudaError_t take_latched_error() { return cudaGetLastError(); }

bool launch_fault_injected(const char*) { return false; }

void note_launch_failure(const char* site, cudaError_t err) {
  if (g_has_failure) return;
  g_failure = {site, err};
  g_has_failure = true;
}

const LaunchFailure* launch_failure() { return g_has_failure ? &g_failure : nullptr; }

void clear_launch_failure() { g_has_failure = false; }

}  // namespace minfer::cuda
