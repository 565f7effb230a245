// Device helpers shared by the matrix-product kernels (activation quantization, MMVQ, prefill
// GEMM): exact conversions and roundings that reproduce the CPU reference bit for bit, the
// streaming weight loads, and the per-warp staging of weight bytes into shared memory.
//
// The block-level helpers are __host__ __device__ (MM_HD) so that mmvq_emulate.cu can run the
// kernels' exact arithmetic on the host, for tests on machines without a GPU; the host paths of
// the intrinsics below compute the same values.
//
// Exactness: every f32 operation that the CPU reference defines (src/quant/quant_ref.h) is
// written with an _rn intrinsic (__fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn): nvcc contracts
// a * b + c into a fused multiply-add by default, and the intrinsics are never contracted.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "core/fp16.h"

namespace minfer::cuda::mm {

inline constexpr unsigned kFullMask = 0xFFFFFFFFu;

#define MM_HD __host__ __device__ __forceinline__
// `#pragma unroll` in MM_HD code: the host compiler does not know the pragma.
#ifdef __CUDA_ARCH__
#define MM_UNROLL _Pragma("unroll")
#else
#define MM_UNROLL
#endif

// ---- f32 operations with one rounding each (host: plain operators; nvcc's host compiler for
// x86-64 has no FMA to contract into) -----------------------------------------------------------
MM_HD float fmul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
MM_HD float fadd(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
MM_HD float fsub(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
/// float(i), rounded to nearest.
MM_HD float i2f(int i) {
#ifdef __CUDA_ARCH__
  return __int2float_rn(i);
#else
  return static_cast<float>(i);
#endif
}
MM_HD uint32_t f2u(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
MM_HD float u2f(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
/// The low 32 bits of (hi:lo) >> s, s in [0, 31].
MM_HD uint32_t funnel_r(uint32_t lo, uint32_t hi, int s) {
#ifdef __CUDA_ARCH__
  return __funnelshift_r(lo, hi, s);
#else
  return static_cast<uint32_t>(((static_cast<uint64_t>(hi) << 32) | lo) >> (s & 31));
#endif
}
/// c + the sum of the four signed byte products of a and b.
MM_HD int dp4a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int i = 0; i < 4; ++i)
    c += static_cast<int8_t>(a >> (8 * i)) * static_cast<int8_t>(b >> (8 * i));
  return c;
#endif
}

// ---- conversions (the algorithms of core/fp16.h, so device and CPU bytes agree) -------------

/// Half bits -> float. The hardware conversion is exact for every half; only a NaN's payload
/// may differ from core/fp16.h (a NaN weight scale gives NaN outputs either way).
MM_HD float half_to_float(uint16_t h) {
#ifdef __CUDA_ARCH__
  return __half2float(__ushort_as_half(h));
#else
  return fp16_to_fp32(h);
#endif
}

MM_HD float bf16_to_float(uint16_t b) { return u2f(static_cast<uint32_t>(b) << 16); }

/// Float -> half bits, round to nearest even, overflow to +-inf, NaN quiet with core/fp16.h's
/// payload bits: identical bytes to fp32_to_fp16 for every input.
MM_HD uint16_t float_to_half_bits(float f) {
  const uint32_t x = f2u(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x1FFu));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (abs < 0x38800000u) {  // subnormal half or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // in [14, 24]
    uint32_t half = m >> (shift - 1);
    const bool sticky = (m & ((1u << (shift - 1)) - 1u)) != 0;
    const uint32_t round_bit = half & 1u;
    half >>= 1;
    if (round_bit && (sticky || (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = (abs >> 13) - ((127 - 15) << 10);
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

/// Float -> bfloat16 bits, round to nearest even, NaN quiet (core/fp16.h fp32_to_bf16).
MM_HD uint16_t float_to_bf16_bits(float f) {
  uint32_t x = f2u(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

MM_HD bool is_finite(float v) {
  return (f2u(v) & 0x7F800000u) != 0x7F800000u;
}

/// Round to nearest, ties away from zero, clamped to [lo, hi]; NaN gives 0 (then clamped).
/// The rule of quant/rounding.h round_away_clamped (Q8_0 / Q8_1 activations).
__device__ __forceinline__ int round_away_clamped(float t, int lo, int hi) {
  if (t != t) t = 0.0f;
  if (t <= static_cast<float>(lo)) return lo;
  if (t >= static_cast<float>(hi)) return hi;
  const float a = fabsf(t);
  int i = static_cast<int>(a);
  if (__fsub_rn(a, static_cast<float>(i)) >= 0.5f) ++i;
  return t < 0.0f ? -i : i;
}

/// Round to nearest, ties to even, clamped to [lo, hi]; NaN gives 0 (then clamped).
/// The rule of quant/rounding.h round_even_clamped (Q8_K activations).
__device__ __forceinline__ int round_even_clamped(float t, int lo, int hi) {
  if (t != t) t = 0.0f;
  if (t <= static_cast<float>(lo)) return lo;
  if (t >= static_cast<float>(hi)) return hi;
  return __float2int_rn(t);
}

// ---- byte helpers -----------------------------------------------------------------------------

/// Spreads the low 4 bits of x to bit 4 of each byte: bit i of x -> bit 8i + 4. The shifted
/// copies x, x << 7, x << 14, x << 21 occupy disjoint bit ranges, so the product has no carries.
MM_HD uint32_t spread4_to_bit4(uint32_t x) {
  return ((x & 0xFu) * 0x00204081u & 0x01010101u) << 4;
}

/// The 32-bit little-endian word at byte offset `off` (even) of a shared-memory byte buffer.
/// Reads the two aligned words around it; the buffer must have 4 readable bytes past the end.
MM_HD uint32_t sm_u32(const uint8_t* buf, int off) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(buf + (off & ~3));
  return funnel_r(w[0], w[1], (off & 3) * 8);
}

MM_HD uint16_t sm_u16(const uint8_t* buf, int off) {
  return *reinterpret_cast<const uint16_t*>(buf + off);
}

/// Four consecutive little-endian words at byte offset `off` (even): one 16-byte read when
/// `off` is 16-aligned (the K-quant blocks of 144 and 176 bytes in a 16-aligned row), else
/// five aligned words and funnel shifts.
MM_HD uint4 sm_u32x4(const uint8_t* buf, int off) {
  if ((off & 15) == 0) return *reinterpret_cast<const uint4*>(buf + off);
  const uint32_t* w = reinterpret_cast<const uint32_t*>(buf + (off & ~3));
  const int s = (off & 3) * 8;
  uint4 r;
  r.x = funnel_r(w[0], w[1], s);
  r.y = funnel_r(w[1], w[2], s);
  r.z = funnel_r(w[2], w[3], s);
  r.w = funnel_r(w[3], w[4], s);
  return r;
}

/// Two consecutive words at byte offset `off` (even).
MM_HD uint2 sm_u32x2(const uint8_t* buf, int off) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(buf + (off & ~3));
  const int s = (off & 3) * 8;
  return make_uint2(funnel_r(w[0], w[1], s), funnel_r(w[1], w[2], s));
}

/// out[i] = the little-endian word at byte offset o + 4 i of the words v (o even, 0..14; words
/// past the end of v read as 0), without run-time register indexing (which would go through local
/// memory): two select stages shift by o / 4 words, then a funnel shift by (o % 4) * 8 bits.
/// The direct-load MMVQ of 2-byte aligned blocks (mmvq_q6k_direct.cu) loads the aligned 16-byte
/// words around a run of bytes and extracts the run with this.
template <int NIN, int NOUT>
MM_HD void extract_words(const uint32_t (&v)[NIN], int o, uint32_t (&out)[NOUT]) {
  uint32_t a[NOUT + 1];
MM_UNROLL
  for (int i = 0; i < NOUT + 1; ++i) {
    const uint32_t x0 = i < NIN ? v[i] : 0u, x2 = i + 2 < NIN ? v[i + 2] : 0u;
    const uint32_t x1 = i + 1 < NIN ? v[i + 1] : 0u, x3 = i + 3 < NIN ? v[i + 3] : 0u;
    // a[i] = v[i + o / 4]
    a[i] = (o & 8) ? ((o & 4) ? x3 : x2) : ((o & 4) ? x1 : x0);
  }
MM_UNROLL
  for (int i = 0; i < NOUT; ++i) out[i] = funnel_r(a[i], a[i + 1], (o & 2) * 8);
}

// ---- global loads -----------------------------------------------------------------------------

/// 16 bytes of weights (16-aligned address), read once: not kept in L1 so the activations,
/// which every warp of the SM re-reads, stay there.
__device__ __forceinline__ uint4 ldg_stream16(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

/// The 16-byte aligned word at address `a` of a tensor occupying bytes [lo, hi) (lo and hi
/// even). Bytes outside the tensor read as 0 and are never touched in memory, so a word that
/// straddles the tensor's start or end is safe.
__device__ __forceinline__ uint4 load_word_clamped(uint64_t a, uint64_t lo, uint64_t hi) {
  if (a >= lo && a + 16 <= hi) return ldg_stream16(reinterpret_cast<const void*>(a));
  uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint64_t q = a + 2 * i;
    if (q >= lo && q + 2 <= hi)
      w[i / 2] |= static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(q)) << (16 * (i & 1));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// ---- per-warp staging of a byte range into shared memory -------------------------------------

/// A byte range [start, start + bytes) of the weights staged as whole 16-byte aligned words:
/// word i of the stage holds bytes [base + 16 i, base + 16 i + 16), base = start rounded down
/// to 16, so the range begins at byte `offset` of the stage.
struct StageGeom {
  uint64_t base;
  int offset;
  int words;
};

MM_HD StageGeom stage_geom(uint64_t start, int64_t bytes) {
  StageGeom g;
  g.base = start & ~uint64_t{15};
  g.offset = static_cast<int>(start - g.base);
  g.words = static_cast<int>((static_cast<int64_t>(g.offset) + bytes + 15) >> 4);
  return g;
}

/// U words per lane in flight: the warp loads up to 32 * U words of one stage into registers.
template <int U>
struct StageRegs {
  uint4 w[U];

  __device__ __forceinline__ void load(const StageGeom& g, int lane, uint64_t lo, uint64_t hi) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = lane + 32 * u;
      if (i < g.words) w[u] = load_word_clamped(g.base + 16 * static_cast<uint64_t>(i), lo, hi);
    }
  }

  __device__ __forceinline__ void store(uint4* stage, const StageGeom& g, int lane) const {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = lane + 32 * u;
      if (i < g.words) stage[i] = w[u];
    }
  }
};

/// Folds the 32 lanes of a warp by halving (lane[k] += lane[k + w], w = 16 .. 1) and returns
/// lane 0's value in lane 0: step 3 of the accumulation contract of quant_ref.h.
__device__ __forceinline__ float fold_lanes(float v) {
#pragma unroll
  for (int w = 16; w >= 1; w >>= 1) v = __fadd_rn(v, __shfl_down_sync(kFullMask, v, w));
  return v;
}

}  // namespace minfer::cuda::mm
