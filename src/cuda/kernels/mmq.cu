// Int8 tensor-core matrix multiply on quantized weights (design: mmq.cuh, docs/cuda-matmul.md).
#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "core/env.h"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmq.cuh"
#include "cuda/kernels/mmq_tile.cuh"
#include "cuda/kernels/ptx.cuh"

namespace minfer::cuda::mm {
namespace {

constexpr int BM = kMmqBM, kThreads = kMmqThreads;
static_assert(BM == 128 && kThreads == 256, "the warp layout below: 4 x 2 warps of 32 rows x BN / 2 tokens");
static_assert(kMmqThinBN % 32 == 0, "each warp's tokens are whole ldmatrix.x4 pairs of n8 tiles");
static_assert(kMmqThinBN == 32 && kMmqBN == 64 && kMmqWideBN == 128, "the three token tiles instantiated below");

/// Arguments of one launch (device pointers; sizes in elements unless named bytes).
struct MmqParams {
  const uint8_t* w;       ///< m rows of row_bytes, 16-byte aligned
  int64_t m, row_bytes, w_bytes;
  int64_t nbw;            ///< weight blocks per row (k / block size)
  const int8_t* qs;       ///< activation values [n][k]
  const float2* ds;       ///< Q8: [n][k / 32] (d, bits of the block sum)
  const float* dk;        ///< Q8K: [n][k / 256]
  const int16_t* bsums;   ///< Q8K: [n][k / 256][16]
  int64_t k, n;
  int64_t nba;            ///< activation blocks per token row (k / 32 or k / 256)
  float* y;
  int64_t ldy;
  const float* bias;  ///< [m] added to each output, or null
  const float* res;   ///< [ldr, n] added after the bias, or null
  int64_t ldr;
};

/// Up to kMmqMaxOutputs outputs of one type, k and activations in one grid: blockIdx.y walks
/// the row tiles of output 0, then 1, then 2.
struct MmqBatchParams {
  MmqParams seg[kMmqMaxOutputs];
  int64_t tiles0, tiles1;  ///< row tiles of outputs 0 and 1
  int n_seg;
  int splits = 1;  ///< k splits (mmq_split_count): blockIdx.z takes stage range z of them, in one cluster
};

/// Set when a split-k (cluster) launch failed: mmq_split_count answers 1 from then on.
std::atomic<bool> g_no_split{false};

/// The K-quants (super-block stages of MmqTraits<T>::kStageK = 256 elements), at run time.
bool is_kquant(TensorType type) {
  return type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K;
}

/// Shared-memory regions of the kernel for type T and BN tokens per tile, in bytes from the
/// start (16-byte aligned).
template <TensorType T, int BN>
struct MmqSmem {
  using Tr = MmqTraits<T>;
  static constexpr bool K = Tr::kKQuant;
  static constexpr int kRowQ = Tr::kStageK + 16;      ///< int8 row of Wq / Xq (+16: no bank conflicts)
  static constexpr int kRawRow = Tr::kRawWords * 16;  ///< staged weight row
  static constexpr int kActRaw = K ? 48 : 8 * Tr::kStageBlocks;  ///< staged scales per token
  static constexpr int kScaleSets = K ? 1 : Tr::kStageBlocks;
  static constexpr int kSc = T == TensorType::Q6_K ? 16 : 8;  ///< scale bytes per row
  static constexpr size_t a16(size_t v) { return (v + 15) & ~size_t{15}; }
  static constexpr size_t xq = 0;                                           // int8 [2][BN][kRowQ]
  static constexpr size_t xraw = xq + 2 * BN * kRowQ;                       // [2][BN][kActRaw]
  static constexpr size_t xda = a16(xraw + 2 * BN * kActRaw);               // float [sets][BN]
  static constexpr size_t xmin = a16(xda + kScaleSets * BN * 4);            // legacy: float [sets][BN]; K: uint4 [BN]
  static constexpr size_t wraw = a16(xmin + kScaleSets * BN * (K ? 16 : 4));  // [BM][kRawRow] + slack
  static constexpr size_t wq = a16(wraw + BM * kRawRow + 16);               // int8 [BM][kRowQ]
  static constexpr size_t wd = wq + BM * kRowQ;                             // float [sets][BM]: d
  static constexpr size_t wm = a16(wd + kScaleSets * BM * 4);               // float [sets][BM]: m / dmin
  static constexpr size_t wsc = a16(wm + kScaleSets * BM * 4);              // K: int8 [BM][kSc]
  static constexpr size_t wmins = a16(wsc + (K ? kSc * BM : 0));            // K: uint2 [BM]
  static constexpr size_t total = a16(wmins + (K ? BM * 8 : 0));
};

// ---- stage copy (cp.async) ---------------------------------------------------------------------

/// Queues the copies of stage s into the single weight stage buffer and activation buffer `buf`.
template <TensorType T, int BN>
__device__ __forceinline__ void issue_stage(const MmqParams& p, uint8_t* smem, int64_t s, int64_t bm,
                                            int64_t bn, int buf) {
  using Tr = MmqTraits<T>;
  using S = MmqSmem<T, BN>;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t kb0 = s * Tr::kStageBlocks;
  const int nblk = static_cast<int>(p.nbw - kb0 < Tr::kStageBlocks ? p.nbw - kb0 : Tr::kStageBlocks);

  // Weights: the aligned words around each row's stage; bytes past the tensor are zero-filled
  // (never read from memory).
  for (int u = tid; u < BM * Tr::kRawWords; u += kThreads) {
    const int r = u / Tr::kRawWords, wi = u - r * Tr::kRawWords;
    const int64_t row = bm + r;
    if (row >= p.m) continue;
    const MmqRowStage g = mmq_row_stage(row, p.row_bytes, kb0, nblk, Tr::kBytes);
    if (wi >= g.words) continue;
    const int64_t a = g.first + 16 * wi;
    const int64_t rem = p.w_bytes - a;
    cp_async16(smem + S::wraw + r * S::kRawRow + 16 * wi, p.w + a, rem >= 16 ? 16 : static_cast<int>(rem));
  }

  // Activation values: 16-byte words of each token's stage (zeros past n or k).
  constexpr int kWords = Tr::kStageK / 16;
  uint8_t* xq = smem + S::xq + buf * BN * S::kRowQ;
  for (int u = tid; u < BN * kWords; u += kThreads) {
    const int t = u / kWords, wi = u - t * kWords;
    const int64_t tok = bn + t, e = s * Tr::kStageK + 16 * wi;
    const bool ok = tok < p.n && e < p.k;
    cp_async16(xq + t * S::kRowQ + 16 * wi, ok ? p.qs + tok * p.k + e : p.qs, ok ? 16 : 0);
  }

  // Activation scales.
  uint8_t* xr = smem + S::xraw + buf * BN * S::kActRaw;
  if constexpr (!Tr::kKQuant) {
    for (int u = tid; u < BN * Tr::kStageBlocks; u += kThreads) {
      const int t = u / Tr::kStageBlocks, b = u - t * Tr::kStageBlocks;
      const int64_t tok = bn + t, kb = kb0 + b;
      const bool ok = tok < p.n && kb < p.nba;
      cp_async8(xr + t * S::kActRaw + 8 * b, ok ? p.ds + tok * p.nba + kb : p.ds, ok ? 8 : 0);
    }
  } else {
    for (int u = tid; u < BN * 3; u += kThreads) {
      const int t = u / 3, part = u - 3 * t;
      const int64_t tok = bn + t, sb = tok * p.nba + s;
      const bool ok = tok < p.n;
      if (part < 2)
        cp_async16(xr + t * S::kActRaw + 16 * part, ok ? p.bsums + sb * 16 + 8 * part : p.bsums, ok ? 16 : 0);
      else
        cp_async4(xr + t * S::kActRaw + 32, ok ? p.dk + sb : p.dk, ok ? 4 : 0);
    }
  }
}

// ---- stage decode ------------------------------------------------------------------------------

/// Decodes the staged weights of stage s into int8 rows and scales, and the staged activation
/// scales of buffer `buf` into the forms the epilogue reads.
template <TensorType T, int BN>
__device__ __forceinline__ void decode_stage(const MmqParams& p, uint8_t* smem, int64_t s, int64_t bm, int buf) {
  using Tr = MmqTraits<T>;
  using S = MmqSmem<T, BN>;
  const int tid = static_cast<int>(threadIdx.x);
  const uint8_t* xr = smem + S::xraw + buf * BN * S::kActRaw;
  auto* wd = reinterpret_cast<float*>(smem + S::wd);
  auto* wm = reinterpret_cast<float*>(smem + S::wm);
  auto* xda = reinterpret_cast<float*>(smem + S::xda);

  if constexpr (!Tr::kKQuant) {
    const int64_t kb0 = s * Tr::kStageBlocks;
    const int nblk = static_cast<int>(p.nbw - kb0 < Tr::kStageBlocks ? p.nbw - kb0 : Tr::kStageBlocks);
    for (int u = tid; u < BM * Tr::kStageBlocks; u += kThreads) {
      const int r = u / Tr::kStageBlocks, b = u - r * Tr::kStageBlocks;
      const int64_t row = bm + r;
      uint32_t q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      float d = 0.0f, mn = 0.0f;
      if (row < p.m && b < nblk) {
        const MmqRowStage g = mmq_row_stage(row, p.row_bytes, kb0, nblk, Tr::kBytes);
        mmq_decode_legacy<T>(smem + S::wraw + r * S::kRawRow, g.shift + b * Tr::kBytes, q, &d, &mn);
      }
      auto* dst = reinterpret_cast<uint4*>(smem + S::wq + r * S::kRowQ + 32 * b);
      dst[0] = make_uint4(q[0], q[1], q[2], q[3]);
      dst[1] = make_uint4(q[4], q[5], q[6], q[7]);
      wd[b * BM + r] = d;
      if constexpr (Tr::kMin) wm[b * BM + r] = mn;
    }
    auto* xmin = reinterpret_cast<float*>(smem + S::xmin);
    for (int u = tid; u < BN * Tr::kStageBlocks; u += kThreads) {
      const int t = u / Tr::kStageBlocks, b = u - t * Tr::kStageBlocks;
      const float2 v = *reinterpret_cast<const float2*>(xr + t * S::kActRaw + 8 * b);
      xda[b * BN + t] = v.x;
      if constexpr (Tr::kMin) xmin[b * BN + t] = mmq_min_factor(v.x, v.y);
    }
  } else {
    auto* wsc = reinterpret_cast<int8_t*>(smem + S::wsc);
    auto* wmins = reinterpret_cast<uint2*>(smem + S::wmins);
    for (int u = tid; u < BM * 2; u += kThreads) {
      const int r = u >> 1, h = u & 1;
      const int64_t row = bm + r;
      auto* dst = reinterpret_cast<uint32_t*>(smem + S::wq + r * S::kRowQ + 128 * h);
      if (row < p.m) {
        const MmqRowStage g = mmq_row_stage(row, p.row_bytes, s, 1, Tr::kBytes);
        const uint8_t* raw = smem + S::wraw + r * S::kRawRow;
        mmq_decode_khalf<T>(raw, g.shift, h, dst);
        if (h == 0) {
          const KScales ks = mmq_decode_kscales<T>(raw, g.shift);
          wd[r] = ks.d;
          wm[r] = ks.dmin;
          if constexpr (S::kSc == 16)
            *reinterpret_cast<uint4*>(wsc + 16 * r) = make_uint4(ks.sc[0], ks.sc[1], ks.sc[2], ks.sc[3]);
          else
            *reinterpret_cast<uint2*>(wsc + 8 * r) = make_uint2(ks.sc[0], ks.sc[1]);
          wmins[r] = make_uint2(ks.mins[0], ks.mins[1]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) dst[i] = 0u;
        if (h == 0) {
          wd[r] = 0.0f;
          wm[r] = 0.0f;
#pragma unroll
          for (int j = 0; j < S::kSc; j += 4) *reinterpret_cast<uint32_t*>(wsc + S::kSc * r + j) = 0u;
          wmins[r] = make_uint2(0u, 0u);
        }
      }
    }
    auto* xbs = reinterpret_cast<uint4*>(smem + S::xmin);
    for (int t = tid; t < BN; t += kThreads) {
      const auto* bs = reinterpret_cast<const int16_t*>(xr + t * S::kActRaw);
      xda[t] = *reinterpret_cast<const float*>(xr + t * S::kActRaw + 32);
      xbs[t] = make_uint4(mmq_pack_bsums(bs, 0), mmq_pack_bsums(bs, 1), mmq_pack_bsums(bs, 2),
                          mmq_pack_bsums(bs, 3));
    }
  }
}

// ---- stage multiply ----------------------------------------------------------------------------

/// Per thread: 2 m16 tiles (rows wm + 16 mi + g, + 8) x BN / 16 n8 tiles (tokens wn + 8 nj + 2 tq,
/// + 1).
struct Frag {
  int wm, wn, g, tq;
};

/// kSub > 0: a full stage of kSub 32-element steps, known at compile time (the step loop is
/// unrolled, so the fragment loads of later steps are issued ahead of the mma chain); kSub = 0:
/// nsub steps (a partial last stage).
template <TensorType T, int BN, int kSub>
__device__ __forceinline__ void multiply_stage(const uint8_t* smem, int buf, int nsub, const Frag& f,
                                               float (&acc)[2][BN / 16][4], int (&isum)[2][BN / 16][4]) {
  constexpr int NJ = BN / 16;  // n8 tiles per warp (the warp covers BN / 2 tokens)
  using Tr = MmqTraits<T>;
  using S = MmqSmem<T, BN>;
  const int lane = static_cast<int>(threadIdx.x & 31);
  // Shared-memory addresses of this lane's ldmatrix rows (A: rows 0-15 x k halves; B: tokens
  // 0-7 / 8-15 x k halves).
  const uint32_t base = smem_u32(smem);
  const uint32_t a_row = base + S::wq + (f.wm + (lane & 15)) * S::kRowQ + (lane >> 4) * 16;
  const uint32_t b_row = base + S::xq + buf * BN * S::kRowQ +
                         (f.wn + (lane >> 4) * 8 + (lane & 7)) * S::kRowQ + ((lane >> 3) & 1) * 16;
  const auto* wd = reinterpret_cast<const float*>(smem + S::wd);
  const auto* wm = reinterpret_cast<const float*>(smem + S::wm);
  const auto* wsc = reinterpret_cast<const int8_t*>(smem + S::wsc);
  const auto* xda = reinterpret_cast<const float*>(smem + S::xda);
  const auto* xmin = reinterpret_cast<const float*>(smem + S::xmin);

  const int steps = kSub > 0 ? kSub : nsub;
#pragma unroll
  for (int kk = 0; kk < steps; ++kk) {
    uint32_t a[2][4], b[NJ / 2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) ldmatrix_x4(a[mi], a_row + 16 * mi * S::kRowQ + 32 * kk);
#pragma unroll
    for (int pj = 0; pj < NJ / 2; ++pj) ldmatrix_x4(b[pj], b_row + 16 * pj * S::kRowQ + 32 * kk);

    if constexpr (!Tr::kKQuant) {
      float dw[2][2], mw[2][2];
      float2 da[NJ], mf[NJ];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = f.wm + 16 * mi + f.g + 8 * h;
          dw[mi][h] = wd[kk * BM + r];
          if constexpr (Tr::kMin) mw[mi][h] = wm[kk * BM + r];
        }
#pragma unroll
      for (int nj = 0; nj < NJ; ++nj) {
        const int t = f.wn + 8 * nj + 2 * f.tq;
        da[nj] = *reinterpret_cast<const float2*>(xda + kk * BN + t);
        if constexpr (Tr::kMin) mf[nj] = *reinterpret_cast<const float2*>(xmin + kk * BN + t);
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nj = 0; nj < NJ; ++nj) {
          int c[4];
          mma_k32(c, a[mi], b[nj >> 1][2 * (nj & 1)], b[nj >> 1][2 * (nj & 1) + 1]);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float dav = (e & 1) ? da[nj].y : da[nj].x;
            float v = mmq_legacy_step(acc[mi][nj][e], dw[mi][e >> 1], dav, c[e]);
            if constexpr (Tr::kMin) v = mmq_min_step(v, mw[mi][e >> 1], (e & 1) ? mf[nj].y : mf[nj].x);
            acc[mi][nj][e] = v;
          }
        }
    } else if constexpr (T == TensorType::Q6_K) {
      int sc[2][2][2];  // [mi][row half][16-element group of this k32 step]
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int q = 0; q < 2; ++q) sc[mi][h][q] = wsc[16 * (f.wm + 16 * mi + f.g + 8 * h) + 2 * kk + q];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nj = 0; nj < NJ; ++nj) {
          int lo[4], hi[4];
          mma_k16(lo, a[mi][0], a[mi][1], b[nj >> 1][2 * (nj & 1)]);
          mma_k16(hi, a[mi][2], a[mi][3], b[nj >> 1][2 * (nj & 1) + 1]);
#pragma unroll
          for (int e = 0; e < 4; ++e)
            isum[mi][nj][e] += sc[mi][e >> 1][0] * lo[e] + sc[mi][e >> 1][1] * hi[e];
        }
    } else {
      int sc[2][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) sc[mi][h] = wsc[8 * (f.wm + 16 * mi + f.g + 8 * h) + kk];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nj = 0; nj < NJ; ++nj) {
          int c[4];
          mma_k32(c, a[mi], b[nj >> 1][2 * (nj & 1)], b[nj >> 1][2 * (nj & 1) + 1]);
#pragma unroll
          for (int e = 0; e < 4; ++e) isum[mi][nj][e] += sc[mi][e >> 1] * c[e];
        }
    }
  }

  if constexpr (Tr::kKQuant) {  // end of the super-block: its term, added to each output
    float d[2][2], dmin[2][2];
    uint32_t mins[2][2][2];
    const auto* wmins = reinterpret_cast<const uint2*>(smem + S::wmins);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = f.wm + 16 * mi + f.g + 8 * h;
        d[mi][h] = wd[r];
        dmin[mi][h] = wm[r];
        const uint2 mm = wmins[r];
        mins[mi][h][0] = mm.x;
        mins[mi][h][1] = mm.y;
      }
    const auto* xbs = reinterpret_cast<const uint4*>(smem + S::xmin);
