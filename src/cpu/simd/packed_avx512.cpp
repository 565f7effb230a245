// The avx512 compilation of entries_packed.h (this file is compiled with the avx512 flags, see
// src/CMakeLists.txt; its code runs only after the run-time CPU check of kernels.cpp).
#include "cpu/simd/entries_packed.h"
