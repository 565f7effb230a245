// f16 / bf16 tensor-core prefill GEMM and the helpers that feed it quantized weights and
// activations (design: hgemm.cuh).
#include "cuda/kernels/hgemm.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/gemm_dequant.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/ptx.cuh"
#include "cuda/kernels/wgmma.cuh"

namespace minfer::cuda::mm {
namespace {

constexpr int kThreads = 256;

/// Shared-memory geometry of one tile config: rows of BK 16-bit elements plus 8 of padding
/// (80 or 144 bytes), so the 8 rows of an ldmatrix phase start in 8 different groups of 4 banks;
/// 4 stages of 32 or 3 stages of 64 elements of k.
template <int BW, int BK>
struct HgemmSmem {
  static constexpr int row = BK + 8;                  // elements per shared-memory row
  static constexpr int stages = BK == 32 ? 4 : 3;
  static constexpr size_t a_stage = static_cast<size_t>(kHgemmBT) * row;  // elements
  static constexpr size_t b_stage = static_cast<size_t>(BW) * row;
  static constexpr size_t total = stages * (a_stage + b_stage) * 2;  // bytes
};

/// c += A (16 x 16, row) * B (16 x 8, col), f16 or bf16 in, f32 accumulators.
template <bool kBf16>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// The bias and residual adds of output (t, j), each one rounded f32 operation.
__device__ __forceinline__ float epilogue(const HgemmOut& o, int64_t t, int64_t j, float v) {
  if (o.bias != nullptr) v = __fadd_rn(v, o.bias[j]);
  if (o.res != nullptr) v = __fadd_rn(o.res[j + t * o.ldr], v);
  return v;
}

/// SwiGLU of a gate and an up sum: the CPU's silu(g) * u (common.cuh).
__device__ __forceinline__ float glu_value(float gate, float up) { return __fmul_rn(silu_cpu(gate), up); }

/// The f16 range check: |v| >= 65520 rounds to infinity (f16's largest finite value is 65504).
__device__ __forceinline__ bool beyond_f16(float v) { return fabsf(v) >= 65520.0f && fabsf(v) <= FLT_MAX; }

/// Reports kFaultF16Range with v's magnitude (saturated to 2^31 - 1).
__device__ __forceinline__ void report_f16_range(uint32_t* fault, float v) {
  const float a = fabsf(v);
  report_fault(fault, kFaultF16Range, a < 2147483520.0f ? static_cast<int32_t>(a) : 0x7FFFFFFF);
}

/// Writes output (t, j) as f32 (y) or rounded to nearest f16 (y16; a finite value beyond the f16
/// range is reported in o.fault when set).
__device__ __forceinline__ void store_out(const HgemmOut& o, int64_t t, int64_t j, float v) {
  if (o.y16 != nullptr) {
    if (o.fault != nullptr && beyond_f16(v)) report_f16_range(o.fault, v);
    o.y16[j + t * o.ldy] = __half_as_ushort(__float2half_rn(v));
  } else {
    o.y[j + t * o.ldy] = v;
  }
}

/// The output pair (t, j), (t, j + 1) (j even) of a tile: raw partial sums of split blockIdx.z
/// (`partial` set), SwiGLU of a gate/up row pair (o.glu), or the bias/residual epilogue.
__device__ __forceinline__ void store_pair(const HgemmOut& o, float* partial, int64_t n, int64_t t, int64_t j,
                                           float v0, float v1) {
  if (partial != nullptr) {  // split k: the raw sums, added in split order by hgemm_reduce
    float* p = partial + (static_cast<int64_t>(blockIdx.z) * n + t) * o.m;
    if (j < o.m) p[j] = v0;
    if (j + 1 < o.m) p[j + 1] = v1;
  } else if (o.glu) {  // rows j, j + 1 are gate and up of output j / 2
    if (j + 1 < o.m) store_out(o, t, j >> 1, glu_value(v0, v1));
  } else {
    if (j < o.m) store_out(o, t, j, epilogue(o, t, j, v0));
    if (j + 1 < o.m) store_out(o, t, j + 1, epilogue(o, t, j + 1, v1));
  }
}

/// Block: 128 tokens (blockIdx.x, fastest, so the blocks that share a weight tile run together
/// and read it from L2) x BW weight rows (blockIdx.y). 8 warps: BW = 128 as 2 (tokens) x 4
/// (rows) warps of 64 x 32, BW = 64 as 4 x 2 warps of 32 x 32.
template <bool kBf16, int BW, int BK>
__global__ void __launch_bounds__(kThreads, 2)
    hgemm_kernel(const uint16_t* __restrict__ a, int64_t lda, int64_t n, int64_t k_all, int64_t kps, HgemmOut o,
                 float* __restrict__ partial) {
  constexpr int kWarpsJ = BW == 128 ? 4 : 2;
  constexpr int kWarpsT = 8 / kWarpsJ;
  constexpr int kMT = kHgemmBT / kWarpsT / 16;  // m16 token tiles per warp
  constexpr int kNT = BW / kWarpsJ / 8;         // n8 weight-row tiles per warp
  static_assert(kNT % 2 == 0, "B fragments are loaded two n8 tiles per ldmatrix.x4");
  using S = HgemmSmem<BW, BK>;
  constexpr int kRow = S::row;
  constexpr int kStages = S::stages;
  constexpr int kChunks = BK / 8;  // 16-byte chunks per row and stage
  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t* sa = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sb = sa + kStages * S::a_stage;

  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int wt = warp % kWarpsT, wj = warp / kWarpsT;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kHgemmBT;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * BW;
  // Split z of the k range: elements [z kps, min(k, (z + 1) kps)).
  const int64_t kbeg = static_cast<int64_t>(blockIdx.z) * kps;
  const int64_t k = k_all - kbeg < kps ? k_all - kbeg : kps;
  a += kbeg;
  const uint16_t* const w = o.w + kbeg;
  const int64_t ksteps = (k + BK - 1) / BK;

  // Stage s into buffer buf: BK / 8 chunks of 16 bytes per row; a chunk past the tokens, the rows or
  // k is zero-filled (cp.async with 0 source bytes reads nothing).
  auto issue = [&](int64_t s, int buf) {
    const int64_t kk = s * BK;
#pragma unroll
    for (int i = 0; i < kHgemmBT * kChunks / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c / kChunks, q = c % kChunks;
      const int64_t t = t0 + r, e = kk + 8 * q;
      const bool ok = t < n && e < k;
      cp_async16(sa + buf * S::a_stage + r * kRow + 8 * q, ok ? a + t * lda + e : a, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < BW * kChunks / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c / kChunks, q = c % kChunks;
      const int64_t j = j0 + r, e = kk + 8 * q;
      const bool ok = j < o.m && e < k;
      cp_async16(sb + buf * S::b_stage + r * kRow + 8 * q, ok ? w + j * o.ldw + e : w, ok ? 16 : 0);
    }
  };

  float acc[kMT][kNT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ksteps) issue(s, s);
    cp_async_commit();
  }
  // ldmatrix row addresses of this lane (A: rows lane % 16, k half lane / 16; B: matrix lane / 8
  // = (n8 tile, k half) pairs, row lane % 8).
  const int a_row = wt * kMT * 16 + (lane & 15), a_col = (lane >> 4) * 8;
  const int b_row = wj * kNT * 8 + ((lane >> 4) & 1) * 8 + (lane & 7), b_col = ((lane >> 3) & 1) * 8;

  for (int64_t s = 0; s < ksteps; ++s) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage s is visible to every warp; buffer (s - 1) % stages is free again
    {
      const int64_t nx = s + kStages - 1;
      if (nx < ksteps) issue(nx, static_cast<int>(nx % kStages));
      cp_async_commit();
    }
    const int buf = static_cast<int>(s % kStages);
    const uint32_t ta = smem_u32(sa + buf * S::a_stage), tb = smem_u32(sb + buf * S::b_stage);
#pragma unroll
    for (int kq = 0; kq < BK; kq += 16) {
      uint32_t af[kMT][4], bfr[kNT / 2][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
        ldmatrix_x4(af[mt], ta + 2 * ((a_row + mt * 16) * kRow + kq + a_col));
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np)
        ldmatrix_x4(bfr[np], tb + 2 * ((b_row + np * 16) * kRow + kq + b_col));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
          mma_16816<kBf16>(acc[mt][nt], af[mt], bfr[nt >> 1][(nt & 1) * 2], bfr[nt >> 1][(nt & 1) * 2 + 1]);
    }
  }
  cp_async_wait_all();

