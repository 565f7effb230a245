#include "cpu/simd/cpu_features.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <string>

#include "core/ascii.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#define MINFER_X86_64 1
#endif

namespace minfer::cpu::simd {
namespace {

#if MINFER_X86_64
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
  return r;
}

/// XCR0 (the OS-enabled state components). Only call when CPUID.1:ECX.OSXSAVE[27] is set.
unsigned long long xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

bool bit(unsigned reg, int n) { return ((reg >> n) & 1u) != 0; }

CpuFeatures detect() {
  CpuFeatures f;
  unsigned max_leaf = 0, ebx = 0, ecx = 0, edx = 0;
  __cpuid(0, max_leaf, ebx, ecx, edx);
  if (max_leaf < 7) return f;
  const Regs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.c, 27);
  if (!osxsave) return f;
  const unsigned long long x = xcr0();
  // Intel SDM vol. 1 13.3: bit 1 SSE, bit 2 AVX (YMM upper); bits 5-7 opmask, ZMM0-15 upper
  // halves, ZMM16-31.
  const bool os_avx = (x & 0x6) == 0x6;
  const bool os_avx512 = os_avx && (x & 0xE0) == 0xE0;
  if (!os_avx) return f;
  const Regs l7 = cpuid(7, 0);
  const Regs l7s1 = cpuid(7, 1);
  const bool avx = bit(l1.c, 28);
  f.fma = avx && bit(l1.c, 12);
  f.f16c = avx && bit(l1.c, 29);
  f.avx2 = avx && bit(l7.b, 5);
  f.bmi2 = bit(l7.b, 8);
  f.avxvnni = f.avx2 && bit(l7s1.a, 4);
  if (os_avx512) {
    f.avx512f = bit(l7.b, 16);
    f.avx512dq = f.avx512f && bit(l7.b, 17);
    f.avx512bw = f.avx512f && bit(l7.b, 30);
    f.avx512vl = f.avx512f && bit(l7.b, 31);
    f.avx512vnni = f.avx512f && bit(l7.c, 11);
    f.avx512bf16 = f.avx512f && bit(l7s1.a, 5);
  }
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string_view simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar: return "scalar";
    case SimdLevel::kAvx2: return "avx2";
    case SimdLevel::kAvx512: return "avx512";
  }
  return "?";
}

bool level_supported(SimdLevel level) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c && f.bmi2;
  switch (level) {
    case SimdLevel::kScalar: return true;
    case SimdLevel::kAvx2: return avx2;
    case SimdLevel::kAvx512:
      return avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni;
  }
  return false;
}

SimdLevel max_supported_level() {
  if (level_supported(SimdLevel::kAvx512)) return SimdLevel::kAvx512;
  if (level_supported(SimdLevel::kAvx2)) return SimdLevel::kAvx2;
  return SimdLevel::kScalar;
}

SimdLevel level_for_request(std::string_view request, SimdLevel cpu_max) {
  const std::string r = ascii_lower(request);
  SimdLevel want;
  if (r.empty() || r == "auto") return cpu_max;
  if (r == "scalar") want = SimdLevel::kScalar;
  else if (r == "avx2") want = SimdLevel::kAvx2;
  else if (r == "avx512") want = SimdLevel::kAvx512;
  else fail("environment variable MINFER_SIMD={} is not one of auto, scalar, avx2, avx512", request);
  return std::min(want, cpu_max);
}

SimdLevel selected_level() {
  static const SimdLevel level = [] {
    const std::string r = env_choice("MINFER_SIMD");  // lower case, "auto" when unset or empty
    const SimdLevel got = level_for_request(r, max_supported_level());
    if (r != "auto" && simd_level_name(got) != r)
      log_warn("MINFER_SIMD={} asks for more than this CPU has; using {}", env_string("MINFER_SIMD"),
               simd_level_name(got));
    return got;
  }();
  return level;
}

std::string describe_cpu_features() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.bmi2, "bmi2");
  add(f.avxvnni, "avx_vnni");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512vnni, "avx512_vnni");
  add(f.avx512bf16, "avx512_bf16");
  if (s.empty()) s = "none";
  return fmt::format("{} (kernel level {})", s, simd_level_name(max_supported_level()));
}

}  // namespace minfer::cpu::simd
