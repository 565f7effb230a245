// Decode MMVQ for the K-quants (Q4_K, Q5_K, Q6_K x Q8K, one token column) with one super-block
// per lane (design: mmvq_lane.cuh), bit-identical to the CPU reference.
//
// Lanes and rows. Lane t % 32 computes super-block t of a row, which is the virtual lane the
// accumulation contract (quant_ref.h) adds that term to, so lanes exchange nothing until the
// final fold. A row of nb <= 8 (16) super-blocks takes 8 (16) lanes: one warp computes 4 (2) rows
// at once, and virtual lanes 8..31 (16..31), which hold no term, stay +0.0f; the fold's steps over
// them reduce to one fadd(v, +0.0f). Longer rows take all 32 lanes, lane l walking t = l, l + 32, ...
// in increasing order. With glu (SwiGLU) the rows of a warp are (gate j, up j) pairs.
//
// Memory. A "chunk" is what one pass of the warp's lanes consumes: lanes-per-row super-blocks of
// each of its rows. Each warp streams its chunks through a private ring of `stages` shared-memory
// stages, filled with 16-byte cp.async copies of the aligned words around each row piece (no
// registers held while the bytes are in flight: at the default 2 stages one chunk is in flight
// while the warp computes the other). Weights do not depend on the previous kernel, so the first chunks are
// requested before griddepcontrol.wait: under PDL they stream while that kernel finishes. The
// activations (qs, bsums, d) are copied once per block into shared memory, in the kLaneActStride
// layout. (Keeping each lane's activations in registers instead, 128 registers a thread, made a
// 7B Q4_K_M token slower: the kernel then fills the register file and the next kernels of the
// layer can no longer start beside it under PDL; docs/perf/2026-12-01-mmvq-lane.md.)
//
// Grid. Blocks of up to 16 warps for rows of more than 16 super-blocks and up to 8 otherwise: the
// ring depth is kept and the block narrowed until the rings and the activations fit one block's
// shared memory (the 7B ffn_down at 2 stages: 15 warps for Q6_K, 16 for Q4_K),
// and at most as many warps as
// fit on the GPU at once: with g = ceil(row groups / warps that fit), warp w takes the contiguous
// run of groups [w g, w g + g), so only the last warp's run is shorter. Large blocks copy the
// activations once for more warps, which leaves more shared memory to the rings: the 7B ffn_down
// (74 super-blocks a row) went from 24.8 to 20.6 us (Q6_K) when its blocks grew from 4 to 15 warps.
// Splitting the groups as [w n / W, (w + 1) n / W) instead, which launches every warp that fits,
// was slower end to end (docs/perf/2026-12-01-lane-blocks.md).
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmvq.cuh"
#include "cuda/kernels/mmvq_batch.cuh"
#include "cuda/kernels/mmvq_common.cuh"
#include "cuda/kernels/mmvq_lane.cuh"
#include "cuda/kernels/ptx.cuh"
#include "cuda/kernels/quantize_blocks.cuh"
#include "cuda/kernels/smem_optin.cuh"

