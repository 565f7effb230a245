// MMVQ for the K-quants, one lane per super-block (design: mmvq_kq_lane.cuh), bit-identical to
// the CPU reference for n = 1..8 token columns.
//
// A thread block of W warps (W = 4, or 2 / 1 when the shared memory would pass 48 KiB or the
// grid would have fewer than kMinBlocks blocks) holds W * 32 / S rows. Per chunk of S
// super-blocks (nb <= 16: the whole row in one chunk):
//   1. every segment has its chunk's weight words in registers (loaded one chunk ahead);
//   2. the block stages the chunk's activations (all columns) and each segment stores its
//      weight words into its stage; __syncthreads;
//   3. the next chunk's weight loads are issued, then each lane forms the terms of its
//      super-block from shared memory and adds them to its sums; __syncthreads before step 2
//      of the next chunk overwrites the stages.
// With glu the gate and up rows of a segment are staged and computed together (their
// activations are read once). Every warp of the block runs every chunk (the barriers are in
// uniform control flow); a segment past the last row loads nothing and stores nothing.
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmvq.cuh"
#include "cuda/kernels/mmvq_batch.cuh"
#include "cuda/kernels/mmvq_kq_lane.cuh"

namespace minfer::cuda::mm {
namespace {

constexpr int kMaxWarps = 4;
// Small matrices (7B attn_k/v: 512 rows, 2 rows per warp) would fill only a fraction of the
// H200's 132 SMs with 4-warp blocks: fewer warps per block until the grid has this many blocks.
constexpr int64_t kMinBlocks = 264;
constexpr size_t kSmemLimit = 48 * 1024;  // the default dynamic shared memory limit

/// Dynamic shared memory of one block: the activation chunk, then for each warp and row set
/// (gate, up) the 32 / S segment stages.
size_t smem_bytes(int type_bytes, int n, int64_t nb, int s_log2, int warps, int p) {
  const int cbk = nb < 32 ? static_cast<int>(nb) : 32;
  return static_cast<size_t>(kq_act_bytes(n, cbk)) +
         static_cast<size_t>(warps) * p * (32 >> s_log2) * kq_group_words(type_bytes, 1 << s_log2) * 16;
}

template <TensorType kType, int N, bool kGlu>
__global__ void __launch_bounds__(kMaxWarps * 32)
    mmvq_kq_lane_kernel(const MmvqBatch b, const Q8KView acts, int s_log2) {
  using T = KQuant<kType>;
  constexpr int P = kGlu ? 2 : 1;
  constexpr int U = kq_lane_regs(T::kBytes);
  extern __shared__ uint4 smem[];

  const int warps = static_cast<int>(blockDim.x >> 5);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int S = 1 << s_log2, segs = 32 >> s_log2;
  const int group = lane >> s_log2, i = lane & (S - 1);
  const int64_t nb = b.k / 256;
  const int cbk = nb < 32 ? static_cast<int>(nb) : 32;
  const int n_chunks = static_cast<int>((nb + S - 1) / S);

  uint8_t* act = reinterpret_cast<uint8_t*>(smem);
  const int gw = kq_group_words(T::kBytes, S);
  uint4* stage[P];
#pragma unroll
  for (int p = 0; p < P; ++p)
    stage[p] = smem + (kq_act_bytes(N, cbk) >> 4) + ((warp * P + p) * segs + group) * gw;

  SegRow s = seg_row(b, 0, 0);
  const bool valid = find_segment(b, (static_cast<int64_t>(blockIdx.x) * warps + warp) * segs + group, &s);
  uint64_t lo[P], hi[P], row_start[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    lo[p] = reinterpret_cast<uint64_t>(p == 0 ? s.w : static_cast<const uint8_t*>(b.seg[1].w));
    hi[p] = lo[p] + static_cast<uint64_t>(s.m) * static_cast<uint64_t>(b.row_bytes);
    row_start[p] = lo[p] + static_cast<uint64_t>(s.row) * static_cast<uint64_t>(b.row_bytes);
  }
  auto chunk_geom = [&](int p, int c) {
    const int64_t t0 = static_cast<int64_t>(c) * S;
    const int64_t cnt = nb - t0 < S ? nb - t0 : S;
    StageGeom g = stage_geom(row_start[p] + static_cast<uint64_t>(t0 * T::kBytes), cnt * T::kBytes);
    if (!valid) g.words = 0;
    return g;
  };
  uint4 regs[P][U];
  StageGeom geo[P];
  auto load = [&](int p) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int w = i + S * u;
      if (w < geo[p].words) regs[p][u] = load_word_clamped(geo[p].base + 16 * static_cast<uint64_t>(w), lo[p], hi[p]);
    }
  };
#pragma unroll
  for (int p = 0; p < P; ++p) {
    geo[p] = chunk_geom(p, 0);
    load(p);
  }

