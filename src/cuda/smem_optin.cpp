// The list of kernel instantiations that need more than 48 KiB of dynamic shared memory
// (kernels/smem_optin.cuh). A family adds its entries here, e.g. from a function its .cu file
// exports that returns {site, (const void*)&kernel<...>, bytes} rows.
#include "cuda/kernels/smem_optin.cuh"

namespace minfer::cuda {

std::span<const SmemOptin> smem_optins() { return {}; }

}  // namespace minfer::cuda
