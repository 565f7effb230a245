// The avx512 compilation of entries_table.h (this file is compiled with the avx512 flags, see
// src/CMakeLists.txt; its code runs only after the run-time CPU check of kernels.cpp).
#include "cpu/simd/entries_table.h"

namespace minfer::cpu::simd::detail {
void fill_avx512(CpuKernels& k) { avx512::fill(k); }
}  // namespace minfer::cpu::simd::detail
