// Direct-load MMVQ for Q4_K and Q5_K x Q8K activations, n = 1..8 token columns, bit-identical
// to the CPU reference (design: mmvq.cuh). Used when every segment's weights are 16-byte
// aligned: the super-blocks (144 and 176 bytes) then are too, and each lane loads the bytes it
// needs with 16-byte loads straight into registers, without the shared-memory stage of
// mmvq_kquants.cu (which stays the path for Q6_K, 2-byte aligned rows and the emulation).
//
// Work split. A warp computes two rows at once (the gate and up rows of a SwiGLU launch, else two
// consecutive grid rows), so their loads are in flight together. Four lanes share a super-block:
// lane 4g + q decodes quarter q (sub-blocks 2q, 2q + 1) of super-block 8 kb + g of a step of
// KB * 8 super-blocks (8 by default; 16 with MINFER_CUDA_MMVQ_KB=2, measured slower end to end).
// One warp per row pair; a warp issues the loads of its next step before computing the current
// one. (A persistent grid, warps walking several pairs, was measured slower and removed:
// docs/perf/2026-11-30-mmvq-direct.md.)
//
// Exactness. A quarter's shares of the integer sums isum/msum are exact; the four shares are
// added with xor-shuffles (with KB = 2, transposed: after the xor-1 exchange even lanes carry
// step half 0 and odd lanes half 1, halving the shuffles), so every total is the contract's.
// The f32 term of super-block t is formed from the totals and moved to lane t % 32, which adds
// it to its running sum: lane l sees t = l, l + 32, ... in increasing order, then the lanes are
// folded by halving (quant_ref.h accumulation contract).
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmvq.cuh"
#include "cuda/kernels/mmvq_batch.cuh"
#include "cuda/kernels/mmvq_blocks.cuh"
#include "cuda/kernels/mmvq_common.cuh"

namespace minfer::cuda::mm {
namespace {

template <TensorType kType>
struct Direct {
  static constexpr int kBytes = kType == TensorType::Q4_K ? 144 : 176;
  static constexpr int kQsOff = kType == TensorType::Q4_K ? 16 : 48;  ///< qs offset in the block
};

/// The raw words one lane needs of one super-block: header (d, dmin, scales), its 32 qs bytes
/// and (Q5_K) the 32 qh bytes.
template <TensorType kType>
struct QuarterRaw {
  uint4 hd, qa, qb, ha, hb;
  __device__ __forceinline__ void load(const uint8_t* blk, int q) {
    hd = ldg_stream16(blk);
    qa = ldg_stream16(blk + Direct<kType>::kQsOff + 32 * q);
    qb = ldg_stream16(blk + Direct<kType>::kQsOff + 32 * q + 16);
    if constexpr (kType == TensorType::Q5_K) {
      ha = ldg_stream16(blk + 16);
      hb = ldg_stream16(blk + 32);
    } else {
      ha = hb = make_uint4(0, 0, 0, 0);
    }
  }
};

/// One step's loads for rows w[0], w[1]: quarter q of super-block t0 + 8 kb + g (clamped to the
/// row's last super-block; such a term is never taken) for kb < KB.
template <TensorType kType, int KB>
__device__ __forceinline__ void load_step(QuarterRaw<kType> (&raw)[2][KB], int64_t (&tk)[KB], const uint8_t* const (&w)[2],
                                          int64_t t0, int64_t nb, int q, int g) {
#pragma unroll
  for (int kb = 0; kb < KB; ++kb) {
    const int64_t t = t0 + 8 * kb + g;
    tk[kb] = t < nb ? t : nb - 1;
#pragma unroll
    for (int r = 0; r < 2; ++r) raw[r][kb].load(w[r] + tk[kb] * Direct<kType>::kBytes, q);
  }
}

/// Adds one step's terms (super-blocks t0 .. t0 + 8 KB - 1 of rows 0 and 1, loaded in raw) to
/// the virtual lanes' running sums acc. Called by the whole warp.
template <TensorType kType, int N, int KB>
__device__ __forceinline__ void step_terms(const QuarterRaw<kType> (&raw)[2][KB], const int64_t (&tk)[KB], int64_t step,
                                           int64_t nb, const Q8KView& acts, int lane, float (&acc)[2][N]) {
  constexpr int kStepBlocks = 8 * KB;               // super-blocks per step
  constexpr int kStepsPerRound = 32 / kStepBlocks;  // steps per 32 virtual lanes
  const int q = lane & 3;
  const int odd = lane & 1;
  // Lane l takes, in steps = l / kStepBlocks (mod kStepsPerRound), the term of super-block
  // t0 + l % kStepBlocks, held by lane my_src.
  const int my_src = 4 * (lane % 8) + (KB == 2 ? (lane >> 3) & 1 : 0);
  const int64_t t0 = step * kStepBlocks;
  int isum[2][KB][N], msum[2][KB][N];
#pragma unroll
  for (int kb = 0; kb < KB; ++kb)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const KQuarterW wq =
          kquarter_decode<kType>(raw[r][kb].hd, raw[r][kb].qa, raw[r][kb].qb, raw[r][kb].ha, raw[r][kb].hb, q);
#pragma unroll
      for (int c = 0; c < N; ++c) {
        const int2 sh = kquarter_partial(wq, acts, c, tk[kb], q);
        isum[r][kb][c] = sh.x;
        msum[r][kb][c] = sh.y;
      }
    }
  // Totals over the 4 lanes of a group: lane 4g + q ends with the totals of half (q & 1)
  // (KB = 2) or of the one half (KB = 1).
  const int half = KB == 2 ? odd : 0;
  const int64_t t_mine = half ? tk[KB - 1] : tk[0];
  const bool take = (step % kStepsPerRound) == lane / kStepBlocks && t0 + (lane % kStepBlocks) < nb;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t hd_x = half ? raw[r][KB - 1].hd.x : raw[r][0].hd.x;
#pragma unroll
    for (int c = 0; c < N; ++c) {
      int vi, vm;
      if constexpr (KB == 2) {
        const int si = odd ? isum[r][0][c] : isum[r][1][c];
        const int sm = odd ? msum[r][0][c] : msum[r][1][c];
        vi = (odd ? isum[r][1][c] : isum[r][0][c]) + __shfl_xor_sync(kFullMask, si, 1);
        vm = (odd ? msum[r][1][c] : msum[r][0][c]) + __shfl_xor_sync(kFullMask, sm, 1);
      } else {
        vi = isum[r][0][c] + __shfl_xor_sync(kFullMask, isum[r][0][c], 1);
        vm = msum[r][0][c] + __shfl_xor_sync(kFullMask, msum[r][0][c], 1);
      }
      vi += __shfl_xor_sync(kFullMask, vi, 2);
      vm += __shfl_xor_sync(kFullMask, vm, 2);
      const float da = __ldg(acts.d + c * acts.nb + t_mine);
      const float term = kquarter_term(hd_x, da, vi, vm);
      const float v = __shfl_sync(kFullMask, term, my_src);
      if (take) acc[r][c] = __fadd_rn(acc[r][c], v);
    }
  }
}