namespace minfer::cuda::mm {
namespace {

constexpr int kMaxWarps = 16;  // warps per block at most (the launcher picks 1..16)

/// Chunk geometry of type kType with kLpr lanes per row.
template <TensorType kT, int kLpr>
struct LaneGeom {
  static constexpr TensorType kType = kT;
  static constexpr int kBytes = kLaneBlockBytes<kT>;
  static constexpr int kRows = 32 / kLpr;  ///< rows per chunk
  /// Bytes of one row's piece in a stage: kLpr blocks, the start's offset in its 16-byte word
  /// (< 16) and slack for the Q6_K reads up to 2 bytes past a block, rounded up to 16.
  static constexpr int kPiece = (kLpr * kBytes + 16 + 15) / 16 * 16;
  static constexpr int kStage = kRows * kPiece;
};

/// Two weight types in one grid (the q/k/v projections of a K-quant mix, e.g. Q4_K q and k with a
/// Q6_K v): the segments of the first type come first and fill row groups [0, groups_a) (their
/// rows_a rows, row_bytes of the batch); the rows of the other segments (row_bytes_b) start a
/// new group at groups_a, so every group has one type. One type: groups_a = all groups.
struct LaneMix {
  int64_t groups_a;
  int64_t rows_a;
  int64_t rows_total;
  int64_t row_bytes_b;
};

/// Row slot j (0 .. kRows - 1) of row group g: its weights' first byte, the end of its tensor, and
/// the segment row its output goes to (with glu, the gate segment's). False past the last row.
template <int kRows, bool kGlu, bool kMixed>
__device__ __forceinline__ bool slot_row(const MmvqBatch& b, const LaneMix& mx, int64_t g, int j, const uint8_t** w,
                                         const uint8_t** end, SegRow* out) {
  if constexpr (kGlu) {
    const int64_t row = g * (kRows / 2) + j / 2;
    if (row >= b.seg[0].m) return false;
    *out = seg_row(b, 0, row);
    const auto* base = static_cast<const uint8_t*>((j & 1) ? b.seg[1].w : b.seg[0].w);
    *w = base + row * b.row_bytes;
    *end = base + b.seg[0].m * b.row_bytes;
    return true;
  } else if constexpr (!kMixed) {
    if (!find_segment(b, g * kRows + j, out)) return false;
    *w = out->w + out->row * b.row_bytes;
    *end = out->w + out->m * b.row_bytes;
    return true;
  } else {
    int64_t r;
    bool second;
    if (!lane_mixed_row(mx.groups_a, mx.rows_a, mx.rows_total, kRows, g, j, &r, &second)) return false;
    if (!find_segment(b, r, out)) return false;
    const int64_t rb = second ? mx.row_bytes_b : b.row_bytes;
    *w = out->w + out->row * rb;
    *end = out->w + out->m * rb;
    return true;
  }
}

/// Waits for this thread's copies of all but the newest stages - 1 committed groups.
__device__ __forceinline__ void wait_chunk(int stages) {
  // cp.async.wait_group takes an immediate: one case per supported ring depth.
  if (stages == 2)
    cp_async_wait<1>();
  else if (stages == 3)
    cp_async_wait<2>();
  else
    cp_async_wait<3>();
}

/// Position of a chunk in a warp's walk: row group g, round r (kLpr = 32: super-blocks 32 r ..),
/// ring stage s. Advanced without divisions.
struct ChunkPos {
  int64_t g;
  int r;
  int s;
  __device__ __forceinline__ void next(int rounds, int stages, int64_t g_step) {
    if (++r == rounds) {
      r = 0;
      g += g_step;
    }
    if (++s == stages) s = 0;
  }
};

/// Warp wg asks the L2 cache for its share of the L2Ahead bytes (l2_share_bounds; one lane
/// calls). The ranges are read with constant indices: a kernel parameter indexed at run time
/// would be copied to local memory.
__device__ __forceinline__ void l2_prefetch_share(const L2Ahead& a, int64_t wg) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t lo, hi;
  l2_share_bounds(a.bytes[0], a.n > 1 ? a.bytes[1] : 0u, a.n > 2 ? a.bytes[2] : 0u, a.words_per_warp, wg, &lo, &hi);
  uint64_t base = 0;
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    if (i >= a.n) break;
    uint64_t off;
    uint32_t n;
    l2_range_piece(lo, hi, base, a.bytes[i], &off, &n);
    base += a.bytes[i];
    if (n == 0) continue;
    const auto* p = static_cast<const uint8_t*>(a.p[i]) + off;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
  }
#else
  (void)a, (void)wg;
#endif
}

/// Bytes of one ring stage of a grid of types kType and kTypeB: the larger stage.
template <TensorType kType, TensorType kTypeB, int kLpr>
inline constexpr int kStageMax = LaneGeom<kType, kLpr>::kStage > LaneGeom<kTypeB, kLpr>::kStage
                                     ? LaneGeom<kType, kLpr>::kStage
                                     : LaneGeom<kTypeB, kLpr>::kStage;

