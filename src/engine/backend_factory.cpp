// create_backend: the one place that knows which backends this build has.
#include "core/env.h"
#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "engine/engine.h"

#ifdef MINFER_HAS_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace minfer {

std::unique_ptr<graph::Backend> create_backend(graph::BackendKind kind, int n_threads) {
  if (kind == graph::BackendKind::Cpu) return std::make_unique<cpu::CpuBackend>(n_threads);
#ifdef MINFER_HAS_CUDA
  if (env_flag("MINFER_DISABLE_CUDA")) fail("CUDA is disabled by MINFER_DISABLE_CUDA=1");
  return cuda::create_cuda_backend();
#else
  fail("this minfer was built without CUDA (configure with -DMINFER_CUDA=ON on a machine with nvcc)");
#endif
}

}  // namespace minfer
