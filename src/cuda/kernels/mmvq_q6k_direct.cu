// Direct-load MMVQ for Q6_K x Q8K activations, n = 1..8 token columns, bit-identical to the CPU
// reference (design: mmvq.cuh). Q6_K super-blocks are 210 bytes, so in a row they sit at every
// even byte offset modulo 16: instead of staging them through shared memory (mmvq_kquants.cu),
// each lane loads the aligned 16-byte words around the bytes it needs straight into registers and
// shifts them into place (extract_words: selects and a funnel shift, no run-time register index).
//
// Work split (as mmvq_kquants_direct.cu). A warp computes two rows at once (the gate and up rows of
// a SwiGLU launch, else two consecutive grid rows), which share the activation loads. Four lanes
// share a super-block: lane 4g + q decodes quarter q (mmvq_blocks.cuh Q6QuarterW: 32 ql bytes, 32
// qh bytes, 4 scales) of super-block 8 step + g; a lane loads 8 words per row and super-block (3
// around its ql bytes, 3 around its qh bytes, 2 around scales and d).
//
// Used for rows of up to kQ6DirectMaxK elements (mmvq.cuh): on the H200 it beat the staged kernel
// on the 7B output matrix (k = 3584: 197 against 245 us) but not on the 7B ffn_down (k = 18944:
// 34 against 31 us), where one warp per row pair leaves too few warps for the long rows
// (docs/perf/2026-11-30-mmvq-q6k-direct.md).
//
// Exactness. A quarter's share of isum is exact; the four shares are added with two
// xor-shuffles, so every lane of the group holds the contract's isum. The f32 term of super-block
// t, (d * da) * float(isum), moves to lane t % 32, which adds it to its running sum in increasing
// t; then the lanes are folded by halving (quant_ref.h accumulation contract).
//
// Bounds. Words are read with load_word_clamped against the row's segment: bytes outside the
// tensor read as 0 and are never touched (the first block's leading and the last block's
// trailing word straddle the tensor's ends).
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmvq.cuh"
#include "cuda/kernels/mmvq_batch.cuh"
#include "cuda/kernels/mmvq_blocks.cuh"
#include "cuda/kernels/mmvq_common.cuh"

namespace minfer::cuda::mm {
namespace {

constexpr int kQ6Bytes = 210;  // sizeof(block_q6_K), blocks.h / ggml-common.h

/// The raw words one lane needs of one super-block, and the block's offset in the first word.
struct Q6Raw {
  uint4 l[3], h[3], s[2];
  int o;
};

/// Loads quarter q's words of the super-block at blk (2-byte aligned) of a tensor occupying
/// bytes [lo, hi).
__device__ __forceinline__ void q6_load(Q6Raw& r, const uint8_t* blk, int q, uint64_t lo, uint64_t hi) {
  const uint64_t a = reinterpret_cast<uint64_t>(blk);
  const uint64_t base = a & ~uint64_t{15};
  r.o = static_cast<int>(a - base);
  const uint64_t wl = base + 32 * static_cast<uint64_t>(q);
  const uint64_t wh = base + 128 + 32 * static_cast<uint64_t>(q >> 1);
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    r.l[i] = load_word_clamped(wl + 16 * i, lo, hi);
    r.h[i] = load_word_clamped(wh + 16 * i, lo, hi);
  }
  r.s[0] = load_word_clamped(base + 192, lo, hi);
  r.s[1] = load_word_clamped(base + 208, lo, hi);
}

/// The rows of one work item: first bytes and the byte ranges of their tensors.
struct PairRows {
  const uint8_t* w[2];
  uint64_t lo[2], hi[2];
};

template <bool kGlu>
__device__ __forceinline__ bool pair_of(const MmvqBatch& b, int64_t p, PairRows* out) {
  SegRow s[2];
  if (!pair_rows<kGlu>(b, p, &s[0], &s[1])) return false;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    out->w[r] = s[r].w + s[r].row * b.row_bytes;
    out->lo[r] = reinterpret_cast<uint64_t>(s[r].w);
    out->hi[r] = out->lo[r] + static_cast<uint64_t>(s[r].m) * static_cast<uint64_t>(b.row_bytes);
  }
  return true;
}

/// The loads of the step that starts at super-block t0: quarter q of super-block t0 + g (clamped
/// to the row's last one; such a term is never taken) of both rows. Returns that super-block.
__device__ __forceinline__ int64_t load_step(Q6Raw (&raw)[2], const PairRows& pr, int64_t t0, int64_t nb, int q,
                                             int g) {
  int64_t t = t0 + g;
  if (t >= nb) t = nb - 1;
#pragma unroll
  for (int r = 0; r < 2; ++r) q6_load(raw[r], pr.w[r] + t * kQ6Bytes, q, pr.lo[r], pr.hi[r]);
  return t;
}