// kRoundRobin: the round-robin deal of row groups and the L2 prefetch of `ahead` when done (a
// separate instantiation, so that the default one compiles to the contiguous-run code alone).
template <TensorType kType, TensorType kTypeB, int kLpr, bool kGlu, bool kRoundRobin>
__global__ void __launch_bounds__(kMaxWarps * 32)
    mmvq_lane_kernel(const MmvqBatch b, const Q8KView acts, const float* __restrict__ xf, int64_t n_groups,
                     int64_t groups_per_warp, int64_t n_warps, int stages, const L2Ahead ahead, const LaneMix mx) {
  using G = LaneGeom<kType, kLpr>;
  using GB = LaneGeom<kTypeB, kLpr>;
  constexpr bool kMixed = kType != kTypeB;
  static_assert(!(kMixed && kGlu), "a SwiGLU grid has one weight type");
  constexpr int kStage = kStageMax<kType, kTypeB, kLpr>;
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int bw = static_cast<int>(blockDim.x >> 5);  // warps per block
  const int nb = static_cast<int>(b.k / 256);
  const int rounds = kLpr == 32 ? (nb + 31) / 32 : 1;
  uint8_t* ring = smem + static_cast<size_t>(warp) * stages * kStage;
  uint8_t* act = smem + static_cast<size_t>(bw) * stages * kStage;
  const int64_t wg = static_cast<int64_t>(blockIdx.x) * bw + warp;
  const LaneWarpRun run = lane_warp_run(kRoundRobin ? 1 : 0, wg, n_warps, n_groups, groups_per_warp);
  const int64_t g_begin = run.first, g_step = kRoundRobin ? run.step : 1;
  const int n_chunks = static_cast<int>(run.count) * rounds;

  // Issues the copies of the chunk at p (whole warp), with the geometry of the group's type.
  auto issue_as = [&](auto geom, const ChunkPos& p) {
    using GG = decltype(geom);
    const int t0 = p.r * 32;
    const int nbr = nb - t0 < kLpr ? nb - t0 : kLpr;
#pragma unroll
    for (int j = 0; j < GG::kRows; ++j) {
      const uint8_t *w, *end;
      SegRow sr;
      if (!slot_row<GG::kRows, kGlu, kMixed>(b, mx, p.g, j, &w, &end, &sr)) continue;
      const uint8_t* start = w + static_cast<int64_t>(t0) * GG::kBytes;
      const uint8_t* base = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(start) & ~uintptr_t{15});
      const int words = static_cast<int>((start - base) + nbr * GG::kBytes + 15) >> 4;
      uint8_t* dst = ring + p.s * kStage + j * GG::kPiece;
      for (int i = lane; i < words; i += 32) {
        const uint8_t* src = base + 16 * i;
        const int64_t rem = end - src;
        cp_async16(dst + 16 * i, src, rem >= 16 ? 16 : static_cast<int>(rem));
      }
    }
  };
  auto issue = [&](const ChunkPos& p) {
    if constexpr (kMixed) {
      if (p.g >= mx.groups_a) {
        issue_as(GB{}, p);
        return;
      }
    }
    issue_as(G{}, p);
  };

  // Chunks 0 .. stages - 2 before waiting on the previous kernel: the weights are constant.
  ChunkPos ip{g_begin, 0, 0};
  int issued = 0;
  for (int s = 0; s + 1 < stages; ++s) {
    if (issued < n_chunks) {
      issue(ip);
      ip.next(rounds, stages, g_step);
      ++issued;
    }
    cp_async_commit();
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const int j = lane / kLpr, h = lane % kLpr;
  if (xf != nullptr) {
    // f32 activations: each block quantizes them itself (quantize_q8k_values, the bits the
    // quantize_activations launch would write), warp w taking super-blocks w, w + bw, ...; the
    // loads of up to kPre super-blocks are in flight together.
    constexpr int kPre = 4;
    for (int t0 = warp; t0 < nb; t0 += bw * kPre) {
      float v[kPre][8];
#pragma unroll
      for (int p = 0; p < kPre; ++p) {
        const int t = t0 + p * bw;
        if (t < nb) {
          const float4* src = reinterpret_cast<const float4*>(xf + static_cast<int64_t>(t) * 256 + lane * 8);
          const float4 lo = src[0], hi = src[1];
          v[p][0] = lo.x, v[p][1] = lo.y, v[p][2] = lo.z, v[p][3] = lo.w;
          v[p][4] = hi.x, v[p][5] = hi.y, v[p][6] = hi.z, v[p][7] = hi.w;
        }
      }
#pragma unroll
      for (int p = 0; p < kPre; ++p) {
        const int t = t0 + p * bw;
        if (t < nb) {
          uint8_t* dst = act + t * kLaneActStride;
          quantize_q8k_values(v[p], lane, reinterpret_cast<int8_t*>(dst),
                              reinterpret_cast<int16_t*>(dst + kLaneActBsums), reinterpret_cast<float*>(dst + kLaneActD));
        }
      }
    }
  } else {
    // The quantized activations: 16 qs words, 2 bsums words and d per super-block, copied once
    // per block.
    for (int i = static_cast<int>(threadIdx.x); i < nb * 19; i += bw * 32) {
      const int t = i / 19, part = i - 19 * t;
      uint8_t* dst = act + t * kLaneActStride + 16 * part;
      if (part < 16)
        cp_async16(dst, acts.qs + static_cast<int64_t>(t) * 256 + 16 * part, 16);
      else if (part < 18)
        cp_async16(dst, reinterpret_cast<const uint8_t*>(acts.bsums) + static_cast<int64_t>(t) * 32 + 16 * (part - 16),
                   16);
      else
        cp_async4(dst, acts.d + t, 4);
    }
  }
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  float acc = 0.0f;
  // glu: the (gate, up) sums of finished rows wait in lane `pending` (0..31) so that silu, a
  // double-precision exp, runs on 32 rows at once instead of on one lane per row.
  float pend_g = 0.0f, pend_u = 0.0f;
  int64_t pend_row = -1;
  int pending = 0;
  auto flush = [&]() {
    if (pend_row >= 0) {
      const float o[1] = {__fmul_rn(silu_cpu(pend_g), pend_u)};
      store_row<1>(seg_row(b, 0, pend_row), o);
    }
    pend_row = -1;
    pending = 0;
  };
  ChunkPos cp{g_begin, 0, 0};
  for (int c = 0; c < n_chunks; ++c) {
    if (issued < n_chunks) {
      issue(ip);
      ip.next(rounds, stages, g_step);
      ++issued;
    }
    cp_async_commit();
    wait_chunk(stages);
    __syncwarp();
    const int t0 = cp.r * 32;
    const uint8_t *w, *end;
    SegRow sr;
    const bool valid = slot_row<G::kRows, kGlu, kMixed>(b, mx, cp.g, j, &w, &end, &sr);
    const int t = t0 + h;
    if (valid && t < nb) {
      // The term of super-block t of this lane's row from the stage, in the layout of the group's
      // type. (A lambda only where two types exist: its mere presence moved ptxas' register
      // allocation of the one-type kernels.)
      if constexpr (kMixed) {
        auto term_as = [&](auto geom) {
          using GG = decltype(geom);
          const uint8_t* start = w + static_cast<int64_t>(t0) * GG::kBytes;
          const uint8_t* ws = ring + cp.s * kStage + j * GG::kPiece + (reinterpret_cast<uintptr_t>(start) & 15u) +
                              h * GG::kBytes;
          return lane_term<GG::kType>(ws, act + t * kLaneActStride);
        };
        acc = __fadd_rn(acc, cp.g >= mx.groups_a ? term_as(GB{}) : term_as(G{}));
      } else {
        const uint8_t* start = w + static_cast<int64_t>(t0) * G::kBytes;
        const uint8_t* ws = ring + cp.s * kStage + j * G::kPiece + (reinterpret_cast<uintptr_t>(start) & 15u) +
                            h * G::kBytes;
        acc = __fadd_rn(acc, lane_term<kType>(ws, act + t * kLaneActStride));
      }
    }
    __syncwarp();  // the stage is refilled by the next iteration's issue
    if (cp.r == rounds - 1) {
      // Fold (quant_ref.h step 3): virtual lanes kLpr..31 are +0.0f.
      float v = acc;
      if (kLpr < 32) v = __fadd_rn(v, 0.0f);
#pragma unroll
      for (int wdt = kLpr / 2; wdt >= 1; wdt >>= 1) v = __fadd_rn(v, __shfl_down_sync(kFullMask, v, wdt, kLpr));
      if constexpr (kGlu) {
#pragma unroll
        for (int jj = 0; jj < G::kRows; jj += 2) {  // gate slot jj, up slot jj + 1
          const float gv = __shfl_sync(kFullMask, v, jj * kLpr), uv = __shfl_sync(kFullMask, v, (jj + 1) * kLpr);
          const int64_t row = cp.g * (G::kRows / 2) + jj / 2;
          if (lane == pending) {
            pend_g = gv;
            pend_u = uv;
            pend_row = row < b.seg[0].m ? row : -1;
          }
          if (++pending == 32) flush();
        }
      } else if (valid && h == 0) {
        const float o[1] = {v};
        store_row<1>(sr, o);
      }
      acc = 0.0f;
    }
    cp.next(rounds, stages, g_step);
  }
  if constexpr (kRoundRobin)
    if (ahead.n > 0 && lane == 0) l2_prefetch_share(ahead, wg);
  if constexpr (kGlu) flush();
}

