// Tensor-core MMVQ for Q4_K, Q5_K and Q6_K x Q8K activations, n = 3..8 token columns, bit-identical to
// the CPU reference (design: mmvq.cuh; contract: docs/cuda-matmul.md "Exactness contract").
//
// Why. The dp4a kernels (mmvq_kquants_direct.cu) unpack each weight once but then spend about
// 60 instructions per lane, per column, per step on dot products, shuffles and terms: a verify of
// 8 tokens cost 3.95 one-token steps (docs/perf/2026-12-07-h100-session-verify-batched.md). Here
// one int8 mma.sync m16n8k32 forms the exact sums of one 32-element sub-block for 16 rows and 8
// columns at once, so the instruction count per super-block no longer grows with the columns.
//
// Work split. A block of 4 (or 8) warps computes one tile of 16 rows (glu: 8 gate rows in
// fragment rows 0..7 and the same 8 up rows in 8..15, so a thread holds gate and up of its
// outputs) for all columns. The 32 virtual lanes of the contract are split among the W warps:
// warp w takes the L = 32 / W lanes bitrev5(L w .. L w + L - 1) and, for each, the super-blocks t = lane, lane + 32, ...
// in increasing t. Thread (g, tq) = (lane / 4, lane % 4) of a warp holds, as mma.sync does
// (PTX ISA, "Matrix Fragments for mma.m16n8k32" with .s8): A rows g and g + 8, k slots
// 4 tq .. 4 tq + 3 and 16 + 4 tq .. 16 + 4 tq + 3; B column g, the same k slots; C rows g, g + 8,
// columns 2 tq, 2 tq + 1. The k slots map to the sub-block's elements 8 tq .. 8 tq + 7 (the same
// map in A and B, so each sum is the sub-block's dot product), which makes every load an aligned
// 8-byte word: weights qs[32 q + 8 tq ..] (low nibbles: sub-block 2q, high: 2q + 1), Q5_K
// qh[8 tq ..], activations qs[32 j + 8 tq ..].
//
// Exactness. Each mma gives the exact int32 sum of a sub-block (|sum| <= 32 * 31 * 127);
// isum = sum_j sc_j s_j and msum = sum_j m_j bsum_j are exact integers, the term is
// kquarter_term's formula, lane l adds its terms in increasing t starting from 0.0f, and the
// lanes fold by halving: processing the lanes in bit-reversed order makes the halving tree a
// sequence of adjacent pairs (lanes k and k + 16, then k and k + 8, ...), so each warp folds its L
// lanes into one subtree value and warp 0 folds the W subtree values the same way. The result is the bits of the dp4a kernels and of the CPU.
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmvq.cuh"
#include "cuda/kernels/mmvq_batch.cuh"
#include "cuda/kernels/mmvq_blocks.cuh"
#include "cuda/kernels/mmvq_common.cuh"
#include "cuda/kernels/mmvq_mma.cuh"
#include "cuda/kernels/ptx.cuh"

namespace minfer::cuda::mm {
namespace {

/// Four bytes at a 2-byte aligned address (a Q6_K block's fields), as two 16-bit loads.
__device__ __forceinline__ uint32_t ldg_u16x2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const unsigned short*>(p);
  return static_cast<uint32_t>(__ldg(h)) | (static_cast<uint32_t>(__ldg(h + 1)) << 16);
}

/// The Q6_K terms of super-block t (sb_terms' contract): 16 m16n8k16, one per 16-element group.
template <int N>
__device__ __forceinline__ void sb_terms_q6(const uint8_t* const (&w)[2], int64_t t, const Q8KView& acts, int g,
                                            int tq, float (&term)[4]) {
  MmaQ6Raw row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint8_t* blk = w[r] + t * MmaK<TensorType::Q6_K>::kBytes;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int lh = 0; lh < 2; ++lh) {
#pragma unroll
        for (int sq = 0; sq < 2; ++sq) row[r].ql[hh][sq][lh] = ldg_u16x2(blk + 64 * hh + 32 * sq + 16 * lh + 4 * tq);
        row[r].qh[hh][lh] = ldg_u16x2(blk + 128 + 32 * hh + 16 * lh + 4 * tq);
      }
#pragma unroll
    for (int i = 0; i < 4; ++i) row[r].sc[i] = ldg_u16x2(blk + 192 + 4 * i);
    row[r].d = __ldg(reinterpret_cast<const unsigned short*>(blk + 208));
  }
  uint32_t a[16];
