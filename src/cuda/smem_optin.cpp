// The list of kernel instantiations that need more than 48 KiB of dynamic shared memory
// (kernels/smem_optin.cuh). A family adds its entries here, e.g. from a function its .cu file
// exports that returns {site, (const void*)&kernel<...>, bytes} rows.
#include "cuda/kernels/smem_optin.cuh"

#include <vector>

#include "cuda/kernels/hgemm.cuh"
#include "cuda/kernels/mmq.cuh"
#include "cuda/kernels/mmvq.cuh"

namespace minfer::cuda {

std::span<const SmemOptin> smem_optins() {
  static const std::vector<SmemOptin> list = [] {
    std::vector<SmemOptin> v;
    for (const SmemOptin& o : mm::mmq_smem_optins()) v.push_back(o);
    for (const SmemOptin& o : mm::hgemm_smem_optins()) v.push_back(o);
    for (const SmemOptin& o : mm::mmvq_lane_smem_optins()) v.push_back(o);
    return v;
  }();
  return list;
}

}  // namespace minfer::cuda