  // Accumulator (mt, nt): c0, c1 at token g, rows 2 tq, 2 tq + 1 of the n8 tile; c2, c3 at token g + 8.
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t t = t0 + wt * kMT * 16 + mt * 16 + g + 8 * h;
      if (t >= n) continue;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int64_t j = j0 + wj * kNT * 8 + nt * 8 + 2 * tq;  // even
        store_pair(o, partial, n, t, j, acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
      }
    }
}

/// Shared memory of the wgmma build (HgemmPlan::wgmma): 3 stages of 64 elements of k, each the
/// 128 token rows then the BW weight rows, 128 bytes per row in the 128-byte swizzle layout
/// (wgmma_desc_sw128), plus slack to align the stages to 1024 bytes.
template <int BW>
struct WgmmaSmem {
  static constexpr int stages = 3;
  static constexpr size_t a_stage = static_cast<size_t>(kHgemmBT) * 128;  // bytes
  static constexpr size_t b_stage = static_cast<size_t>(BW) * 128;
  static constexpr size_t total = stages * (a_stage + b_stage) + 1024;
};

/// The sm_90a build of the 128-token x BW-row tile: the same operands, outputs and epilogues as
/// hgemm_kernel, computed by two warpgroups (threads 0-127: tokens 0-63 of the tile, 128-255:
/// tokens 64-127), each one m64nBWk16 wgmma per k16 step reading both operands straight from
/// shared memory (no ldmatrix, no register fragments). Stage s + 2 is copied (cp.async) while
/// the tensor cores work on stage s; each stage's wgmma group completes before its buffer is
/// refilled. Accumulator i of a thread (m64nN fragment, PTX ISA): token 16 (warp % 4) + lane / 4
/// (+ 8 for i % 4 >= 2) of its warpgroup's 64, weight row 8 (i / 4) + 2 (lane % 4) + i % 2.
template <bool kBf16, int BW>
__global__ void __launch_bounds__(kThreads, 2)
    hgemm_wgmma_kernel(const uint16_t* __restrict__ a, int64_t lda, int64_t n, int64_t k_all, int64_t kps,
                       HgemmOut o, float* __restrict__ partial) {
#ifdef MINFER_WGMMA_DEVICE
  using S = WgmmaSmem<BW>;
  constexpr int kStages = S::stages;
  constexpr int kBK = 64;
  constexpr int kAcc = BW / 2;  // 64 x BW f32 per warpgroup of 128 threads
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* const smem = smem_raw + (base - raw);

  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kHgemmBT;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * BW;
  const int64_t kbeg = static_cast<int64_t>(blockIdx.z) * kps;
  const int64_t k = k_all - kbeg < kps ? k_all - kbeg : kps;
  a += kbeg;
  const uint16_t* const w = o.w + kbeg;
  const int64_t ksteps = (k + kBK - 1) / kBK;

  // Chunk q (16 bytes) of row r goes to chunk position q ^ (r % 8) of the row's 128 bytes.
  auto issue = [&](int64_t s, int buf) {
    const int64_t kk = s * kBK;
    uint8_t* const sa = smem + buf * S::a_stage;
    uint8_t* const sb = smem + kStages * S::a_stage + buf * S::b_stage;
#pragma unroll
    for (int i = 0; i < kHgemmBT * 8 / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c >> 3, q = c & 7;
      const int64_t t = t0 + r, e = kk + 8 * q;
      const bool ok = t < n && e < k;
      cp_async16(sa + r * 128 + ((q ^ (r & 7)) << 4), ok ? a + t * lda + e : a, ok ? 16 : 0);
    }
#pragma unroll
    for (int i = 0; i < BW * 8 / kThreads; ++i) {
      const int c = tid + i * kThreads, r = c >> 3, q = c & 7;
      const int64_t j = j0 + r, e = kk + 8 * q;
      const bool ok = j < o.m && e < k;
      cp_async16(sb + r * 128 + ((q ^ (r & 7)) << 4), ok ? w + j * o.ldw + e : w, ok ? 16 : 0);
    }
  };

  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ksteps) issue(s, s);
    cp_async_commit();
  }
  for (int64_t s = 0; s < ksteps; ++s) {
    cp_async_wait<kStages - 2>();
    fence_proxy_async_smem();  // this thread's copies of stage s, visible to wgmma
    __syncthreads();           // every thread's; the wgmma group of stage s - 1 is complete (below)
    const int buf = static_cast<int>(s % kStages);
    const uint64_t da = wgmma_desc_sw128(base + static_cast<uint32_t>(buf * S::a_stage + wg * 64 * 128));
    const uint64_t db = wgmma_desc_sw128(base + static_cast<uint32_t>(kStages * S::a_stage + buf * S::b_stage));
    wgmma_fence();
#pragma unroll
    for (int kq = 0; kq < kBK / 16; ++kq) {
      if constexpr (BW == 128)
        wgmma_m64n128k16<kBf16>(acc, da + 2 * kq, db + 2 * kq);
      else
        wgmma_m64n64k16<kBf16>(acc, da + 2 * kq, db + 2 * kq);
    }
    wgmma_commit();
    {
      const int64_t nx = s + kStages - 1;  // into buffer (s - 1) % 3, whose group completed
      if (nx < ksteps) issue(nx, static_cast<int>(nx % kStages));
      cp_async_commit();
    }
    wgmma_wait<0>();
  }
  cp_async_wait_all();

  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t t = t0 + wg * 64 + (warp & 3) * 16 + g + 8 * h;
    if (t >= n) continue;