#pragma unroll
    for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
      for (int ct = 0; ct < 2; ++ct) {
        const int t = f.wn + 8 * nj + 2 * f.tq + ct;
        const float da = xda[t];
        const uint4 bv = xbs[t];
        const uint32_t bs[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int e = 2 * h + ct;
            const int msum = T == TensorType::Q6_K ? 0 : mmq_msum(mins[mi][h], bs);
            acc[mi][nj][e] = fadd(acc[mi][nj][e], mmq_kquant_term<T>(d[mi][h], dmin[mi][h], da, isum[mi][nj][e], msum));
            isum[mi][nj][e] = 0;
          }
      }
  }
}

/// Resident blocks per SM the launch bounds ask for (<= 128 registers per thread for two): two,
/// except for the wide tile of the K-quants, whose 2 x 8 x 4 per-output float sums and integer
/// sums need more registers than two blocks leave.
template <TensorType T, int BN>
constexpr int kMinBlocks = MmqTraits<T>::kKQuant && BN == kMmqWideBN ? 1 : 2;

template <TensorType T, int BN>
__global__ void __launch_bounds__(kThreads, (kMinBlocks<T, BN>)) mmq_kernel(const MmqBatchParams bp) {
  constexpr int NJ = BN / 16;
  // The output of this row tile (constant indices: a run-time index into a kernel parameter
  // would copy it to local memory).
  int64_t tile = blockIdx.y;
  MmqParams p;
  if (tile < bp.tiles0) {
    p = bp.seg[0];
  } else if (bp.n_seg < 3 || tile < bp.tiles0 + bp.tiles1) {
    p = bp.seg[1];
    tile -= bp.tiles0;
  } else {
    p = bp.seg[2];
    tile -= bp.tiles0 + bp.tiles1;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using Tr = MmqTraits<T>;
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const Frag f{(warp & 3) * 32, (warp >> 2) * (BN / 2), lane >> 2, lane & 3};
  const int64_t bn = static_cast<int64_t>(blockIdx.x) * BN;
  const int64_t bm = tile * BM;
  const int64_t n_stages = (p.k + Tr::kStageK - 1) / Tr::kStageK;

  float acc[2][NJ][4];
  int isum[2][NJ][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[i][j][e] = 0.0f;
        isum[i][j][e] = 0;
      }

  // Split k (bp.splits > 1, the thin tile only): block z of the cluster takes the stages
  // [n_stages z / splits, n_stages (z + 1) / splits), from zero sums.
  const int splits = BN == kMmqThinBN ? bp.splits : 1;
  const int64_t s_begin = n_stages * static_cast<int64_t>(blockIdx.z) / splits;
  const int64_t s_end = n_stages * (static_cast<int64_t>(blockIdx.z) + 1) / splits;
  issue_stage<T, BN>(p, smem, s_begin, bm, bn, 0);
  cp_async_commit();
  for (int64_t s = s_begin; s < s_end; ++s) {
    const int buf = static_cast<int>((s - s_begin) & 1);
    cp_async_wait_all();
    __syncthreads();  // stage s landed for every thread; stage s - 1 is no longer read
    decode_stage<T, BN>(p, smem, s, bm, buf);
    __syncthreads();  // decoded tiles visible; the weight stage buffer is free
    if (s + 1 < s_end) issue_stage<T, BN>(p, smem, s + 1, bm, bn, buf ^ 1);
    cp_async_commit();
    const int64_t left = p.k - s * Tr::kStageK;
    const int nsub = static_cast<int>((left < Tr::kStageK ? left : Tr::kStageK) / 32);
    constexpr int kFull = Tr::kStageK / 32;
    if (nsub == kFull)
      multiply_stage<T, BN, kFull>(smem, buf, nsub, f, acc, isum);
    else
      multiply_stage<T, BN, 0>(smem, buf, nsub, f, acc, isum);
  }

#if __CUDA_ARCH__ >= 900
  if constexpr (BN == kMmqThinBN) {
    if (splits > 1) {
      // The cluster's blocks hold partial sums of the same outputs: each puts its own in its
      // shared memory (the stage buffers are free now), and block 0 adds the others' in rank
      // order (deterministic), then writes the outputs alone.
      namespace cg = cooperative_groups;
      constexpr int kAcc = 2 * NJ * 4;
      static_assert(kAcc * kThreads * 4 <= MmqSmem<T, BN>::total, "the partial sums fit in the stage buffers");
      cp_async_wait_all();
      __syncthreads();
      float* mine = reinterpret_cast<float*>(smem);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
          for (int e = 0; e < 4; ++e) mine[((mi * NJ + nj) * 4 + e) * kThreads + threadIdx.x] = acc[mi][nj][e];
      cg::cluster_group cluster = cg::this_cluster();
      cluster.sync();
      const unsigned rank = cluster.block_rank();
      if (rank == 0) {
        for (int r = 1; r < splits; ++r) {
          const float* other = cluster.map_shared_rank(mine, r);
#pragma unroll
          for (int mi = 0; mi < 2; ++mi)
#pragma unroll
            for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
              for (int e = 0; e < 4; ++e)
                acc[mi][nj][e] = fadd(acc[mi][nj][e], other[((mi * NJ + nj) * 4 + e) * kThreads + threadIdx.x]);
        }
      }
      cluster.sync();  // the others' shared memory stays until block 0 has read it
      if (rank != 0) return;
    }
  }
#endif

#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t row = bm + f.wm + 16 * mi + f.g + 8 * (e >> 1);
        const int64_t tok = bn + f.wn + 8 * nj + 2 * f.tq + (e & 1);
        if (row < p.m && tok < p.n) {  // + bias, then residual + value: the separate adds' roundings
          float v = acc[mi][nj][e];
          if (p.bias != nullptr) v = fadd(v, p.bias[row]);
          if (p.res != nullptr) v = fadd(p.res[row + tok * p.ldr], v);
          p.y[row + tok * p.ldy] = v;
        }
      }
#else
  (void)bp;
  __trap();  // MMQ needs sm_80 (cp.async, ldmatrix, int8 mma.sync); never launched below it
#endif
}