/// Adds the terms of the step that starts at super-block t0 (a multiple of 8; super-block t of
/// this lane's group, loaded in raw) to the running sums acc of virtual lanes t0 % 32 ..
/// t0 % 32 + 7, which lanes t0 % 32 .. + 7 hold. Called by the whole warp.
template <int N>
__device__ __forceinline__ void step_terms(const Q6Raw (&raw)[2], int64_t t, int64_t t0, int64_t nb,
                                           const Q8KView& acts, int lane, float (&acc)[2][N]) {
  const int q = lane & 3;
  Q6QuarterW w[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) w[r] = q6k_quarter_decode(raw[r].l, raw[r].h, raw[r].s, raw[r].o, q);
  // Lane l takes the term of super-block t0 + l % 8 when l / 8 == (t0 % 32) / 8; lanes
  // 4 (l % 8) .. 4 (l % 8) + 3 hold it.
  const int my_src = 4 * (lane & 7);
  const bool take = static_cast<int>((t0 >> 3) & 3) == (lane >> 3) && t0 + (lane & 7) < nb;
#pragma unroll
  for (int c = 0; c < N; ++c) {
    const Q6QuarterA a = q6k_quarter_acts(acts, c, t, q);
    const float da = __ldg(acts.d + c * acts.nb + t);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int v = q6k_quarter_isum(w[r], a);
      v += __shfl_xor_sync(kFullMask, v, 1);
      v += __shfl_xor_sync(kFullMask, v, 2);
      const float term = q6k_quarter_term(w[r].d, da, v);
      const float x = __shfl_sync(kFullMask, term, my_src);
      if (take) acc[r][c] = __fadd_rn(acc[r][c], x);
    }
  }
}

// One warp per row pair (pair_rows), in steps of 8 super-blocks.
template <int N, bool kGlu, int kMinBlocks>
__global__ void __launch_bounds__(kMmvqWarps * 32, kMinBlocks)
    mmvq_q6k_direct_kernel(const MmvqBatch b, const Q8KView acts) {
  pdl_prologue();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int q = lane & 3, g = lane >> 2;
  const int64_t p = static_cast<int64_t>(blockIdx.x) * kMmvqWarps + static_cast<int64_t>(threadIdx.x >> 5);
  PairRows pr;
  if (!pair_of<kGlu>(b, p, &pr)) return;  // the whole warp leaves; no block-wide barrier follows
  const int64_t nb = b.k / 256;
  float acc[2][N];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int c = 0; c < N; ++c) acc[r][c] = 0.0f;
  for (int64_t t0 = 0; t0 < nb; t0 += 8) {
    Q6Raw raw[2];
    const int64_t t = load_step(raw, pr, t0, nb, q, g);
    step_terms<N>(raw, t, t0, nb, acts, lane, acc);
  }
  store_pair<kGlu, N>(b, p, acc, lane);
}

// Launches of one token column over short rows take the kMmvqHighOccBlocks variant.
template <int N, bool kGlu>
void launch_n(const MmvqBatch& b, const Q8KView& acts, dim3 grid, dim3 block, cudaStream_t stream) {
  if constexpr (N == 1) {
    if (mmvq_high_occupancy(b.k)) {
      launch_pdl(mmvq_q6k_direct_kernel<N, kGlu, kMmvqHighOccBlocks>, grid, block, 0, stream, b, acts);
      return;
    }
  }
  launch_pdl(mmvq_q6k_direct_kernel<N, kGlu, 3>, grid, block, 0, stream, b, acts);
}

template <bool kGlu>
bool launch_type(const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream, const char* const* sites) {
  const int64_t pairs = kGlu ? b.seg[0].m : (batch_rows(b) + 1) / 2;
  const dim3 grid(static_cast<unsigned>((pairs + kMmvqWarps - 1) / kMmvqWarps));  // one warp per pair
  const dim3 block(kMmvqWarps * 32);
  switch (b.n) {
#define MINFER_CASE(N)                              \
  case N:                                           \
    launch_n<N, kGlu>(b, acts, grid, block, stream); \
    return MINFER_LAUNCH_CHECK(sites[N - 1]);
    MINFER_CASE(1)
    MINFER_CASE(2)
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

}  // namespace

bool launch_mmvq_q6k_direct(const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream, bool any_length,
                            bool* launched) {
  static const char* const kSites[8] = MINFER_MMVQ_SITES("direct_q6_K");
  static const char* const kGluSites[8] = MINFER_MMVQ_SITES("direct_glu_q6_K");
  *launched = false;
  if (b.n_seg < 1 || b.n_seg > kMmvqMaxSegments || (b.glu && (b.n_seg != 2 || b.seg[1].m != b.seg[0].m)))
    return true;
  if (!any_length && b.k > kQ6DirectMaxK) return true;
  if ((reinterpret_cast<uintptr_t>(acts.qs) & 15u) != 0 || (reinterpret_cast<uintptr_t>(acts.bsums) & 3u) != 0)
    return true;
  for (int s = 0; s < b.n_seg; ++s)
    if ((reinterpret_cast<uintptr_t>(b.seg[s].w) & 1u) != 0) return true;
  *launched = true;
  return b.glu ? launch_type<true>(b, acts, stream, kGluSites) : launch_type<false>(b, acts, stream, kSites);
}

}  // namespace minfer::cuda::mm
