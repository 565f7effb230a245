// MMVQ for the legacy 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) x Q8 activations,
// n = 1..8 token columns, bit-identical to the CPU reference (design: mmvq.cuh).
//
// One warp per weight row (the gate and up rows together for the SwiGLU launch). The row is
// streamed in chunks of CB blocks: each lane loads up to U
// aligned 16-byte words of the chunk into registers, the warp writes them to its shared-memory
// stage, and lane l then unpacks blocks l, l + 32, ... of the chunk from there. The next
// chunk's loads are issued before the current chunk is computed. CB is a multiple of 32, so
// lane l sees exactly the blocks t = l (mod 32) in increasing t: lane l *is* virtual lane l of
// the accumulation contract and no term moves between lanes until the final fold.
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmvq.cuh"
#include "cuda/kernels/mmvq_batch.cuh"
#include "cuda/kernels/mmvq_blocks.cuh"
#include "cuda/kernels/mmvq_common.cuh"

namespace minfer::cuda::mm {
namespace {

/// Words of one row's shared-memory stage (a chunk at any 2-byte alignment plus over-read).
template <TensorType kType>
inline constexpr int kStageWords = 32 * Legacy<kType>::U + 1;

/// The dot products of R weight rows (row rows[r] of the tensor of m rows at w[r]) with the N
/// activation columns; the results are in lane 0 of acc[r] (the contract's fold). The R rows are
/// streamed together (their chunks' loads are in flight at the same time, each row in its own
/// stage of kStageWords words at stage + r * kStageWords); each row's arithmetic is the one-row
/// arithmetic. Called by the whole warp.
template <TensorType kType, int N, int R>
__device__ __forceinline__ void legacy_rows_dot(const uint8_t* const (&w)[R], const int64_t (&rows)[R], int64_t m,
                                                int64_t nb, int64_t row_bytes, const Q8View& acts, uint4* stage,
                                                int lane, float (&acc)[R][N]) {
  using T = Legacy<kType>;
  uint64_t lo[R], hi[R], row_start[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    lo[r] = reinterpret_cast<uint64_t>(w[r]);
    hi[r] = lo[r] + static_cast<uint64_t>(m) * static_cast<uint64_t>(row_bytes);
    row_start[r] = lo[r] + static_cast<uint64_t>(rows[r]) * static_cast<uint64_t>(row_bytes);
#pragma unroll
    for (int c = 0; c < N; ++c) acc[r][c] = 0.0f;
  }

  const int64_t n_chunks = (nb + T::CB - 1) / T::CB;
  StageRegs<T::U> regs[R];
  StageGeom next[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    next[r] = stage_geom(row_start[r], (nb < T::CB ? nb : T::CB) * T::kBytes);
    regs[r].load(next[r], lane, lo[r], hi[r]);
  }
  for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
    StageGeom cur[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      cur[r] = next[r];
      regs[r].store(stage + r * kStageWords<kType>, cur[r], lane);
    }
    __syncwarp();
    const int64_t b0 = chunk * T::CB;
    if (chunk + 1 < n_chunks) {  // issue the next chunk's loads before computing this one
      const int64_t b1 = b0 + T::CB;
      const int64_t cnt = nb - b1 < T::CB ? nb - b1 : T::CB;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        next[r] = stage_geom(row_start[r] + static_cast<uint64_t>(b1 * T::kBytes), cnt * T::kBytes);
        regs[r].load(next[r], lane, lo[r], hi[r]);
      }
    }
    const int n_blk = static_cast<int>(nb - b0 < T::CB ? nb - b0 : T::CB);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint8_t* sb = reinterpret_cast<const uint8_t*>(stage + r * kStageWords<kType>);
#pragma unroll
      for (int it = 0; it < T::CB / 32; ++it) {
        const int i = it * 32 + lane;
        if (i < n_blk) {
          const LegacyW wb = T::decode(sb, cur[r].offset + i * T::kBytes);
          const int64_t t = b0 + i;
#pragma unroll
          for (int c = 0; c < N; ++c) acc[r][c] = __fadd_rn(acc[r][c], legacy_term<kType>(wb, acts, c, t));
        }
      }
    }
    __syncwarp();  // the stages are rewritten by the next chunk
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < N; ++c) acc[r][c] = fold_lanes(acc[r][c]);
}