template <TensorType T, int BN>
bool launch_tile(const MmqBatchParams& p, int64_t row_tiles, cudaStream_t stream, const char* site) {
  constexpr size_t bytes = MmqSmem<T, BN>::total;
  const void* fn = reinterpret_cast<const void*>(&mmq_kernel<T, BN>);
  if (!smem_opted_in(fn, bytes)) {
    note_launch_failure(site, cudaErrorInvalidConfiguration);  // the opt-in failed at context creation
    return false;
  }
  const dim3 grid(static_cast<unsigned>((p.seg[0].n + BN - 1) / BN), static_cast<unsigned>(row_tiles),
                  static_cast<unsigned>(BN == kMmqThinBN ? p.splits : 1));
  if (grid.z == 1) {
    mmq_kernel<T, BN><<<grid, kThreads, bytes, stream>>>(p);
    return MINFER_LAUNCH_CHECK(site);
  }
  // Split k: the z blocks of one output tile form one thread-block cluster (sm_90).
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = grid.z;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, mmq_kernel<T, BN>, p);
  if (e == cudaSuccess) return MINFER_LAUNCH_CHECK(site);
  // A cluster the device cannot place (its shared memory, a partitioned GPU): the same product
  // unsplit, and no split launches from now on.
  cudaGetLastError();
  g_no_split.store(true, std::memory_order_relaxed);
  // (stderr directly: fmt, behind core/log.h, does not compile under nvcc)
  std::fprintf(stderr, "minfer: warning: CUDA MMQ: a split-k launch of %u blocks per cluster failed (%s); splitting is off from now on\n",
               grid.z, cudaGetErrorString(e));
  MmqBatchParams unsplit = p;
  unsplit.splits = 1;
  mmq_kernel<T, BN><<<dim3(grid.x, grid.y), kThreads, bytes, stream>>>(unsplit);
  return MINFER_LAUNCH_CHECK(site);
}