/// Blocks of `func` with `smem` bytes of dynamic shared memory that fit on one SM (cached).
int blocks_per_sm(const void* func, size_t smem, int bw) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, size_t, int>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(func, smem, bw);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, reinterpret_cast<const void*>(func), bw * 32, smem) !=
      cudaSuccess) {
    cudaGetLastError();  // this query's own error (launch_kquant runs after the latched-error check)
    return 0;            // not cached: the next launch asks again
  }
  cache[key] = n;
  return n;
}

template <TensorType kType, TensorType kTypeB, int kLpr, bool kGlu>
bool launch_lpr(const MmvqBatch& b, int seg_b, int64_t row_bytes_b, const Q8KView& acts, const float* xf,
                cudaStream_t stream, const LaneTuning& tu, const char* site, bool* launched) {
  const int stages = tu.stages, block_warps = tu.block_warps;
  const int64_t max_warps = tu.max_warps;
  using G = LaneGeom<kType, kLpr>;
  constexpr size_t kStage = kStageMax<kType, kTypeB, kLpr>;
  // The round-robin instantiation also carries the L2 prefetch (normalized(): a prefetch implies
  // round robin, whose first wave reads the prefix the previous kernel prefetched).
  const auto func = tu.split == 1 ? mmvq_lane_kernel<kType, kTypeB, kLpr, kGlu, true>
                                  : mmvq_lane_kernel<kType, kTypeB, kLpr, kGlu, false>;
  const int64_t nb = b.k / 256;
  // Row groups: with glu kRows / 2 (gate, up) row pairs each; otherwise kRows rows, the first
  // type's segments [0, seg_b) first and the second type's from a new group on (LaneMix).
  LaneMix mx{0, 0, 0, row_bytes_b};
  int64_t n_groups = 0;
  if constexpr (kGlu) {
    n_groups = (b.seg[0].m + G::kRows / 2 - 1) / (G::kRows / 2);
    mx.groups_a = n_groups;
    mx.rows_a = mx.rows_total = b.seg[0].m;
  } else {
    for (int i = 0; i < b.n_seg; ++i) {
      if (i < seg_b) mx.rows_a += b.seg[i].m;
      mx.rows_total += b.seg[i].m;
    }
    mx.groups_a = (mx.rows_a + G::kRows - 1) / G::kRows;
    n_groups = mx.groups_a + (mx.rows_total - mx.rows_a + G::kRows - 1) / G::kRows;
  }
  // The deepest ring (from `stages` down to 2) whose shared memory was opted in and fits an SM.
  // Warps per block: by default up to 16 for long rows (their activations take up to 22 KiB per
  // block, and a wide block pays that once for all its warps) and up to 8 for the others
  // (measured: docs/perf/2026-12-01-lane-blocks.md); narrowed below until the block fits.
  const int want_bw = block_warps >= 1 ? (block_warps < kMaxWarps ? block_warps : kMaxWarps) : kLpr == 32 ? 16 : 8;
  const size_t act_bytes = static_cast<size_t>(nb) * kLaneActStride;
  const size_t smem_max = context_smem_optin_max();
  for (int s = stages; s >= 2; --s) {
    int bw = want_bw;
    while (bw > 1 && static_cast<size_t>(bw) * s * kStage + act_bytes > smem_max) --bw;
    const size_t smem = static_cast<size_t>(bw) * s * kStage + act_bytes;
    if (!smem_opted_in(reinterpret_cast<const void*>(func), smem)) continue;
    const int per_sm = blocks_per_sm(reinterpret_cast<const void*>(func), smem, bw);
    if (per_sm < 1) continue;
    int64_t fit = static_cast<int64_t>(per_sm) * context_sm_count() * bw;
    if (max_warps > 0 && fit > max_warps) fit = max_warps;
    const int64_t gpw = (n_groups + fit - 1) / fit;  // groups per warp (contiguous split)
    const int64_t warps = tu.split == 0 ? (n_groups + gpw - 1) / gpw : (n_groups < fit ? n_groups : fit);
    const auto blocks = static_cast<unsigned>((warps + bw - 1) / bw);
    L2Ahead ahead = tu.ahead;
    ahead.words_per_warp = l2_words_per_warp(ahead.bytes, ahead.n, static_cast<int64_t>(blocks) * bw);
    *launched = true;
    launch_pdl(func, dim3(blocks), dim3(bw * 32), smem, stream, b, acts, xf, n_groups, gpw, warps, s, ahead, mx);
    return MINFER_LAUNCH_CHECK(site);
  }
  return true;  // nothing fits: *launched stays false
}