#pragma unroll
  for (int G = 0; G < 16; ++G) a[G] = 0u;
  if (g < N) {
    const int8_t* aq = acts.qs + g * acts.k + t * 256 + 4 * tq;
#pragma unroll
    for (int G = 0; G < 16; ++G) a[G] = ldg(reinterpret_cast<const uint32_t*>(aq + 16 * G));
  }
  int bsum[2][16];
  float da[2];
#pragma unroll
  for (int cc = 0; cc < 2; ++cc) {
    const int col = 2 * tq + cc;
    da[cc] = 0.0f;
#pragma unroll
    for (int G = 0; G < 16; ++G) bsum[cc][G] = 0;
    if (col < N) {
      const int16_t* bs = acts.bsums + (col * acts.nb + t) * 16;
#pragma unroll
      for (int G = 0; G < 16; G += 2) {
        const int v = ldg(reinterpret_cast<const int*>(bs + G));
        bsum[cc][G] = static_cast<int16_t>(v & 0xFFFF);
        bsum[cc][G + 1] = v >> 16;
      }
      da[cc] = __ldg(acts.d + col * acts.nb + t);
    }
  }
  int isum[4] = {0, 0, 0, 0};
#pragma unroll
  for (int G = 0; G < 16; ++G) {
    const int hh = G >> 3, quad = (G >> 1) & 3, lh = G & 1;
    int c[4];
    mma_k16(c, mma_q6_a_word(row[0], hh, quad, lh), mma_q6_a_word(row[1], hh, quad, lh), a[G]);
#pragma unroll
    for (int e = 0; e < 4; ++e) isum[e] += mma_q6_group(row[e >> 1], G, c[e], bsum[e & 1][G]);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) term[e] = fmul(fmul(half_to_float(row[e >> 1].d), da[e & 1]), i2f(isum[e]));
}

__device__ __forceinline__ uint2 ldg_stream8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

/// The Q4_K / Q5_K terms of super-block t (sb_terms' contract): 8 m16n8k32, one per sub-block.
template <TensorType kType, int N>
__device__ __forceinline__ void sb_terms_q45(const uint8_t* const (&w)[2], int64_t t, const Q8KView& acts, int g,
                                             int tq, float (&term)[4]) {
  using K = MmaK<kType>;
  MmaRowRaw row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint8_t* blk = w[r] + t * K::kBytes;
    row[r].hd = ldg_stream16(blk);
#pragma unroll
    for (int q = 0; q < 4; ++q) row[r].qs[q] = ldg_stream8(blk + K::kQsOff + 32 * q + 8 * tq);
    row[r].qh = kType == TensorType::Q5_K ? ldg_stream8(blk + 16 + 8 * tq) : make_uint2(0u, 0u);
  }
  // Activations: column g's elements 8 tq .. 8 tq + 7 of each sub-block (zero past n).
  uint2 a[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) a[j] = make_uint2(0u, 0u);
  if (g < N) {
    const int8_t* aq = acts.qs + g * acts.k + t * 256 + 8 * tq;
#pragma unroll
    for (int j = 0; j < 8; ++j) a[j] = ldg(reinterpret_cast<const uint2*>(aq + 32 * j));
  }
  const MmaScales scales[2] = {mma_scales(row[0].hd), mma_scales(row[1].hd)};
  int isum[4] = {0, 0, 0, 0};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint2 w0 = mma_a_words<kType>(row[0], j >> 1, j & 1), w1 = mma_a_words<kType>(row[1], j >> 1, j & 1);
    const uint32_t av[4] = {w0.x, w1.x, w0.y, w1.y};
    int c[4];
    mma_k32(c, av, a[j].x, a[j].y);
#pragma unroll
    for (int e = 0; e < 4; ++e) isum[e] += scales[e >> 1].sc[j] * c[e];
  }
#pragma unroll
  for (int cc = 0; cc < 2; ++cc) {
    const int col = 2 * tq + cc;
    int bsum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float da = 0.0f;
    if (col < N) {
      const int16_t* bs = acts.bsums + (col * acts.nb + t) * 16;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int v = ldg(reinterpret_cast<const int*>(bs + 2 * j));
        bsum[j] = static_cast<int16_t>(v & 0xFFFF) + (v >> 16);
      }
      da = __ldg(acts.d + col * acts.nb + t);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) term[2 * h + cc] = mma_term(row[h].hd, scales[h], isum[2 * h + cc], bsum, da);
  }
}