template <TensorType T>
bool launch_type(const MmqBatchParams& p, int64_t row_tiles, cudaStream_t stream, const char* site, int tile_bn) {
  switch (tile_bn == 0 ? mmq_tile_tokens(T, row_tiles * BM, p.seg[0].n) : tile_bn) {
    case kMmqWideBN: return launch_tile<T, kMmqWideBN>(p, row_tiles, stream, site);
    case kMmqThinBN: return launch_tile<T, kMmqThinBN>(p, row_tiles, stream, site);
    default: return launch_tile<T, kMmqBN>(p, row_tiles, stream, site);
  }
}

template <TensorType T, int BN>
SmemOptin optin(const char* site) {
  return {site, reinterpret_cast<const void*>(&mmq_kernel<T, BN>), MmqSmem<T, BN>::total};
}

}  // namespace

bool mmq_supported(TensorType type) {
  switch (type) {
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K: return true;
    default: return false;
  }
}

int mmq_tile_tokens(TensorType type, int64_t m, int64_t n) {
  const int64_t row_tiles = (m + BM - 1) / BM;
  if (is_kquant(type) && n >= kMmqWideBN && row_tiles * ((n + kMmqWideBN - 1) / kMmqWideBN) >= kMmqTileMinBlocks)
    return kMmqWideBN;
  if (n > kMmqThinBN && row_tiles * ((n + kMmqBN - 1) / kMmqBN) >= kMmqTileMinBlocks) return kMmqBN;
  return kMmqThinBN;
}