template <TensorType kType, TensorType kTypeB = kType>
bool launch_type(const MmvqBatch& b, int seg_b, int64_t row_bytes_b, const Q8KView& acts, const float* xf,
                 cudaStream_t stream, const LaneTuning& tu, const char* const (&sites)[2], bool* launched) {
  const int64_t nb = b.k / 256;
  if constexpr (kType == kTypeB) {
    if (b.glu) {
      if (nb <= 8) return launch_lpr<kType, kType, 8, true>(b, seg_b, row_bytes_b, acts, xf, stream, tu, sites[1], launched);
      if (nb <= 16) return launch_lpr<kType, kType, 16, true>(b, seg_b, row_bytes_b, acts, xf, stream, tu, sites[1], launched);
      return true;  // a gate/up pair of longer rows would not fit one chunk: the direct kernels
    }
  }
  if (nb <= 8) return launch_lpr<kType, kTypeB, 8, false>(b, seg_b, row_bytes_b, acts, xf, stream, tu, sites[0], launched);
  if (nb <= 16) return launch_lpr<kType, kTypeB, 16, false>(b, seg_b, row_bytes_b, acts, xf, stream, tu, sites[0], launched);
  return launch_lpr<kType, kTypeB, 32, false>(b, seg_b, row_bytes_b, acts, xf, stream, tu, sites[0], launched);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <TensorType kType, int kLpr, bool kGlu, TensorType kTypeB = kType, bool kRoundRobin = false>
SmemOptin optin(const char* site) {
  return {site, reinterpret_cast<const void*>(&mmvq_lane_kernel<kType, kTypeB, kLpr, kGlu, kRoundRobin>), 0};
}

/// The checks both entry points share: n = 1, whole super-blocks, 1..3 segments (glu: two of
/// equal m), 16-byte aligned weights and activations. The launch normalizes the tuning.
bool lane_applies(const MmvqBatch& b, const Q8KView& acts, const float* xf) {
  if (b.n != 1 || b.k < 256 || b.k % 256 != 0 || b.n_seg < 1 || b.n_seg > kMmvqMaxSegments ||
      (b.glu && (b.n_seg != 2 || b.seg[1].m != b.seg[0].m)))
    return false;
  for (int s = 0; s < b.n_seg; ++s)
    if (!aligned16(b.seg[s].w)) return false;
  return xf != nullptr ? aligned16(xf)
                       : aligned16(acts.qs) && aligned16(acts.bsums) && (reinterpret_cast<uintptr_t>(acts.d) & 3u) == 0;
}

LaneTuning normalized(const LaneTuning& tuning) {
  // Ring depth 2 for every type: it leaves room for more warps per SM. Q6_K first
  // (docs/perf/2026-12-01-mmvq-lane.md); Q4_K/Q5_K had 3 until Qwen3-8B Q4_K_M decoded 3.5% faster
  // with 2 (7B and 1.5B within the noise or slightly faster; docs/perf/2026-12-01-lane-blocks.md).
  LaneTuning tu = tuning;
  if (tu.stages < 2 || tu.stages > 4) tu.stages = 2;
  if (tu.split != 1) tu.split = 0;
  // Prefetch ranges: only non-empty, 16-byte aligned ones whose length is a multiple of 16 (what
  // cp.async.bulk.prefetch requires); any left implies the round-robin deal.
  L2Ahead a;
  for (int i = 0; i < (tuning.ahead.n < 3 ? tuning.ahead.n : 3); ++i) {
    const void* p = tuning.ahead.p[i];
    const uint32_t n = tuning.ahead.bytes[i];
    if (p == nullptr || n == 0 || n % 16 != 0 || !aligned16(p)) continue;
    a.p[a.n] = p;
    a.bytes[a.n] = n;
    ++a.n;
  }
  tu.ahead = a;
  if (a.n > 0) tu.split = 1;
  return tu;
}

}  // namespace