/// The first bytes of the two rows of work item p (pair_rows). False past the last pair.
template <bool kGlu>
__device__ __forceinline__ bool pair_ptrs(const MmvqBatch& b, int64_t p, const uint8_t* (&w)[2]) {
  SegRow s0, s1;
  if (!pair_rows<kGlu>(b, p, &s0, &s1)) return false;
  w[0] = s0.w + s0.row * b.row_bytes;
  w[1] = s1.w + s1.row * b.row_bytes;
  return true;
}

// Warp i of the grid takes work items (row pairs) i, i + W, i + 2W, ... (W = the grid's warp
// count; the launch gives one pair per warp), each as n_steps steps, and issues the loads of its
// next step before computing the current one.
template <TensorType kType, int N, bool kGlu, int KB, int kMinBlocks>
__global__ void __launch_bounds__(kMmvqWarps * 32, kMinBlocks)
    mmvq_kquant_direct_kernel(const MmvqBatch b, const Q8KView acts) {
  pdl_prologue();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int q = lane & 3, g = lane >> 2;
  const int64_t n_warps = static_cast<int64_t>(gridDim.x) * kMmvqWarps;
  int64_t p = static_cast<int64_t>(blockIdx.x) * kMmvqWarps + static_cast<int64_t>(threadIdx.x >> 5);
  const int64_t nb = b.k / 256;
  const int64_t n_steps = (nb + 8 * KB - 1) / (8 * KB);
  const uint8_t* w[2];
  if (!pair_ptrs<kGlu>(b, p, w)) return;  // the whole warp leaves; no block-wide barrier follows
  QuarterRaw<kType> raw[2][KB];
  int64_t tk[KB];
  load_step<kType, KB>(raw, tk, w, 0, nb, q, g);
  float acc[2][N];
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int c = 0; c < N; ++c) acc[r][c] = 0.0f;
  int64_t step = 0;
  for (;;) {
    // The next item: the pair's next step, else the first step of the warp's next pair.
    int64_t next_p = p, next_step = step + 1;
    const uint8_t* nw[2] = {w[0], w[1]};
    bool has_next = true;
    if (next_step == n_steps) {
      next_p = p + n_warps;
      next_step = 0;
      has_next = pair_ptrs<kGlu>(b, next_p, nw);
    }
    QuarterRaw<kType> nraw[2][KB];
    int64_t ntk[KB];
    if (has_next) load_step<kType, KB>(nraw, ntk, nw, next_step * 8 * KB, nb, q, g);
    step_terms<kType, N, KB>(raw, tk, step, nb, acts, lane, acc);
    if (next_step == 0) {
      store_pair<kGlu, N>(b, p, acc, lane);
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < N; ++c) acc[r][c] = 0.0f;
    }
    if (!has_next) break;
