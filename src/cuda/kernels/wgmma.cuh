// Inline PTX wrappers for the sm_90a warpgroup matrix-multiply-accumulate (wgmma) used by the
// f16 / bf16 prefill GEMM (hgemm.cu). PTX ISA 8.0+ "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate": 128 threads (4 warps) issue one m64nNk16 product whose A (64 x 16) and
// B (N x 16, both K-major) come from shared memory through 64-bit matrix descriptors, with f32
// accumulators in registers. Every wrapper compiles to nothing useful outside sm_90a: callers
// keep them behind MINFER_WGMMA_DEVICE (defined below when the arch-specific features exist).
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MINFER_WGMMA_DEVICE 1
#endif

namespace minfer::cuda::mm {

/// Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format" of wgmma) of a K-major
/// tile stored in the 128-byte swizzle mode: rows of 64 16-bit elements (128 bytes), 8-row groups
/// of 1024 bytes, the 16-byte chunk c of row r at chunk position c ^ (r % 8), the tile 1024-byte
/// aligned. Fields: bits 0-13 start address >> 4, bits 16-29 leading-dimension byte offset >> 4
/// (unused by swizzled K-major layouts; 1 by convention), bits 32-45 stride-dimension byte offset
/// >> 4 (1024 bytes between 8-row groups), bits 62-63 swizzle mode (1 = 128 bytes). The k16 slice
/// kq of the 64-element rows starts 32 kq bytes further (+2 kq in the address field).
__device__ __forceinline__ uint64_t wgmma_desc_sw128(uint32_t smem_addr) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

/// Orders this thread's register and shared-memory accesses before the warpgroup's next wgmma.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
/// Closes the group of wgmma operations issued since the last commit.
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/// Waits until at most N committed wgmma groups of this warpgroup are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Makes shared-memory writes of the generic proxy (st.shared, cp.async) visible to the async
/// proxy that wgmma reads shared memory through.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The accumulator operands of the wgmma wrappers: registers %0.. of the fragment, and their
// read-write constraints (m64n64: 32 f32 per thread, m64n128: 64).
#define MINFER_WGMMA_REGS32 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" \
  ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define MINFER_WGMMA_REGS64 \
  MINFER_WGMMA_REGS32 ", " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47" \
  ", %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MINFER_WGMMA_D32 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define MINFER_WGMMA_D64 \
  MINFER_WGMMA_D32, \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
// One wgmma with both operands from descriptors (K-major, no transpose) and f32 accumulators that
// are always added to (scale-d = 1, the predicate set from operand `pd`).
#define MINFER_WGMMA_ASM(shape, type, regs, pa, pb, pd)                                          \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %" pd ", 0;\n"                                               \
  "wgmma.mma_async.sync.aligned." shape ".f32." type "." type " {" regs "}, %" pa ", %" pb \
  ", p, 1, 1, 0, 0;\n}\n"

/// d (64 x 128 f32, the m64n128 accumulator fragment: 64 per thread) += A * B, bf16 (kBf16) or
/// f16 operands from the descriptors (both K-major, no transpose).
template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
#ifdef MINFER_WGMMA_DEVICE
  if constexpr (kBf16)
    asm volatile(MINFER_WGMMA_ASM("m64n128k16", "bf16", MINFER_WGMMA_REGS64, "64", "65", "66")
                 : MINFER_WGMMA_D64
                 : "l"(desc_a), "l"(desc_b), "r"(1));
  else
    asm volatile(MINFER_WGMMA_ASM("m64n128k16", "f16", MINFER_WGMMA_REGS64, "64", "65", "66")
                 : MINFER_WGMMA_D64
                 : "l"(desc_a), "l"(desc_b), "r"(1));
#else
  (void)d;
  (void)desc_a;
  (void)desc_b;
#endif
}

/// d (64 x 64 f32, the m64n64 accumulator fragment: 32 per thread) += A * B, as wgmma_m64n128k16.
template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
#ifdef MINFER_WGMMA_DEVICE
  if constexpr (kBf16)
    asm volatile(MINFER_WGMMA_ASM("m64n64k16", "bf16", MINFER_WGMMA_REGS32, "32", "33", "34")
                 : MINFER_WGMMA_D32
                 : "l"(desc_a), "l"(desc_b), "r"(1));
  else
    asm volatile(MINFER_WGMMA_ASM("m64n64k16", "f16", MINFER_WGMMA_REGS32, "32", "33", "34")
                 : MINFER_WGMMA_D32
                 : "l"(desc_a), "l"(desc_b), "r"(1));
#else
  (void)d;
  (void)desc_a;
  (void)desc_b;
#endif
}

#undef MINFER_WGMMA_ASM
#undef MINFER_WGMMA_D64
#undef MINFER_WGMMA_D32
#undef MINFER_WGMMA_REGS64
#undef MINFER_WGMMA_REGS32

}  // namespace minfer::cuda::mm