int mmq_split_count(TensorType type, int64_t m, int64_t n, int64_t k, int sm_count, int compute_capability) {
  const int64_t forced = env_int("MINFER_CUDA_MMQ_SPLIT", 0);
  if (forced == 1 || g_no_split.load(std::memory_order_relaxed) || compute_capability < 90 || !mmq_supported(type) ||
      m < 1 || n < 1 || k < 1 || mmq_tile_tokens(type, m, n) != kMmqThinBN)
    return 1;
  const int64_t stage_k =
      is_kquant(type) ? MmqTraits<TensorType::Q4_K>::kStageK : MmqTraits<TensorType::Q4_0>::kStageK;
  const int64_t stages = (k + stage_k - 1) / stage_k;
  const int64_t blocks = (m + BM - 1) / BM * ((n + kMmqThinBN - 1) / kMmqThinBN);
  int64_t splits = forced >= 2 ? forced : (sm_count + blocks - 1) / blocks;
  if (forced < 2 && blocks >= sm_count / 2) splits = 1;  // the grid already covers half the SMs or more
  splits = std::min<int64_t>({splits, kMmqMaxSplits, stages / 2});
  return splits >= 2 ? static_cast<int>(splits) : 1;
}

bool mmq_accepts(TensorType type, const void* w, int64_t m, int64_t n) {
  return mmq_supported(type) && (reinterpret_cast<uintptr_t>(w) & 15) == 0 && m >= 1 &&
         (m + BM - 1) / BM <= 65535 && n >= 1;
}