  float acc[P][N];
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int c = 0; c < N; ++c) acc[p][c] = 0.0f;

  for (int ch = 0; ch < n_chunks; ++ch) {
    const int64_t t0 = static_cast<int64_t>(ch) * S;
    const int cnt = static_cast<int>(nb - t0 < S ? nb - t0 : S);
    if (ch > 0) __syncthreads();  // every lane is done with the previous chunk's stages
    const int units = kq_act_units(N, cbk);
    for (int u = static_cast<int>(threadIdx.x); u < units; u += static_cast<int>(blockDim.x))
      kq_stage_act_unit(acts, t0, N, cbk, cnt, u, act);
    StageGeom cur[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      cur[p] = geo[p];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int w = i + S * u;
        if (w < cur[p].words) stage[p][w] = regs[p][u];
      }
    }
    __syncthreads();
    if (ch + 1 < n_chunks) {  // the next chunk's weights are in flight during this one's math
#pragma unroll
      for (int p = 0; p < P; ++p) {
        geo[p] = chunk_geom(p, ch + 1);
        load(p);
      }
    }
    if (valid && i < cnt) {
      const uint8_t* sb[P];
      int off[P];
#pragma unroll
      for (int p = 0; p < P; ++p) {
        sb[p] = reinterpret_cast<const uint8_t*>(stage[p]);
        off[p] = cur[p].offset + i * T::kBytes;
      }
      float term[P][N];
      kq_lane_terms<kType, N, P>(sb, off, act, cbk, i, term);
#pragma unroll
      for (int p = 0; p < P; ++p)
#pragma unroll
        for (int c = 0; c < N; ++c) acc[p][c] = __fadd_rn(acc[p][c], term[p][c]);
    }
  }

  // The contract's fold: w = 16 .. S add the +0 of virtual lanes >= S (one add, see the
  // header), then w = S/2 .. 1 inside the segment (all lanes take part: uniform control flow).
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int c = 0; c < N; ++c) {
      float v = acc[p][c];
      if (S < 32) v = __fadd_rn(v, 0.0f);
      for (int w = S >> 1; w >= 1; w >>= 1) v = __fadd_rn(v, __shfl_down_sync(kFullMask, v, w, S));
      acc[p][c] = v;
    }
  if constexpr (kGlu) swiglu_in_place(acc[0], acc[1]);
  if (valid && i == 0) store_row(s, acc[0]);
}

#define MINFER_KQ_LANE_SITES(name)                                                                  \
  {                                                                                                 \
    "mmvq_lane_" name "_n1", "mmvq_lane_" name "_n2", "mmvq_lane_" name "_n3", "mmvq_lane_" name "_n4", \
        "mmvq_lane_" name "_n5", "mmvq_lane_" name "_n6", "mmvq_lane_" name "_n7",                   \
        "mmvq_lane_" name "_n8"                                                                     \
  }

/// Warps per block for this shape (0: the shared memory does not fit in 48 KiB).
int pick_warps(int type_bytes, const MmvqBatch& b) {
  const int64_t nb = b.k / 256;
  const int sl = kq_segment_log2(nb);
  for (int w = kMaxWarps; w >= 1; w >>= 1)
    if (smem_bytes(type_bytes, b.n, nb, sl, w, b.glu ? 2 : 1) <= kSmemLimit) return w;
  return 0;
}

template <TensorType kType, bool kGlu>
bool launch_lane(const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream, const char* const* sites) {
  using T = KQuant<kType>;
  const int64_t nb = b.k / 256;
  const int sl = kq_segment_log2(nb);
  const int64_t rows = batch_rows(b), segs = 32 >> sl;
  int warps = pick_warps(T::kBytes, b);
  while (warps > 1 && (rows + warps * segs - 1) / (warps * segs) < kMinBlocks) warps >>= 1;
  const int64_t rows_per_block = warps * segs;
  const dim3 grid(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block));
  const dim3 block(static_cast<unsigned>(warps * 32));
  const size_t smem = smem_bytes(T::kBytes, b.n, nb, sl, warps, kGlu ? 2 : 1);
  switch (b.n) {
#define MINFER_CASE(N)                                                                 \
  case N:                                                                              \
    mmvq_kq_lane_kernel<kType, N, kGlu><<<grid, block, smem, stream>>>(b, acts, sl);   \
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

int type_bytes(TensorType type) {
  switch (type) {
    case TensorType::Q4_K: return KQuant<TensorType::Q4_K>::kBytes;
    case TensorType::Q5_K: return KQuant<TensorType::Q5_K>::kBytes;
    case TensorType::Q6_K: return KQuant<TensorType::Q6_K>::kBytes;
    default: return 0;
  }
}

}  // namespace

bool mmvq_kq_lane_takes(TensorType type, const MmvqBatch& b) {
  const int bytes = type_bytes(type);
  return bytes != 0 && b.n >= 1 && b.n <= 8 && b.k >= 256 && b.k % 256 == 0 && pick_warps(bytes, b) != 0;
}

bool launch_mmvq_kq_lane(TensorType type, const MmvqBatch& b, const Q8KView& acts, cudaStream_t stream) {
  static const char* const kQ4_K[8] = MINFER_KQ_LANE_SITES("q4_K");
  static const char* const kQ5_K[8] = MINFER_KQ_LANE_SITES("q5_K");
  static const char* const kQ6_K[8] = MINFER_KQ_LANE_SITES("q6_K");
  static const char* const kQ4_Kg[8] = MINFER_KQ_LANE_SITES("glu_q4_K");
  static const char* const kQ5_Kg[8] = MINFER_KQ_LANE_SITES("glu_q5_K");
  static const char* const kQ6_Kg[8] = MINFER_KQ_LANE_SITES("glu_q6_K");
  switch (type) {
    case TensorType::Q4_K:
      return b.glu ? launch_lane<TensorType::Q4_K, true>(b, acts, stream, kQ4_Kg)
                   : launch_lane<TensorType::Q4_K, false>(b, acts, stream, kQ4_K);
    case TensorType::Q5_K:
      return b.glu ? launch_lane<TensorType::Q5_K, true>(b, acts, stream, kQ5_Kg)
                   : launch_lane<TensorType::Q5_K, false>(b, acts, stream, kQ5_K);
    case TensorType::Q6_K:
      return b.glu ? launch_lane<TensorType::Q6_K, true>(b, acts, stream, kQ6_Kg)
                   : launch_lane<TensorType::Q6_K, false>(b, acts, stream, kQ6_K);
    default: return false;
  }
}

}  // namespace minfer::cuda::mm
