// The avx2 compilation of entries_table.h (this file is compiled with the avx2 flags, see
// src/CMakeLists.txt; its code runs only after the run-time CPU check of kernels.cpp).
#include "cpu/simd/entries_table.h"

namespace minfer::cpu::simd::detail {
void fill_avx2(CpuKernels& k) { avx2::fill(k); }
}  // namespace minfer::cpu::simd::detail