size_t mmq_smem_bytes(TensorType type) {
#define MINFER_MMQ_SMEM(T) \
  case TensorType::T:      \
    return std::max({MmqSmem<TensorType::T, kMmqThinBN>::total, MmqSmem<TensorType::T, kMmqBN>::total, \
                     MmqSmem<TensorType::T, kMmqWideBN>::total});
  switch (type) {
    MINFER_MMQ_SMEM(Q4_0)
    MINFER_MMQ_SMEM(Q4_1)
    MINFER_MMQ_SMEM(Q5_0)
    MINFER_MMQ_SMEM(Q5_1)
    MINFER_MMQ_SMEM(Q8_0)
    MINFER_MMQ_SMEM(Q4_K)
    MINFER_MMQ_SMEM(Q5_K)
    MINFER_MMQ_SMEM(Q6_K)
    default: return 0;
  }
#undef MINFER_MMQ_SMEM
}

std::span<const SmemOptin> mmq_smem_optins() {
  static const SmemOptin list[] = {
      optin<TensorType::Q4_0, kMmqBN>("mmq_q4_0"),    optin<TensorType::Q4_1, kMmqBN>("mmq_q4_1"),
      optin<TensorType::Q5_0, kMmqBN>("mmq_q5_0"),    optin<TensorType::Q5_1, kMmqBN>("mmq_q5_1"),
      optin<TensorType::Q8_0, kMmqBN>("mmq_q8_0"),    optin<TensorType::Q4_K, kMmqBN>("mmq_q4_K"),
      optin<TensorType::Q5_K, kMmqBN>("mmq_q5_K"),    optin<TensorType::Q6_K, kMmqBN>("mmq_q6_K"),
      optin<TensorType::Q4_0, kMmqWideBN>("mmq_q4_0_wide"), optin<TensorType::Q4_1, kMmqWideBN>("mmq_q4_1_wide"),
      optin<TensorType::Q5_0, kMmqWideBN>("mmq_q5_0_wide"), optin<TensorType::Q5_1, kMmqWideBN>("mmq_q5_1_wide"),
      optin<TensorType::Q8_0, kMmqWideBN>("mmq_q8_0_wide"), optin<TensorType::Q4_K, kMmqWideBN>("mmq_q4_K_wide"),
      optin<TensorType::Q5_K, kMmqWideBN>("mmq_q5_K_wide"), optin<TensorType::Q6_K, kMmqWideBN>("mmq_q6_K_wide"),
      optin<TensorType::Q4_0, kMmqThinBN>("mmq_q4_0_thin"), optin<TensorType::Q4_1, kMmqThinBN>("mmq_q4_1_thin"),
      optin<TensorType::Q5_0, kMmqThinBN>("mmq_q5_0_thin"), optin<TensorType::Q5_1, kMmqThinBN>("mmq_q5_1_thin"),
      optin<TensorType::Q8_0, kMmqThinBN>("mmq_q8_0_thin"), optin<TensorType::Q4_K, kMmqThinBN>("mmq_q4_K_thin"),
      optin<TensorType::Q5_K, kMmqThinBN>("mmq_q5_K_thin"), optin<TensorType::Q6_K, kMmqThinBN>("mmq_q6_K_thin"),
  };
  return list;
}