/// The terms of super-block t for the thread's four outputs e (rows g, g, g + 8, g + 8 by e / 2;
/// columns 2 tq + e % 2): w[0] / w[1] the rows' first bytes.
template <TensorType kType, int N>
__device__ __forceinline__ void sb_terms(const uint8_t* const (&w)[2], int64_t t, const Q8KView& acts, int g, int tq,
                                         float (&term)[4]) {
  if constexpr (kType == TensorType::Q6_K) {
    sb_terms_q6<N>(w, t, acts, g, tq, term);
  } else {
    sb_terms_q45<kType, N>(w, t, acts, g, tq, term);
  }
}

/// The weight row of fragment row `fr` (0..15) of tile `tile`; false when it is past the rows
/// (the row then points at row 0 of segment 0, computed and never stored).
template <bool kGlu>
__device__ __forceinline__ bool tile_row(const MmvqBatch& b, int64_t tile, int fr, SegRow* s) {
  bool ok;
  if constexpr (kGlu) {
    ok = find_segment(b, tile * 8 + (fr & 7), s);
    if (ok && fr >= 8) s->w = static_cast<const uint8_t*>(b.seg[1].w);
  } else {
    ok = find_segment(b, tile * 16 + fr, s);
  }
  if (!ok) *s = seg_row(b, 0, 0);
  return ok;
}

/// One output: + bias, then res + value (store_row's order).
__device__ __forceinline__ void store_one(const SegRow& s, int c, float v) {
  if (s.bias != nullptr) v = __fadd_rn(v, __ldg(s.bias + s.row));
  if (s.res != nullptr) v = __fadd_rn(s.res[s.row + c * s.ldr], v);
  s.y[s.row + c * s.ldy] = v;
}

// kWarps warps per block (the lane groups of one tile: warp w takes the 32 / kWarps lanes
// bitrev5(L w .. L w + L - 1), a subtree of the fold); kMinBlocks: the launch bounds' blocks per
// SM (1: the compiler keeps every lane's loads in flight at once; 2: fewer registers, more warps).
template <TensorType kType, int N, bool kGlu, int kWarps, int kMinBlocks>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks) mmvq_mma_kernel(const MmvqBatch b, const Q8KView acts) {
  constexpr int kLanesPerWarp = 32 / kWarps;
  pdl_prologue();
  __shared__ float part[4][kWarps][32];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int g = lane >> 2, tq = lane & 3;
  const int64_t tile = blockIdx.x;
  SegRow s0, s1;
  const bool ok0 = tile_row<kGlu>(b, tile, g, &s0);
  const bool ok1 = tile_row<kGlu>(b, tile, g + 8, &s1);
  const uint8_t* const w[2] = {s0.w + s0.row * b.row_bytes, s1.w + s1.row * b.row_bytes};
  const int64_t nb = b.k / 256;
  // This warp's lanes l_i = bitrev5(kLanesPerWarp * warp + i): each sums its terms t = l_i,
  // l_i + 32, ... in increasing t, from 0.0f.
  float acc[kLanesPerWarp][4];
#pragma unroll
  for (int i = 0; i < kLanesPerWarp; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;
  for (int64_t base = 0; base < nb; base += 32) {
#pragma unroll
    for (int i = 0; i < kLanesPerWarp; ++i) {
      const int64_t t = base + bitrev5(kLanesPerWarp * warp + i);
      if (t < nb) {
        float term[4];
        sb_terms<kType, N>(w, t, acts, g, tq, term);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][e] = fadd(acc[i][e], term[e]);
      }
    }
  }
  // The warp's subtree value, then (warp 0) the tree over the warps' values in warp order: warp
  // w's leaves are a contiguous run of the bit-reversed order, so both folds are pairwise trees
  // over adjacent values (with 8 warps: lanes (k, k + 16), (k + 8, k + 24), their sum L8[k],
  // k = bitrev5(4 w); then L8[0] + L8[4] = warps 0 + 1, L8[2] + L8[6] = warps 2 + 3, ...).
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    float leaf[kLanesPerWarp];
#pragma unroll
    for (int i = 0; i < kLanesPerWarp; ++i) leaf[i] = acc[i][e];
    part[e][warp][lane] = tree_fold<kLanesPerWarp>(leaf);
  }
  __syncthreads();
  if (warp != 0) return;
  float v[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    float w_vals[kWarps];
#pragma unroll
    for (int i = 0; i < kWarps; ++i) w_vals[i] = part[e][i][lane];
    v[e] = tree_fold<kWarps>(w_vals);
  }
