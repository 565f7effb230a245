// MMVQ for the K-quants (Q4_K, Q5_K, Q6_K) x Q8K activations, n = 1..8 token columns,
// bit-identical to the CPU reference (design: mmvq.cuh).
//
// One warp per weight row, staged through shared memory in chunks of CB super-blocks exactly as
// in mmvq_legacy.cu. A super-block (256 elements) is shared by 8 lanes: lanes 8g .. 8g+7 work
// on super-block 4 it + g of the chunk, each on 32 elements (mmvq_blocks.cuh KQuant::decode).
// Their integer shares are added with three xor-shuffles (exact), every lane of the group then
// forms the same f32 term, and the term of super-block t is shuffled to lane t % 32, which adds
// it to its running sum: the lanes are the contract's virtual lanes, in increasing t.
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmvq.cuh"
#include "cuda/kernels/mmvq_batch.cuh"
#include "cuda/kernels/mmvq_blocks.cuh"
#include "cuda/kernels/mmvq_common.cuh"

namespace minfer::cuda::mm {
namespace {

/// Adds the terms of the super-blocks b0 .. b0 + CB - 1 (< nb) of one row, staged at byte
/// `offset` of sb, to the virtual lanes' running sums acc (lane t % 32 takes super-block t).
/// Called by the whole warp.
template <TensorType kType, int N>
__device__ __forceinline__ void kquant_chunk_terms(const uint8_t* sb, int offset, int64_t b0, int64_t nb,
                                                   const Q8KView& acts, int lane, float (&acc)[N]) {
  using T = KQuant<kType>;
  const int g = lane >> 3, part = lane & 7;
#pragma unroll
  for (int it = 0; it < T::CB / 4; ++it) {
    const int64_t t_first = b0 + 4 * it;  // warp-uniform
    if (t_first >= nb) break;
    const int i = 4 * it + g;
    // A group past the row's end decodes stale stage bytes (inside the stage) and reads the
    // row's last activation block; its term is never taken.
    const int64_t t = t_first + g < nb ? t_first + g : nb - 1;
    const KPartW wp = T::decode(sb, offset + i * T::kBytes, part);
    // Lane `lane` takes the term of super-block t_first + sel when that is = lane (mod 32).
    const int sel = static_cast<int>((lane - t_first) & 31);
    const bool take = sel < 4 && t_first + sel < nb;
    const int src = (sel & 3) * 8;
#pragma unroll
    for (int c = 0; c < N; ++c) {
      int2 s = kquant_partial<kType>(wp, acts, c, t, part);
#pragma unroll
      for (int o = 1; o < 8; o <<= 1) {
        s.x += __shfl_xor_sync(kFullMask, s.x, o);
        if constexpr (T::kHasMin) s.y += __shfl_xor_sync(kFullMask, s.y, o);
      }
      const float da = __ldg(acts.d + c * acts.nb + t);
      const float term = kquant_term<kType>(wp, da, s.x, s.y);
      const float v = __shfl_sync(kFullMask, term, src);
      if (take) acc[c] = __fadd_rn(acc[c], v);
    }
  }
}

/// The dot products of weight row `row` (of a tensor of m rows at w) with the N activation
/// columns; the result is in lane 0 of acc (the contract's fold). Called by the whole warp.
template <TensorType kType, int N>
__device__ __forceinline__ void kquant_row_dot(const uint8_t* w, int64_t m, int64_t row, int64_t nb,
                                               int64_t row_bytes, const Q8KView& acts, uint4* stage,
                                               int lane, float (&acc)[N]) {
  using T = KQuant<kType>;
  const uint8_t* sb = reinterpret_cast<const uint8_t*>(stage);

  const uint64_t lo = reinterpret_cast<uint64_t>(w);
  const uint64_t hi = lo + static_cast<uint64_t>(m) * static_cast<uint64_t>(row_bytes);
  const uint64_t row_start = lo + static_cast<uint64_t>(row) * static_cast<uint64_t>(row_bytes);

#pragma unroll
  for (int c = 0; c < N; ++c) acc[c] = 0.0f;

  const int64_t n_chunks = (nb + T::CB - 1) / T::CB;
  StageRegs<T::U> regs;
  StageGeom next = stage_geom(row_start, (nb < T::CB ? nb : T::CB) * T::kBytes);
  regs.load(next, lane, lo, hi);
  for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
    const StageGeom cur = next;
    regs.store(stage, cur, lane);
    __syncwarp();
    const int64_t b0 = chunk * T::CB;
    if (chunk + 1 < n_chunks) {  // issue the next chunk's loads before computing this one
      const int64_t b1 = b0 + T::CB;
      const int64_t cnt = nb - b1 < T::CB ? nb - b1 : T::CB;
      next = stage_geom(row_start + static_cast<uint64_t>(b1 * T::kBytes), cnt * T::kBytes);
      regs.load(next, lane, lo, hi);
    }
    kquant_chunk_terms<kType, N>(sb, cur.offset, chunk * T::CB, nb, acts, lane, acc);
    __syncwarp();  // the stage is rewritten by the next chunk
  }
#pragma unroll
  for (int c = 0; c < N; ++c) acc[c] = fold_lanes(acc[c]);
}

// One warp per grid row (mmvq_batch.cuh: the row's segment; with glu the gate and up rows).
template <TensorType kType, int N, bool kGlu>
__global__ void __launch_bounds__(kMmvqWarps * 32, 4)
    mmvq_kquant_kernel(const MmvqBatch b, const Q8KView acts) {
  pdl_prologue();
  using T = KQuant<kType>;
  static_assert(T::CB % 4 == 0, "a chunk holds whole groups of 4 super-blocks");
  static_assert(((14 + T::CB * T::kBytes + 15) >> 4) + 2 <= 32 * T::U + 1,
                "a chunk at any 2-byte alignment (plus the over-read) fits the stage");
  __shared__ uint4 stage_all[kMmvqWarps][32 * T::U + 1];

  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  SegRow s;
  if (!find_segment(b, static_cast<int64_t>(blockIdx.x) * kMmvqWarps + warp, &s))
    return;  // the whole warp leaves; no block-wide barrier follows
  const int64_t nb = b.k / 256;
  float acc[N];
  kquant_row_dot<kType, N>(s.w, s.m, s.row, nb, b.row_bytes, acts, stage_all[warp], lane, acc);
  if constexpr (kGlu) {
    float up[N];
    kquant_row_dot<kType, N>(static_cast<const uint8_t*>(b.seg[1].w), s.m, s.row, nb, b.row_bytes, acts,
                             stage_all[warp], lane, up);
    swiglu_in_place(acc, up);
  }
  if (lane == 0) store_row(s, acc);
}

template <TensorType kType, bool kGlu>
bool launch_type(const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream, const char* const* sites) {
  const dim3 block(kMmvqWarps * 32);
  const dim3 grid(static_cast<unsigned>((batch_rows(b) + kMmvqWarps - 1) / kMmvqWarps));
  switch (b.n) {
#define MINFER_CASE(N)                                                         \
  case N:                                                                      \
    launch_pdl(mmvq_kquant_kernel<kType, N, kGlu>, dim3(grid), dim3(block), 0, stream, b, acts);   \
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

template <TensorType kType>
bool launch_either(const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream, const char* const* sites,
                   const char* const* glu_sites) {
  return b.glu ? launch_type<kType, true>(b, acts, stream, glu_sites)
               : launch_type<kType, false>(b, acts, stream, sites);
}

}  // namespace

bool launch_mmvq_kquant(TensorType type, const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream) {
  static const char* const kQ4_K[8] = MINFER_MMVQ_SITES("q4_K");
  static const char* const kQ5_K[8] = MINFER_MMVQ_SITES("q5_K");
  static const char* const kQ6_K[8] = MINFER_MMVQ_SITES("q6_K");
  static const char* const kQ4_Kg[8] = MINFER_MMVQ_SITES("glu_q4_K");
  static const char* const kQ5_Kg[8] = MINFER_MMVQ_SITES("glu_q5_K");
  static const char* const kQ6_Kg[8] = MINFER_MMVQ_SITES("glu_q6_K");
  if (b.n_seg < 1 || b.n_seg > kMmvqMaxSegments || (b.glu && (b.n_seg != 2 || b.seg[1].m != b.seg[0].m)))
    return false;
  switch (type) {
    case TensorType::Q4_K: return launch_either<TensorType::Q4_K>(b, acts, stream, kQ4_K, kQ4_Kg);
    case TensorType::Q5_K: return launch_either<TensorType::Q5_K>(b, acts, stream, kQ5_K, kQ5_Kg);
    case TensorType::Q6_K: return launch_either<TensorType::Q6_K>(b, acts, stream, kQ6_K, kQ6_Kg);
    default: return false;
  }
}

}  // namespace minfer::cuda::mm