#pragma unroll
    for (int i = 0; i < BW / 8; ++i) {
      const int64_t j = j0 + i * 8 + 2 * tq;  // even
      store_pair(o, partial, n, t, j, acc[i * 4 + 2 * h], acc[i * 4 + 2 * h + 1]);
    }
  }
#else
  (void)a, (void)lda, (void)n, (void)k_all, (void)kps, (void)o, (void)partial;
  __trap();  // launch_hgemm only picks this build where the sm_90a code exists
#endif
}

/// y = sum of the splits' partial sums in split order, then the bias and residual adds (or, with
/// glu, SwiGLU of each gate/up pair of rows).
__global__ void __launch_bounds__(256)
    hgemm_reduce_kernel(const float* __restrict__ partial, int splits, int64_t n, HgemmOut o) {
  const int64_t per_split = n * o.m;
  const int64_t cols = o.glu ? o.m / 2 : o.m;
  const int64_t total = n * cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / cols, j = i - t * cols;
    if (o.glu) {
      const int64_t at = t * o.m + 2 * j;
      float gate = partial[at], up = partial[at + 1];
      for (int z = 1; z < splits; ++z) {
        gate = __fadd_rn(gate, partial[z * per_split + at]);
        up = __fadd_rn(up, partial[z * per_split + at + 1]);
      }
      store_out(o, t, j, glu_value(gate, up));
      continue;
    }
    const int64_t at = t * o.m + j;
    float v = partial[at];
    for (int z = 1; z < splits; ++z) v = __fadd_rn(v, partial[z * per_split + at]);
    store_out(o, t, j, epilogue(o, t, j, v));
  }
}