#pragma unroll
  for (int cc = 0; cc < 2; ++cc) {
    const int col = 2 * tq + cc;
    if (col >= N) continue;
    if constexpr (kGlu) {
      if (ok0) store_one(s0, col, __fmul_rn(silu_cpu(v[cc]), v[2 + cc]));
    } else {
      if (ok0) store_one(s0, col, v[cc]);
      if (ok1) store_one(s1, col, v[2 + cc]);
    }
  }
}

template <TensorType kType, bool kGlu, int N>
bool launch_n(const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream, const char* site, int variant) {
  const auto tiles = static_cast<unsigned>(kGlu ? (b.seg[0].m + 7) / 8 : (batch_rows(b) + 15) / 16);
  // Variant 1 (default): 4 warps a tile; 2: 8 warps. Both with two blocks an SM in the launch
  // bounds. Measured on the H100 (7B Q4_K_M verify forwards, 2026-12-08): 4 warps 5% faster at 8
  // columns, 8 warps 5% faster at 4; 8 warps with one block an SM (the first version) was 15-25%
  // slower than both and is gone.
  if (variant == 2)
    launch_pdl(mmvq_mma_kernel<kType, N, kGlu, 8, 2>, dim3(tiles), dim3(256), 0, stream, b, acts);
  else
    launch_pdl(mmvq_mma_kernel<kType, N, kGlu, 4, 2>, dim3(tiles), dim3(128), 0, stream, b, acts);
  return MINFER_LAUNCH_CHECK(site);
}

template <TensorType kType, bool kGlu>
bool launch_type(const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream, const char* const* sites,
                 int variant) {
  switch (b.n) {
#define MINFER_CASE(N) \
  case N:              \
    return launch_n<kType, kGlu, N>(b, acts, stream, sites[N - 1], variant);
    MINFER_CASE(3)
    MINFER_CASE(4)
    MINFER_CASE(5)
    MINFER_CASE(6)
    MINFER_CASE(7)
    MINFER_CASE(8)
#undef MINFER_CASE
    default: return false;
  }
}

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

}  // namespace

bool launch_mmvq_kquant_mma(TensorType type, const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream,
                            int variant, bool* launched) {
  static const char* const kQ4_K[8] = MINFER_MMVQ_SITES("mma_q4_K");
  static const char* const kQ5_K[8] = MINFER_MMVQ_SITES("mma_q5_K");
  static const char* const kQ4_Kg[8] = MINFER_MMVQ_SITES("mma_glu_q4_K");
  static const char* const kQ5_Kg[8] = MINFER_MMVQ_SITES("mma_glu_q5_K");
  static const char* const kQ6_K[8] = MINFER_MMVQ_SITES("mma_q6_K");
  static const char* const kQ6_Kg[8] = MINFER_MMVQ_SITES("mma_glu_q6_K");
  *launched = false;
  if (type != TensorType::Q4_K && type != TensorType::Q5_K && type != TensorType::Q6_K) return true;
  if (b.n < 3 || b.n > 8 || b.k % 256 != 0) return true;
  if (b.n_seg < 1 || b.n_seg > kMmvqMaxSegments || (b.glu && (b.n_seg != 2 || b.seg[1].m != b.seg[0].m)))
    return true;
  // Q4_K/Q5_K blocks are read with 16- and 8-byte loads; Q6_K blocks (210 bytes) with 2-byte ones.
  for (int s = 0; s < b.n_seg; ++s)
    if (!aligned(b.seg[s].w, type == TensorType::Q6_K ? 2 : 16)) return true;
  if (!aligned(acts.qs, 16) || !aligned(acts.bsums, 8)) return true;
  *launched = true;
  if (type == TensorType::Q6_K)
    return b.glu ? launch_type<TensorType::Q6_K, true>(b, acts, stream, kQ6_Kg, variant)
                 : launch_type<TensorType::Q6_K, false>(b, acts, stream, kQ6_K, variant);
  if (type == TensorType::Q4_K)
    return b.glu ? launch_type<TensorType::Q4_K, true>(b, acts, stream, kQ4_Kg, variant)
                 : launch_type<TensorType::Q4_K, false>(b, acts, stream, kQ4_K, variant);
  return b.glu ? launch_type<TensorType::Q5_K, true>(b, acts, stream, kQ5_Kg, variant)
               : launch_type<TensorType::Q5_K, false>(b, acts, stream, kQ5_K, variant);
}

}  // namespace minfer::cuda::mm