// One warp per grid row (mmvq_batch.cuh: the row's segment; with glu the gate and up rows, which
// are streamed together).
template <TensorType kType, int N, bool kGlu, int kMinBlocks>
__global__ void __launch_bounds__(kMmvqWarps * 32, kMinBlocks)
    mmvq_legacy_kernel(const MmvqBatch b, const Q8View acts) {
  pdl_prologue();
  using T = Legacy<kType>;
  constexpr int R = kGlu ? 2 : 1;
  static_assert(T::CB % 32 == 0, "lane l must own the blocks t = l mod 32");
  static_assert(((14 + T::CB * T::kBytes + 15) >> 4) + 2 <= kStageWords<kType>,
                "a chunk at any 2-byte alignment (plus 20 bytes of over-read) fits the stage");
  __shared__ uint4 stage_all[kMmvqWarps][R * kStageWords<kType>];

  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int64_t nb = b.k / 32;
  float acc[R][N];
  SegRow s;
  if (!find_segment(b, static_cast<int64_t>(blockIdx.x) * kMmvqWarps + warp, &s))
    return;  // the whole warp leaves; no block-wide barrier follows
  if constexpr (kGlu) {
    const uint8_t* const w[2] = {s.w, static_cast<const uint8_t*>(b.seg[1].w)};
    const int64_t rows[2] = {s.row, s.row};
    legacy_rows_dot<kType, N, 2>(w, rows, s.m, nb, b.row_bytes, acts, stage_all[warp], lane, acc);
    swiglu_in_place(acc[0], acc[1]);
  } else {
    const uint8_t* const w[1] = {s.w};
    const int64_t rows[1] = {s.row};
    legacy_rows_dot<kType, N, 1>(w, rows, s.m, nb, b.row_bytes, acts, stage_all[warp], lane, acc);
  }
  if (lane == 0) store_row(s, acc[0]);
}

// SwiGLU launches of one token column over short rows take the kMmvqHighOccBlocks variant.
template <TensorType kType, int N, bool kGlu>
void launch_n(const MmvqBatch& b, const Q8View& acts, dim3 grid, dim3 block, cudaStream_t stream) {
  if constexpr (kGlu && N == 1) {
    if (mmvq_high_occupancy(b.k)) {
      launch_pdl(mmvq_legacy_kernel<kType, N, kGlu, kMmvqHighOccBlocks>, grid, block, 0, stream, b, acts);
      return;
    }
  }
  launch_pdl(mmvq_legacy_kernel<kType, N, kGlu, kGlu ? 4 : (N <= 4 ? 8 : 6)>, grid, block, 0, stream, b, acts);
}

template <TensorType kType, bool kGlu>
bool launch_type(const MmvqBatch& b, const Q8View& acts, cudaStream_t stream, const char* const* sites) {
  const dim3 block(kMmvqWarps * 32);
  const dim3 grid(static_cast<unsigned>((batch_rows(b) + kMmvqWarps - 1) / kMmvqWarps));
  switch (b.n) {
#define MINFER_CASE(N)                                   \
  case N:                                                \
    launch_n<kType, N, kGlu>(b, acts, grid, block, stream); \
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
bool launch_either(const MmvqBatch& b, const Q8View& acts, cudaStream_t stream, const char* const* sites,
                   const char* const* glu_sites) {
  return b.glu ? launch_type<kType, true>(b, acts, stream, glu_sites)
               : launch_type<kType, false>(b, acts, stream, sites);
}

}  // namespace

bool launch_mmvq_legacy(TensorType type, const MmvqBatch& b, const Q8View& acts, cudaStream_t stream) {
  static const char* const kQ4_0[8] = MINFER_MMVQ_SITES("q4_0");
  static const char* const kQ4_1[8] = MINFER_MMVQ_SITES("q4_1");
  static const char* const kQ5_0[8] = MINFER_MMVQ_SITES("q5_0");
  static const char* const kQ5_1[8] = MINFER_MMVQ_SITES("q5_1");
  static const char* const kQ8_0[8] = MINFER_MMVQ_SITES("q8_0");
  static const char* const kQ4_0g[8] = MINFER_MMVQ_SITES("glu_q4_0");
  static const char* const kQ4_1g[8] = MINFER_MMVQ_SITES("glu_q4_1");
  static const char* const kQ5_0g[8] = MINFER_MMVQ_SITES("glu_q5_0");
  static const char* const kQ5_1g[8] = MINFER_MMVQ_SITES("glu_q5_1");
  static const char* const kQ8_0g[8] = MINFER_MMVQ_SITES("glu_q8_0");
  if (b.n_seg < 1 || b.n_seg > kMmvqMaxSegments || (b.glu && (b.n_seg != 2 || b.seg[1].m != b.seg[0].m)))
    return false;
  switch (type) {
    case TensorType::Q4_0: return launch_either<TensorType::Q4_0>(b, acts, stream, kQ4_0, kQ4_0g);
    case TensorType::Q4_1: return launch_either<TensorType::Q4_1>(b, acts, stream, kQ4_1, kQ4_1g);
    case TensorType::Q5_0: return launch_either<TensorType::Q5_0>(b, acts, stream, kQ5_0, kQ5_0g);
    case TensorType::Q5_1: return launch_either<TensorType::Q5_1>(b, acts, stream, kQ5_1, kQ5_1g);
    case TensorType::Q8_0: return launch_either<TensorType::Q8_0>(b, acts, stream, kQ8_0, kQ8_0g);
    default: return false;
  }
}

}  // namespace minfer::cuda::mm