#pragma unroll
    for (int kb = 0; kb < KB; ++kb) {
      tk[kb] = ntk[kb];
#pragma unroll
      for (int r = 0; r < 2; ++r) raw[r][kb] = nraw[r][kb];
    }
    w[0] = nw[0];
    w[1] = nw[1];
    p = next_p;
    step = next_step;
  }
}

template <TensorType kType, int N, bool kGlu, int KB>
bool launch_n(const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream, const char* site) {
  const int64_t pairs = kGlu ? b.seg[0].m : (batch_rows(b) + 1) / 2;
  const auto blocks = static_cast<unsigned>((pairs + kMmvqWarps - 1) / kMmvqWarps);  // one warp per pair
  if constexpr (N == 1) {  // short rows: the kMmvqHighOccBlocks variant
    if (mmvq_high_occupancy(b.k)) {
      launch_pdl(mmvq_kquant_direct_kernel<kType, N, kGlu, KB, kMmvqHighOccBlocks>, dim3(blocks),
                 dim3(kMmvqWarps * 32), 0, stream, b, acts);
      return MINFER_LAUNCH_CHECK(site);
    }
  }
  launch_pdl(mmvq_kquant_direct_kernel<kType, N, kGlu, KB, (N <= 2 ? 3 : 2)>, dim3(blocks), dim3(kMmvqWarps * 32), 0,
             stream, b, acts);
  return MINFER_LAUNCH_CHECK(site);
}

template <TensorType kType, bool kGlu, int KB>
bool launch_type(const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream, const char* const* sites) {
  switch (b.n) {
#define MINFER_CASE(N) \
  case N:              \
    return launch_n<kType, N, kGlu, KB>(b, acts, stream, sites[N - 1]);
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

template <TensorType kType>
bool launch_either(const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream, const char* const* sites,
                   const char* const* glu_sites, int kb) {
  // Default one half per step: 7B Q4_K_M tg128 356 t/s against 325 with two halves where they
  // leave no more slots idle (docs/perf/2026-11-30-mmvq-direct.md).
  const bool two = kb == 2;
  if (b.glu)
    return two ? launch_type<kType, true, 2>(b, acts, stream, glu_sites)
               : launch_type<kType, true, 1>(b, acts, stream, glu_sites);
  return two ? launch_type<kType, false, 2>(b, acts, stream, sites)
             : launch_type<kType, false, 1>(b, acts, stream, sites);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

bool launch_mmvq_kquant_direct(TensorType type, const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream,
                               int kb, bool* launched) {
  static const char* const kQ4_K[8] = MINFER_MMVQ_SITES("direct_q4_K");
  static const char* const kQ5_K[8] = MINFER_MMVQ_SITES("direct_q5_K");
  static const char* const kQ4_Kg[8] = MINFER_MMVQ_SITES("direct_glu_q4_K");
  static const char* const kQ5_Kg[8] = MINFER_MMVQ_SITES("direct_glu_q5_K");
  *launched = false;
  if (type != TensorType::Q4_K && type != TensorType::Q5_K) return true;
  if (b.n_seg < 1 || b.n_seg > kMmvqMaxSegments || (b.glu && (b.n_seg != 2 || b.seg[1].m != b.seg[0].m)))
    return true;
  for (int s = 0; s < b.n_seg; ++s)
    if (!aligned16(b.seg[s].w)) return true;
  if (!aligned16(acts.qs) || (reinterpret_cast<uintptr_t>(acts.bsums) & 7u) != 0) return true;
  *launched = true;
  return type == TensorType::Q4_K ? launch_either<TensorType::Q4_K>(b, acts, stream, kQ4_K, kQ4_Kg, kb)
                                  : launch_either<TensorType::Q5_K>(b, acts, stream, kQ5_K, kQ5_Kg, kb);
}

}  // namespace minfer::cuda::mm