using HgemmKernelFn = void (*)(const uint16_t*, int64_t, int64_t, int64_t, int64_t, HgemmOut, float*);

/// Launches `kernel` (a BW-row tile build needing `bytes` of dynamic shared memory) over the
/// token tiles, row tiles and splits, then the split reduction.
bool launch_grid(HgemmKernelFn kernel, size_t bytes, int bw, const uint16_t* a, int64_t lda, int64_t n, int64_t k,
                 int splits, const HgemmOut& o, float* partial, cudaStream_t stream, const char* site) {
  if (!smem_opted_in(reinterpret_cast<const void*>(kernel), bytes)) {
    note_launch_failure(site, cudaErrorInvalidConfiguration);  // the opt-in failed at context creation
    return false;
  }
  const int64_t kps = hgemm_split_length(k, splits);
  const dim3 grid(static_cast<unsigned>((n + kHgemmBT - 1) / kHgemmBT), static_cast<unsigned>((o.m + bw - 1) / bw),
                  static_cast<unsigned>(splits));
  kernel<<<grid, kThreads, bytes, stream>>>(a, lda, n, k, kps, o, splits > 1 ? partial : nullptr);
  if (!MINFER_LAUNCH_CHECK(site)) return false;
  if (splits == 1) return true;
  const int64_t total = n * (o.glu ? o.m / 2 : o.m);
  const int64_t blocks = (total + 255) / 256 < (int64_t{1} << 20) ? (total + 255) / 256 : (int64_t{1} << 20);
  hgemm_reduce_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(partial, splits, n, o);
  return MINFER_LAUNCH_CHECK("hgemm_reduce");
}