bool launch_mmvq_lane(TensorType type, const MmvqBatch& b, const Q8KView& acts, const float* xf, cudaStream_t stream,
                      const LaneTuning& tuning, bool* launched) {
  static const char* const kQ4[2] = {"mmvq_lane_q4_K", "mmvq_lane_glu_q4_K"};
  static const char* const kQ5[2] = {"mmvq_lane_q5_K", "mmvq_lane_glu_q5_K"};
  static const char* const kQ6[2] = {"mmvq_lane_q6_K", "mmvq_lane_glu_q6_K"};
  *launched = false;
  if (type != TensorType::Q4_K && type != TensorType::Q5_K && type != TensorType::Q6_K) return true;
  if (!lane_applies(b, acts, xf)) return true;
  const LaneTuning tu = normalized(tuning);
  const int sb = b.n_seg;  // one type: every segment is of the first
  switch (type) {
    case TensorType::Q4_K: return launch_type<TensorType::Q4_K>(b, sb, b.row_bytes, acts, xf, stream, tu, kQ4, launched);
    case TensorType::Q5_K: return launch_type<TensorType::Q5_K>(b, sb, b.row_bytes, acts, xf, stream, tu, kQ5, launched);
    default: return launch_type<TensorType::Q6_K>(b, sb, b.row_bytes, acts, xf, stream, tu, kQ6, launched);
  }
}

