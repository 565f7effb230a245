// Builds the kernel table of each level on first use and picks the process's level.
#include "cpu/simd/kernels.h"

#include <mutex>

#include "core/error.h"
#include "cpu/simd/levels.h"

namespace minfer::cpu::simd {

const TypeKernels* CpuKernels::find(TensorType t) const {
  const int i = detail::kernel_type_index(t);
  return i < 0 ? nullptr : &types[static_cast<size_t>(i)];
}

const TypeKernels& CpuKernels::get(TensorType t) const {
  const TypeKernels* k = find(t);
  if (k == nullptr) fail("no CPU kernels for tensor type {}", type_name(t));
  return *k;
}

const CpuKernels& cpu_kernels(SimdLevel level) {
  static CpuKernels tables[3];
  static std::once_flag once[3];
  const int i = static_cast<int>(level);
  if (!(i >= 0 && i < 3))
    fail("unknown SIMD level {}", i);
  if (!(level_supported(level)))
    fail("this CPU cannot run the {} kernels (it has: {})",
         simd_level_name(level), describe_cpu_features());
  std::call_once(once[i], [&] {
    switch (level) {
      case SimdLevel::kScalar: detail::fill_scalar(tables[i]); break;
      case SimdLevel::kAvx2: detail::fill_avx2(tables[i]); break;
      case SimdLevel::kAvx512: detail::fill_avx512(tables[i]); break;
    }
  });
  return tables[i];
}

const CpuKernels& cpu_kernels() {
  static const CpuKernels& k = cpu_kernels(selected_level());
  return k;
}

}  // namespace minfer::cpu::simd