template <bool kBf16, int BW, int BK>
bool launch_tile(const uint16_t* a, int64_t lda, int64_t n, int64_t k, int splits, const HgemmOut& o,
                 float* partial, cudaStream_t stream, const char* site) {
  return launch_grid(&hgemm_kernel<kBf16, BW, BK>, HgemmSmem<BW, BK>::total, BW, a, lda, n, k, splits, o, partial,
                     stream, site);
}

template <bool kBf16>
bool launch_wgmma(const uint16_t* a, int64_t lda, int64_t n, int64_t k, const HgemmOut& o, const HgemmPlan& plan,
                  float* partial, cudaStream_t stream) {
  if (plan.bw == 128)
    return launch_grid(&hgemm_wgmma_kernel<kBf16, 128>, WgmmaSmem<128>::total, 128, a, lda, n, k, plan.splits, o,
                       partial, stream, kBf16 ? "hgemm_bf16_wgmma" : "hgemm_f16_wgmma");
  return launch_grid(&hgemm_wgmma_kernel<kBf16, 64>, WgmmaSmem<64>::total, 64, a, lda, n, k, plan.splits, o, partial,
                     stream, kBf16 ? "hgemm_bf16_w64_wgmma" : "hgemm_f16_w64_wgmma");
}

template <bool kBf16, int BK>
bool launch_bk(const uint16_t* a, int64_t lda, int64_t n, int64_t k, const HgemmOut& o, const HgemmPlan& plan,
               float* partial, cudaStream_t stream) {
  constexpr bool b = kBf16;
  if (plan.bw == 128)
    return launch_tile<b, 128, BK>(a, lda, n, k, plan.splits, o, partial, stream,
                                   b ? (BK == 32 ? "hgemm_bf16" : "hgemm_bf16_k64") : (BK == 32 ? "hgemm_f16" : "hgemm_f16_k64"));
  return launch_tile<b, 64, BK>(a, lda, n, k, plan.splits, o, partial, stream,
                                b ? (BK == 32 ? "hgemm_bf16_w64" : "hgemm_bf16_w64_k64")
                                  : (BK == 32 ? "hgemm_f16_w64" : "hgemm_f16_w64_k64"));
}

__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ uint4 pack8_f16(const float (&v)[8]) {
  return make_uint4(pack_f16(v[0], v[1]), pack_f16(v[2], v[3]), pack_f16(v[4], v[5]), pack_f16(v[6], v[7]));
}

template <TensorType T>
__global__ void __launch_bounds__(256)
    dequant_f16_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t k, int64_t r0, int64_t rows,
                       uint16_t* __restrict__ out, int64_t ldw) {
  const int64_t groups = k / 8, total = rows * groups;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups, e0 = (i - r * groups) * 8;
    float v[8];
    dequant8<T>(w + (r0 + r) * row_bytes, e0, k, v);
    *reinterpret_cast<uint4*>(out + r * ldw + e0) = pack8_f16(v);
  }
}