bool lane_mixed_pair(TensorType type_a, TensorType type_b) {
  using T = TensorType;
  return (type_a == T::Q4_K && (type_b == T::Q5_K || type_b == T::Q6_K)) || (type_a == T::Q5_K && type_b == T::Q6_K);
}

bool launch_mmvq_lane_mixed(TensorType type_a, TensorType type_b, const MmvqBatch& b, int seg_b, int64_t row_bytes_b,
                            const Q8KView& acts, const float* xf, cudaStream_t stream, const LaneTuning& tuning,
                            bool* launched) {
  // launch_type's site pair is (plain, SwiGLU); a two-type grid is never SwiGLU.
  static const char* const kQ4Q5[2] = {"mmvq_lane_q4_K_q5_K", nullptr};
  static const char* const kQ4Q6[2] = {"mmvq_lane_q4_K_q6_K", nullptr};
  static const char* const kQ5Q6[2] = {"mmvq_lane_q5_K_q6_K", nullptr};
  *launched = false;
  if (!lane_mixed_pair(type_a, type_b) || b.glu || seg_b < 1 || seg_b >= b.n_seg || !lane_applies(b, acts, xf) ||
      row_bytes_b != static_cast<int64_t>(b.k / 256) * (type_b == TensorType::Q5_K ? 176 : 210))
    return true;
  const LaneTuning tu = normalized(tuning);
  using T = TensorType;
  if (type_a == T::Q4_K && type_b == T::Q5_K)
    return launch_type<T::Q4_K, T::Q5_K>(b, seg_b, row_bytes_b, acts, xf, stream, tu, kQ4Q5, launched);
  if (type_a == T::Q4_K)
    return launch_type<T::Q4_K, T::Q6_K>(b, seg_b, row_bytes_b, acts, xf, stream, tu, kQ4Q6, launched);
  return launch_type<T::Q5_K, T::Q6_K>(b, seg_b, row_bytes_b, acts, xf, stream, tu, kQ5Q6, launched);
}

