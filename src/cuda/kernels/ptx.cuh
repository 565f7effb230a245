// Inline PTX wrappers shared by the tensor-core kernels (mmq.cu, hgemm.cu, mmvq_mma.cu): cp.async
// copies to shared memory, ldmatrix, the int8 mma.sync shapes. Need sm_80+ (PTX ISA: cp.async,
// ldmatrix, mma.m16n8k32 / m16n8k16 with .s8).
#pragma once

#include <cstdint>

namespace minfer::cuda::mm {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
/// Copies `src_bytes` (0..16) bytes to shared memory and zero-fills the rest of the 16 (L2 only).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async8(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
/// Waits until at most N of this thread's committed copy groups are still pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// Four 8x8 b16 matrices; lanes 8i .. 8i+7 give the row addresses (16 bytes each) of matrix i,
/// and each thread receives row lane/4, bytes 4 (lane % 4) .. +3 of every matrix.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

/// c = A (16 x 32, row) * B (32 x 8, col), int8 in, exact int32 out (accumulator input 0).
/// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k32", .s8), thread (g, tq) = (lane / 4,
/// lane % 4): a[0] / a[1] rows g / g + 8, k 4 tq .. 4 tq + 3; a[2] / a[3] the same rows, k 16 + 4 tq
/// ..; b0 / b1 column g, k 4 tq .. / 16 + 4 tq ..; c[0], c[1] row g, columns 2 tq, 2 tq + 1; c[2],
/// c[3] row g + 8.
__device__ __forceinline__ void mma_k32(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %10, %10, %10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}

/// c = A (16 x 16) * B (16 x 8), int8 in, exact int32 out: a0 / a1 rows g / g + 8, k 4 tq ..
/// 4 tq + 3; b0 column g, the same k; c as mma_k32.
__device__ __forceinline__ void mma_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
      "{%7, %7, %7, %7};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(0));
}

}  // namespace minfer::cuda::mm