template <ActKind K>
__global__ void __launch_bounds__(256)
    acts_to_f16_kernel(const void* __restrict__ acts, ActLayout L, uint16_t* __restrict__ out, int64_t lda,
                       uint32_t* fault) {
  const int64_t groups = L.k / 8, total = L.n * groups;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / groups, e0 = (i - t * groups) * 8;
    float v[8];
    act8<K>(acts, L, t, e0, v);
    if (fault != nullptr) {
      float big = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) big = beyond_f16(v[e]) ? v[e] : big;
      if (big != 0.0f) report_f16_range(fault, big);
    }
    *reinterpret_cast<uint4*>(out + t * lda + e0) = pack8_f16(v);
  }
}

/// Grid of 256-thread blocks for `total` work items (grid-stride beyond 2^20 blocks).
unsigned grid_for(int64_t total) {
  const int64_t blocks = (total + 255) / 256;
  return static_cast<unsigned>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

/// One thread per 8 consecutive weights (dequant8: the CPU's dequantize_row_* values).
template <TensorType T>
bool launch_dequant_type(const uint8_t* w, int64_t row_bytes, int64_t k, int64_t r0, int64_t rows, uint16_t* out,
                         int64_t ldw, cudaStream_t stream, const char* site) {
  dequant_f16_kernel<T><<<grid_for(rows * (k / 8)), 256, 0, stream>>>(w, row_bytes, k, r0, rows, out, ldw);
  return MINFER_LAUNCH_CHECK(site);
}

bool bad_args(const char* site) {
  note_launch_failure(site, cudaErrorInvalidValue);
  return false;
}

}  // namespace

namespace {

template <bool kBf16>
bool plan_opted_in(const HgemmPlan& p) {
  if (p.wgmma) {
    if (p.bk != 64) return false;
    if (p.bw == 128)
      return smem_opted_in(reinterpret_cast<const void*>(&hgemm_wgmma_kernel<kBf16, 128>), WgmmaSmem<128>::total);
    return p.bw == 64 &&
           smem_opted_in(reinterpret_cast<const void*>(&hgemm_wgmma_kernel<kBf16, 64>), WgmmaSmem<64>::total);
  }
  if (p.bw == 128 && p.bk == 64)
    return smem_opted_in(reinterpret_cast<const void*>(&hgemm_kernel<kBf16, 128, 64>), HgemmSmem<128, 64>::total);
  if (p.bw == 128 && p.bk == 32)
    return smem_opted_in(reinterpret_cast<const void*>(&hgemm_kernel<kBf16, 128, 32>), HgemmSmem<128, 32>::total);
  if (p.bw == 64 && p.bk == 64)
    return smem_opted_in(reinterpret_cast<const void*>(&hgemm_kernel<kBf16, 64, 64>), HgemmSmem<64, 64>::total);
  if (p.bw == 64 && p.bk == 32)
    return smem_opted_in(reinterpret_cast<const void*>(&hgemm_kernel<kBf16, 64, 32>), HgemmSmem<64, 32>::total);
  return false;
}

}  // namespace

bool hgemm_wgmma_supported() {
#ifdef MINFER_CUDA_SM90A
  return context_compute_capability() == 90;
#else
  return false;
#endif
}

HgemmPlan hgemm_fit(HgemmPlan p, bool bf16) {
  if (p.wgmma) {
    HgemmPlan wp = p;
    wp.bk = 64;
    if (hgemm_wgmma_supported() && (bf16 ? plan_opted_in<true>(wp) : plan_opted_in<false>(wp))) return wp;
    p.wgmma = false;
  }
  const HgemmPlan tries[] = {p, {p.bw, p.splits, 32}, {64, p.splits, 64}, {64, p.splits, 32}};
  for (const HgemmPlan& t : tries)
    if (bf16 ? plan_opted_in<true>(t) : plan_opted_in<false>(t)) return t;
  HgemmPlan none = p;
  none.bw = 0;
  return none;
}

int64_t hgemm_split_length(int64_t k, int splits) {
  const int64_t per = (k + splits - 1) / splits;
  return (per + kHgemmBK - 1) / kHgemmBK * kHgemmBK;
}