std::span<const SmemOptin> mmvq_lane_smem_optins() {
  static const SmemOptin list[] = {
      optin<TensorType::Q4_K, 8, false>("mmvq_lane_q4_K_8"),
      optin<TensorType::Q4_K, 8, true>("mmvq_lane_glu_q4_K_8"),
      optin<TensorType::Q4_K, 16, false>("mmvq_lane_q4_K_16"),
      optin<TensorType::Q4_K, 16, true>("mmvq_lane_glu_q4_K_16"),
      optin<TensorType::Q4_K, 32, false>("mmvq_lane_q4_K_32"),
      optin<TensorType::Q5_K, 8, false>("mmvq_lane_q5_K_8"),
      optin<TensorType::Q5_K, 8, true>("mmvq_lane_glu_q5_K_8"),
      optin<TensorType::Q5_K, 16, false>("mmvq_lane_q5_K_16"),
      optin<TensorType::Q5_K, 16, true>("mmvq_lane_glu_q5_K_16"),
      optin<TensorType::Q5_K, 32, false>("mmvq_lane_q5_K_32"),
      optin<TensorType::Q6_K, 8, false>("mmvq_lane_q6_K_8"),
      optin<TensorType::Q6_K, 8, true>("mmvq_lane_glu_q6_K_8"),
      optin<TensorType::Q6_K, 16, false>("mmvq_lane_q6_K_16"),
      optin<TensorType::Q6_K, 16, true>("mmvq_lane_glu_q6_K_16"),
      optin<TensorType::Q6_K, 32, false>("mmvq_lane_q6_K_32"),
      optin<TensorType::Q4_K, 8, false, TensorType::Q5_K>("mmvq_lane_q4_K_q5_K_8"),
      optin<TensorType::Q4_K, 16, false, TensorType::Q5_K>("mmvq_lane_q4_K_q5_K_16"),
      optin<TensorType::Q4_K, 32, false, TensorType::Q5_K>("mmvq_lane_q4_K_q5_K_32"),
      optin<TensorType::Q4_K, 8, false, TensorType::Q6_K>("mmvq_lane_q4_K_q6_K_8"),
      optin<TensorType::Q4_K, 16, false, TensorType::Q6_K>("mmvq_lane_q4_K_q6_K_16"),
      optin<TensorType::Q4_K, 32, false, TensorType::Q6_K>("mmvq_lane_q4_K_q6_K_32"),
      optin<TensorType::Q5_K, 8, false, TensorType::Q6_K>("mmvq_lane_q5_K_q6_K_8"),
      optin<TensorType::Q5_K, 16, false, TensorType::Q6_K>("mmvq_lane_q5_K_q6_K_16"),
      optin<TensorType::Q5_K, 32, false, TensorType::Q6_K>("mmvq_lane_q5_K_q6_K_32"),
      optin<TensorType::Q4_K, 8, false, TensorType::Q4_K, true>("mmvq_lane_q4_K_8_rr"),
      optin<TensorType::Q4_K, 8, true, TensorType::Q4_K, true>("mmvq_lane_glu_q4_K_8_rr"),
      optin<TensorType::Q4_K, 16, false, TensorType::Q4_K, true>("mmvq_lane_q4_K_16_rr"),
      optin<TensorType::Q4_K, 16, true, TensorType::Q4_K, true>("mmvq_lane_glu_q4_K_16_rr"),
      optin<TensorType::Q4_K, 32, false, TensorType::Q4_K, true>("mmvq_lane_q4_K_32_rr"),
      optin<TensorType::Q5_K, 8, false, TensorType::Q5_K, true>("mmvq_lane_q5_K_8_rr"),
      optin<TensorType::Q5_K, 8, true, TensorType::Q5_K, true>("mmvq_lane_glu_q5_K_8_rr"),
      optin<TensorType::Q5_K, 16, false, TensorType::Q5_K, true>("mmvq_lane_q5_K_16_rr"),
      optin<TensorType::Q5_K, 16, true, TensorType::Q5_K, true>("mmvq_lane_glu_q5_K_16_rr"),
      optin<TensorType::Q5_K, 32, false, TensorType::Q5_K, true>("mmvq_lane_q5_K_32_rr"),
      optin<TensorType::Q6_K, 8, false, TensorType::Q6_K, true>("mmvq_lane_q6_K_8_rr"),
      optin<TensorType::Q6_K, 8, true, TensorType::Q6_K, true>("mmvq_lane_glu_q6_K_8_rr"),
      optin<TensorType::Q6_K, 16, false, TensorType::Q6_K, true>("mmvq_lane_q6_K_16_rr"),
      optin<TensorType::Q6_K, 16, true, TensorType::Q6_K, true>("mmvq_lane_glu_q6_K_16_rr"),
      optin<TensorType::Q6_K, 32, false, TensorType::Q6_K, true>("mmvq_lane_q6_K_32_rr"),
      optin<TensorType::Q4_K, 8, false, TensorType::Q5_K, true>("mmvq_lane_q4_K_q5_K_8_rr"),
      optin<TensorType::Q4_K, 16, false, TensorType::Q5_K, true>("mmvq_lane_q4_K_q5_K_16_rr"),
      optin<TensorType::Q4_K, 32, false, TensorType::Q5_K, true>("mmvq_lane_q4_K_q5_K_32_rr"),
      optin<TensorType::Q4_K, 8, false, TensorType::Q6_K, true>("mmvq_lane_q4_K_q6_K_8_rr"),
      optin<TensorType::Q4_K, 16, false, TensorType::Q6_K, true>("mmvq_lane_q4_K_q6_K_16_rr"),
      optin<TensorType::Q4_K, 32, false, TensorType::Q6_K, true>("mmvq_lane_q4_K_q6_K_32_rr"),
      optin<TensorType::Q5_K, 8, false, TensorType::Q6_K, true>("mmvq_lane_q5_K_q6_K_8_rr"),
      optin<TensorType::Q5_K, 16, false, TensorType::Q6_K, true>("mmvq_lane_q5_K_q6_K_16_rr"),
      optin<TensorType::Q5_K, 32, false, TensorType::Q6_K, true>("mmvq_lane_q5_K_q6_K_32_rr"),
  };
  return list;
}

}  // namespace minfer::cuda::mm
