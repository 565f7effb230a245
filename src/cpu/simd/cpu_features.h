// Run-time CPU feature detection for the x86-64 SIMD kernels, and the kernel level chosen from
// it and MINFER_SIMD. A feature counts only when the CPU has it *and* the operating system saves
// its register state (XCR0, read with xgetbv): AVX needs the SSE and AVX state bits, AVX-512 also
// the opmask and upper-ZMM bits (Intel SDM vol. 1, 13.3 and 15.2). On a CPU that is not x86-64
// every feature reads as absent and the level is scalar.
#pragma once

#include <string>
#include <string_view>

namespace minfer::cpu::simd {

/// What the CPU and the OS support. Every flag is false on non-x86-64 builds.
struct CpuFeatures {
  bool avx2 = false;        ///< AVX2 with OS AVX state
  bool fma = false;         ///< FMA3
  bool f16c = false;        ///< F16C (half <-> float conversions)
  bool bmi2 = false;
  bool avx512f = false;     ///< AVX-512 Foundation with OS opmask/ZMM state
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;  ///< VPDPBUSD on 128/256/512-bit registers (with VL)
  bool avx512bf16 = false;
  bool avxvnni = false;     ///< VEX-encoded VPDPBUSD (AVX-VNNI)
};

/// Detected once (cpuid + xgetbv) and cached.
const CpuFeatures& cpu_features();

/// Kernel levels, in increasing order. kAvx2 needs AVX2+FMA+F16C+BMI2; kAvx512 additionally
/// AVX-512 F/BW/VL/DQ/VNNI (the flags the *_avx512.cpp files are compiled with).
enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

/// "scalar", "avx2" or "avx512".
std::string_view simd_level_name(SimdLevel level);

/// The highest level the CPU (and OS) supports.
SimdLevel max_supported_level();

/// True when kernels of `level` can run on this CPU.
bool level_supported(SimdLevel level);

/// The level the process uses: max_supported_level(), capped by MINFER_SIMD (auto, scalar, avx2,
/// avx512; case-insensitive). A request above what the CPU has is capped to the CPU's level
/// (with one warning in the log). Any other value throws minfer::Error naming the variable and
/// the value. Decided on first call and kept.
SimdLevel selected_level();

/// The level MINFER_SIMD = `request` gives on a CPU whose best level is `cpu_max` (the rule of
/// selected_level, without the environment; for tests). Throws minfer::Error for an unknown
/// request.
SimdLevel level_for_request(std::string_view request, SimdLevel cpu_max);

/// One line for logs and `minfer env`-style reports, e.g. "avx2 fma f16c avx512f ... (level avx512)".
std::string describe_cpu_features();

}  // namespace minfer::cpu::simd