HgemmPlan hgemm_plan(int64_t n, int64_t m, int64_t k, int sm_count, int max_splits) {
  HgemmPlan best;
  double best_cost = -1.0;
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  const int64_t token_tiles = (n + kHgemmBT - 1) / kHgemmBT;
  for (const int bw : {128, 64})
    for (int s = 1; s <= (max_splits > 0 ? max_splits : 1); ++s) {
      if (s > 1 && hgemm_split_length(k, s) < kHgemmMinSplitK) break;
      if (hgemm_split_length(k, s) * (s - 1) >= k) break;  // the last split would be empty
      const int64_t blocks = token_tiles * ((m + bw - 1) / bw) * s;
      const int64_t per_sm = (blocks + sms - 1) / sms;  // blocks of the busiest SM
      const double rate = per_sm >= 2 ? 1.0 : kHgemmLoneBlockRate;
      const double cost = static_cast<double>(per_sm) * bw * static_cast<double>(hgemm_split_length(k, s)) *
                          (bw == 64 ? kHgemmNarrowTileCost : 1.0) * (1.0 + kHgemmSplitCost * (s - 1)) / rate;
      if (best_cost < 0.0 || cost < best_cost) {
        best_cost = cost;
        best.bw = bw;
        best.splits = s;
      }
    }
  return best;
}

size_t hgemm_partial_bytes(int64_t n, int64_t m, int splits) {
  return splits > 1 ? static_cast<size_t>(splits) * static_cast<size_t>(n * m) * sizeof(float) : 0;
}

bool launch_hgemm(bool bf16, const uint16_t* a, int64_t lda, int64_t n, int64_t k, const HgemmOut& o,
                  const HgemmPlan& plan, float* partial, size_t partial_bytes, cudaStream_t stream) {
  if (a == nullptr || o.w == nullptr || (o.y == nullptr) == (o.y16 == nullptr) || n < 1 || k < 1 || k % 8 != 0 || lda < k || lda % 8 != 0 ||
      o.ldw < k || o.ldw % 8 != 0 || o.m < 1 || o.ldy < (o.glu ? o.m / 2 : o.m) || (o.res != nullptr && o.ldr < o.m) ||
      (o.glu && (o.m % 2 != 0 || o.bias != nullptr || o.res != nullptr)) || !aligned16(a) || !aligned16(o.w) ||
      (n + kHgemmBT - 1) / kHgemmBT > 0x7FFFFFFF || (plan.bw != 64 && plan.bw != 128) || (plan.bk != 32 && plan.bk != 64) ||
      (plan.wgmma && (plan.bk != 64 || !hgemm_wgmma_supported())) ||
      (o.m + plan.bw - 1) / plan.bw > 65535 || plan.splits < 1 || plan.splits > kHgemmMaxSplits ||
      hgemm_split_length(k, plan.splits) * (plan.splits - 1) >= k ||
      (plan.splits > 1 && (partial == nullptr || partial_bytes < hgemm_partial_bytes(n, o.m, plan.splits))))
    return bad_args("hgemm_bad_args");
  if (plan.wgmma)
    return bf16 ? launch_wgmma<true>(a, lda, n, k, o, plan, partial, stream)
                : launch_wgmma<false>(a, lda, n, k, o, plan, partial, stream);
  if (plan.bk == 64)
    return bf16 ? launch_bk<true, 64>(a, lda, n, k, o, plan, partial, stream)
                : launch_bk<false, 64>(a, lda, n, k, o, plan, partial, stream);
  return bf16 ? launch_bk<true, 32>(a, lda, n, k, o, plan, partial, stream)
              : launch_bk<false, 32>(a, lda, n, k, o, plan, partial, stream);
}