bool launch_mmq_batch(TensorType type, const MatmulOut* outs, int n_outs, int64_t row_bytes, const ActLayout& L,
                      const void* acts, cudaStream_t stream, int tile_bn) {
  if ((tile_bn != 0 && tile_bn != kMmqThinBN && tile_bn != kMmqBN && tile_bn != kMmqWideBN) || outs == nullptr ||
      n_outs < 1 || n_outs > kMmqMaxOutputs) {
    note_launch_failure("matmul_bad_args", cudaErrorInvalidValue);
    return false;
  }
  const auto* base = static_cast<const uint8_t*>(acts);
  MmqBatchParams bp{};
  bp.n_seg = n_outs;
  int64_t row_tiles = 0;
  for (int i = 0; i < n_outs; ++i) {
    const MatmulOut& o = outs[i];
    MmqParams& p = bp.seg[i];
    p.w = static_cast<const uint8_t*>(o.w);
    p.m = o.m;
    p.row_bytes = row_bytes;
    p.w_bytes = o.m * row_bytes;
    p.qs = reinterpret_cast<const int8_t*>(base + L.qs_off);
    p.ds = reinterpret_cast<const float2*>(base + L.ds_off);
    p.dk = reinterpret_cast<const float*>(base + L.ds_off);
    p.bsums = reinterpret_cast<const int16_t*>(base + L.bsums_off);
    p.k = L.k;
    p.n = L.n;
    p.nba = L.nb;
    p.y = o.y;
    p.ldy = o.ldy;
    p.bias = o.bias;
    p.res = o.residual;
    p.ldr = o.ldr;
    const int64_t tiles = (o.m + BM - 1) / BM;
    if (i == 0) bp.tiles0 = tiles;
    if (i == 1) bp.tiles1 = tiles;
    row_tiles += tiles;
  }
  if (row_tiles < 1 || row_tiles > 65535) {
    note_launch_failure("matmul_bad_args", cudaErrorInvalidValue);
    return false;
  }
  if (tile_bn == 0)  // a forced tile (tests, MINFER_CUDA_MMQ_TILE) runs unsplit
    bp.splits = mmq_split_count(type, row_tiles * BM, L.n, L.k, context_sm_count(), context_compute_capability());
#define MINFER_MMQ_CASE(T, name, block)                                 \
  case TensorType::T:                                                   \
    for (int i = 0; i < n_outs; ++i) bp.seg[i].nbw = L.k / (block);     \
    return launch_type<TensorType::T>(bp, row_tiles, stream, name, tile_bn);
  switch (type) {
    MINFER_MMQ_CASE(Q4_0, "mmq_q4_0", 32)
    MINFER_MMQ_CASE(Q4_1, "mmq_q4_1", 32)
    MINFER_MMQ_CASE(Q5_0, "mmq_q5_0", 32)
    MINFER_MMQ_CASE(Q5_1, "mmq_q5_1", 32)
    MINFER_MMQ_CASE(Q8_0, "mmq_q8_0", 32)
    MINFER_MMQ_CASE(Q4_K, "mmq_q4_K", 256)
    MINFER_MMQ_CASE(Q5_K, "mmq_q5_K", 256)
    MINFER_MMQ_CASE(Q6_K, "mmq_q6_K", 256)
    default: break;
  }
#undef MINFER_MMQ_CASE
  note_launch_failure("matmul_bad_args", cudaErrorInvalidValue);
  return false;
}

bool launch_mmq(TensorType type, const void* w, int64_t m, int64_t row_bytes, const ActLayout& L,
                const void* acts, float* y, int64_t ldy, cudaStream_t stream, int tile_bn) {
  MatmulOut o;
  o.w = w;
  o.m = m;
  o.y = y;
  o.ldy = ldy;
  return launch_mmq_batch(type, &o, 1, row_bytes, L, acts, stream, tile_bn);
}

}  // namespace minfer::cuda::mm