bool launch_dequant_f16(TensorType type, const void* w, int64_t row_bytes, int64_t k, int64_t r0, int64_t rows,
                        uint16_t* out, int64_t ldw, cudaStream_t stream) {
  if (w == nullptr || out == nullptr || k < 8 || k % 8 != 0 || ldw < k || ldw % 8 != 0 || r0 < 0 || rows < 0 ||
      !aligned16(out))
    return bad_args("dequant_f16_bad_args");
  if (rows == 0) return true;
  const auto* wb = static_cast<const uint8_t*>(w);
#define MINFER_DEQUANT_CASE(T, name) \
  case TensorType::T:                \
    return launch_dequant_type<TensorType::T>(wb, row_bytes, k, r0, rows, out, ldw, stream, "dequant_f16_" name);
  switch (type) {
    MINFER_DEQUANT_CASE(Q4_0, "q4_0")
    MINFER_DEQUANT_CASE(Q4_1, "q4_1")
    MINFER_DEQUANT_CASE(Q5_0, "q5_0")
    MINFER_DEQUANT_CASE(Q5_1, "q5_1")
    MINFER_DEQUANT_CASE(Q8_0, "q8_0")
    MINFER_DEQUANT_CASE(Q4_K, "q4_K")
    MINFER_DEQUANT_CASE(Q5_K, "q5_K")
    MINFER_DEQUANT_CASE(Q6_K, "q6_K")
    default: break;
  }
#undef MINFER_DEQUANT_CASE
  return bad_args("dequant_f16_bad_args");
}

bool launch_acts_to_f16(const ActLayout& L, const void* acts, uint16_t* out, int64_t lda, cudaStream_t stream,
                        uint32_t* fault) {
  if (acts == nullptr || out == nullptr || L.k < 8 || L.k % 8 != 0 || lda < L.k || lda % 8 != 0 || L.n < 0 ||
      !aligned16(out) || (L.kind != ActKind::Q8 && L.kind != ActKind::Q8K))
    return bad_args("acts_to_f16_bad_args");
  if (L.n == 0) return true;
  const unsigned grid = grid_for(L.n * (L.k / 8));
  if (L.kind == ActKind::Q8)
    acts_to_f16_kernel<ActKind::Q8><<<grid, 256, 0, stream>>>(acts, L, out, lda, fault);
  else
    acts_to_f16_kernel<ActKind::Q8K><<<grid, 256, 0, stream>>>(acts, L, out, lda, fault);
  return MINFER_LAUNCH_CHECK("acts_to_f16");
}

std::span<const SmemOptin> hgemm_smem_optins() {
  static const SmemOptin list[] = {
      {"hgemm_f16", reinterpret_cast<const void*>(&hgemm_kernel<false, 128, 32>), HgemmSmem<128, 32>::total},
      {"hgemm_bf16", reinterpret_cast<const void*>(&hgemm_kernel<true, 128, 32>), HgemmSmem<128, 32>::total},
      {"hgemm_f16_w64", reinterpret_cast<const void*>(&hgemm_kernel<false, 64, 32>), HgemmSmem<64, 32>::total},
      {"hgemm_bf16_w64", reinterpret_cast<const void*>(&hgemm_kernel<true, 64, 32>), HgemmSmem<64, 32>::total},
      {"hgemm_f16_k64", reinterpret_cast<const void*>(&hgemm_kernel<false, 128, 64>), HgemmSmem<128, 64>::total},
      {"hgemm_bf16_k64", reinterpret_cast<const void*>(&hgemm_kernel<true, 128, 64>), HgemmSmem<128, 64>::total},
      {"hgemm_f16_w64_k64", reinterpret_cast<const void*>(&hgemm_kernel<false, 64, 64>), HgemmSmem<64, 64>::total},
      {"hgemm_bf16_w64_k64", reinterpret_cast<const void*>(&hgemm_kernel<true, 64, 64>), HgemmSmem<64, 64>::total},
      {"hgemm_f16_wgmma", reinterpret_cast<const void*>(&hgemm_wgmma_kernel<false, 128>), WgmmaSmem<128>::total},
      {"hgemm_bf16_wgmma", reinterpret_cast<const void*>(&hgemm_wgmma_kernel<true, 128>), WgmmaSmem<128>::total},
      {"hgemm_f16_w64_wgmma", reinterpret_cast<const void*>(&hgemm_wgmma_kernel<false, 64>), WgmmaSmem<64>::total},
      {"hgemm_bf16_w64_wgmma", reinterpret_cast<const void*>(&hgemm_wgmma_kernel<true, 64>), WgmmaSmem<64>::total},
  };
  return list;
}

}  // namespace minfer::cuda::mm
