// Decode attention: split-K kernel over cell ranges with GQA head slices, and the combine kernel.
// Design and determinism: attn_decode.cuh.
#include "cuda/kernels/attn_decode.cuh"

#include <cuda_fp16.h>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {

constexpr int kWarps = kAttnDecodeThreads / 32;
/// Most cells per range: phase 0 gives every thread one cell, sm_p holds a score per cell.
constexpr int kChunkMax = kAttnDecodeThreads;
/// Fewest cells per range once the window is cut (a window of <= kChunkMax cells is one range).
constexpr int64_t kMinChunk = 64;
/// Blocks per SM the plan aims for (per token) before it stops cutting the window.
constexpr int64_t kBlocksPerSm = 2;
/// Floats of one warp's output partial (heads of the slice x 8 L dimensions).
constexpr int kRedFloats = 1024;

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

/// Lanes per cell: the smallest of 4, 8, 16, 32 whose 8 elements per lane cover head_dim.
int lanes_for(int64_t hd) { return hd <= 32 ? 4 : hd <= 64 ? 8 : hd <= 128 ? 16 : 32; }

/// Query heads a block can take for this head_dim: kAttnDecodeMaxHeads, fewer where 8 L
/// dimensions per head would overflow a warp's kRedFloats partial (4 for head_dim > 128).
int64_t max_heads_for(int64_t hd) {
  const int64_t by_red = kRedFloats / (8 * lanes_for(hd));
  return by_red < kAttnDecodeMaxHeads ? by_red : kAttnDecodeMaxHeads;
}

// ---- 8 consecutive elements of one KV row: raw registers, then floats -----------------------

template <TensorType T>
struct KvVec;

template <>
struct KvVec<TensorType::F32> {
  float4 a, b;
  __device__ __forceinline__ void load(const uint8_t* row, int64_t e0) {
    const auto* p = reinterpret_cast<const float4*>(row + e0 * 4);  // 32-byte aligned
    a = __ldg(p);
    b = __ldg(p + 1);
  }
  __device__ __forceinline__ void zero() { a = b = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
  __device__ __forceinline__ void to_float(float f[8]) const {
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
  }
};

template <>
struct KvVec<TensorType::F16> {
  uint4 w;
  __device__ __forceinline__ void load(const uint8_t* row, int64_t e0) {
    w = __ldg(reinterpret_cast<const uint4*>(row + e0 * 2));  // 16-byte aligned
  }
  __device__ __forceinline__ void zero() { w = make_uint4(0u, 0u, 0u, 0u); }
  __device__ __forceinline__ static void pair(uint32_t u, float* f) {
    f[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(u & 0xFFFFu)));
    f[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(u >> 16)));
  }
  __device__ __forceinline__ void to_float(float f[8]) const {
    pair(w.x, f);
    pair(w.y, f + 2);
    pair(w.z, f + 4);
    pair(w.w, f + 6);
  }
};

// q8_0 (ggml-common.h block_q8_0: half d, then 32 int8 qs; 34 bytes, so only 2-byte aligned):
// element e = d * qs[e]. The 8 elements of a lane never straddle a block (8 | 32).
template <>
struct KvVec<TensorType::Q8_0> {
  uint16_t d;
  uint16_t q[4];
  __device__ __forceinline__ void load(const uint8_t* row, int64_t e0) {
    const uint8_t* blk = row + (e0 / 32) * 34;
    const auto* qs = reinterpret_cast<const unsigned short*>(blk + 2 + (e0 % 32));
    d = __ldg(reinterpret_cast<const unsigned short*>(blk));
#pragma unroll
    for (int i = 0; i < 4; ++i) q[i] = __ldg(qs + i);
  }
  __device__ __forceinline__ void zero() {
    d = 0;
    q[0] = q[1] = q[2] = q[3] = 0;
  }
  __device__ __forceinline__ void to_float(float f[8]) const {
    const float df = __half2float(__ushort_as_half(d));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __fmul_rn(df, static_cast<float>(static_cast<int8_t>(q[i] & 0xFFu)));
      f[2 * i + 1] = __fmul_rn(df, static_cast<float>(static_cast<int8_t>(q[i] >> 8)));
    }
  }
};

struct DecodeParams {
  AttnShape s;
  int64_t n_splits, chunk, head_slices, heads_per_slice;
  AttnArgs a;
  float* part_o;   // [n_tok][n_head][n_splits][head_dim]
  float* part_ml;  // [n_tok][n_head][n_splits][2] (max, sum)
};

/// Cells of one step of a stream: U independent loads in flight before any is used.
template <TensorType T>
constexpr int unroll_for() { return T == TensorType::F32 ? 4 : 8; }

// grid (n_splits, n_head_kv * head_slices, n_tok); block kAttnDecodeThreads (kWarps warps).
// L lanes per cell, GM the register capacity in query heads (>= heads_per_slice), GM * 8 L <=
// kRedFloats. Phases, separated by barriers (every barrier is reached by every thread):
//   0  thread i tests cell begin + i (range <= kThreads cells) and the visible cells are
//      compacted in cell order into sm_cell (ballot + popc per warp, warp offsets in order);
//   A  scores: stream s scores visible cells s, s + NS, ... (U per step, loads first), for all
//      the heads of the slice; the L lanes of a cell sum their partial dots by shuffles;
//   B  one warp per head: max over the range, p = exp(score - max) in place, sum of p;
//   C  stream s accumulates p * V over the same cells (its first V loads are issued before B);
//      the streams of a warp are summed by shuffles, the warps in warp order in shared memory.
template <TensorType T, int L, int GM>
__global__ void __launch_bounds__(kAttnDecodeThreads) attn_decode_kernel(DecodeParams p) {
  pdl_prologue();
  constexpr int P = 32 / L;        // cells a warp scores per step
  constexpr int NS = kWarps * P;   // streams of the block
  constexpr int HD = 8 * L;        // dimensions the lanes of a stream cover (>= head_dim)
  constexpr int U = unroll_for<T>();
  constexpr int kLogL = L == 4 ? 2 : L == 8 ? 3 : L == 16 ? 4 : 5;
  constexpr int kLogGM = GM == 2 ? 1 : GM == 4 ? 2 : 3;
  constexpr int kScatter = kLogGM < kLogL ? kLogGM : kLogL;  // reduce-scatter levels
  constexpr int kLeft = GM >> kScatter;                        // heads a lane holds at the end
  constexpr int kWriterMask = (L >> kScatter) - 1;             // lanes that write: j & mask == 0
  static_assert((1 << kLogL) == L && (1 << kLogGM) == GM, "attn_decode_kernel: L and GM powers of 2");
  static_assert(GM * HD <= kRedFloats, "attn_decode_kernel: head slice too wide for sm_red");
  __shared__ int sm_cell[kChunkMax];         // visible cells, offsets from the range's first
  __shared__ float sm_p[GM][kChunkMax];      // scores, then exp(score - max)
  __shared__ float sm_red[kWarps][GM * HD];  // per-warp output partials
  __shared__ float sm_stat[GM][2];           // max, sum per head
  __shared__ int sm_count[kWarps];

  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int sub = lane / L, j = lane % L;
  const int64_t hd = p.s.head_dim, n_head = p.s.n_head;
  const bool dim_ok = 8 * j < hd;  // head_dim % 8 == 0: a lane holds all 8 or none
  const int64_t split = blockIdx.x;
  const int64_t kvh = blockIdx.y / p.head_slices, slice = blockIdx.y % p.head_slices;
  const int64_t t = blockIdx.z;
  const int64_t group = n_head / p.s.n_head_kv;
  const int64_t g0 = slice * p.heads_per_slice;
  const int gn = static_cast<int>(p.heads_per_slice < group - g0 ? p.heads_per_slice : group - g0);
  const int64_t h0 = kvh * group + g0;  // first query head of the block
  // The token's cells: [lo, hi) from its bounds (a multi-sequence step), else the window. The
  // ranges are cut from lo, so a range past hi is empty (its partial: max -inf, sum 0).
  int64_t lo = 0, hi = p.s.n_kv;
  if (p.a.kv_bounds != nullptr) {
    lo = p.a.kv_bounds[2 * t];
    hi = p.a.kv_bounds[2 * t + 1];
  }
  const int64_t c_begin = lo + split * p.chunk;
  const int64_t c_end = c_begin + p.chunk < hi ? c_begin + p.chunk : hi;
  const int len = c_end > c_begin ? static_cast<int>(c_end - c_begin) : 0;

  // Phase 0: visibility of cell c_begin + tid, compacted in cell order.
  bool vis = false;
  if (tid < len) {
    const int32_t cp = __ldg(p.a.kv_pos + c_begin + tid), cs = __ldg(p.a.kv_seq + c_begin + tid);
    vis = cp >= 0 && cs == p.a.seq[t] && cp <= p.a.pos[t];
  }
  // q of this lane's dimensions for the heads of the slice (loads fly during the compaction).
  float q[GM][8];
#pragma unroll
  for (int g = 0; g < GM; ++g) {
#pragma unroll
    for (int i = 0; i < 8; ++i) q[g][i] = 0.0f;
    if (g < gn && dim_ok) {
      const float* qg = p.a.q + ((t * n_head + h0 + g) * hd + 8 * j);
#pragma unroll
      for (int i = 0; i < 8; ++i) q[g][i] = qg[i];
    }
  }
  const unsigned ballot = __ballot_sync(0xFFFFFFFFu, vis);
  if (lane == 0) sm_count[warp] = __popc(ballot);
  __syncthreads();
  int n_vis = 0, offset = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const int cw = sm_count[w];
    offset += w < warp ? cw : 0;
    n_vis += cw;
  }
  if (vis) sm_cell[offset + __popc(ballot & ((1u << lane) - 1u))] = tid;
  __syncthreads();

  const auto* kbase = static_cast<const uint8_t*>(p.a.k) + static_cast<size_t>(c_begin) * p.a.row_bytes;
  const auto* vbase = static_cast<const uint8_t*>(p.a.v) + static_cast<size_t>(c_begin) * p.a.row_bytes;
  const int64_t e0 = kvh * hd + 8 * j;  // this lane's first element in a row
  const size_t rb = p.a.row_bytes;
  const int sid = warp * P + sub;       // this lane's stream
  // Loads the rows (K or V) of the U cells of the step at `base` for this lane's stream; an
  // invisible slot (past n_vis) or an idle lane loads nothing and holds zeros.
  const auto load_step = [&](const uint8_t* region, int base, KvVec<T>* r) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int v = base + u * NS + sid;
      r[u].zero();
      if (v < n_vis && dim_ok) r[u].load(region + static_cast<size_t>(sm_cell[v]) * rb, e0);
    }
  };

  // Phase A: scores.
  const float scale = p.a.scale;
  for (int base = 0; base < n_vis; base += U * NS) {  // block-uniform
    KvVec<T> kr[U];
    load_step(kbase, base, kr);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int v = base + u * NS + sid;
      float kf[8];
      kr[u].to_float(kf);
      float d[GM];  // this lane's partial dots, one per head (0 for heads past gn: q is 0)
#pragma unroll
      for (int g = 0; g < GM; ++g) {
        d[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) d[g] = fmaf(q[g][i], kf[i], d[g]);
      }
      // Reduce-scatter over the L lanes of the cell: at the level of offset o the lanes with
      // bit o keep the upper half of their heads and send the lower half (and the others the
      // reverse): 8 shuffles for L = 16 and GM = 8, where a butterfly per head takes 32. The
      // levels left once one head remains are plain butterfly sums. Then lane j holds the
      // totals of heads head0 .. head0 + kLeft - 1, and the lanes with the low bits of j clear
      // (kWriterMask) write them.
      int head0 = 0;
#pragma unroll
      for (int lv = 0; lv < kLogL; ++lv) {
        const int o = L >> (lv + 1);
        const int c = GM >> lv;  // heads a lane still holds at this level (compile time)
        if (c > 1) {
          const bool up = (j & o) != 0;
#pragma unroll
          for (int i = 0; i < c / 2; ++i) {
            const float send = up ? d[i] : d[i + c / 2];
            const float keep = up ? d[i + c / 2] : d[i];
            d[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, o);
          }
          head0 += up ? c / 2 : 0;
        } else {
          d[0] += __shfl_xor_sync(0xFFFFFFFFu, d[0], o);
        }
      }
      if ((j & kWriterMask) == 0 && v < n_vis) {
#pragma unroll
        for (int i = 0; i < kLeft; ++i)
          if (head0 + i < gn) sm_p[head0 + i][v] = d[i] * scale;
      }
    }
  }
  // The first step's V rows fly during phase B.
  KvVec<T> vr[U];
  load_step(vbase, 0, vr);
  __syncthreads();

  // Phase B: softmax statistics, one warp per head. A -inf score (never produced by finite
  // rows) contributes nothing; a range with no finite score has max -inf and sum 0.
  for (int g = warp; g < gn; g += kWarps) {
    float mx = -INFINITY;
    for (int v = lane; v < n_vis; v += 32) mx = fmaxf(mx, sm_p[g][v]);
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int v = lane; v < n_vis; v += 32) {
      const float s = sm_p[g][v];
      const float e = s == -INFINITY ? 0.0f : expf(s - mx);
      sm_p[g][v] = e;
      sum += e;
    }
    sum = warp_sum(sum);
    if (lane == 0) {
      sm_stat[g][0] = mx;
      sm_stat[g][1] = sum;
    }
  }
  __syncthreads();

  // Phase C: p * V.
  float acc[GM][8];
#pragma unroll
  for (int g = 0; g < GM; ++g) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.0f;
  }
  for (int base = 0; base < n_vis; base += U * NS) {  // block-uniform
    if (base > 0) load_step(vbase, base, vr);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int v = base + u * NS + sid;
      if (v < n_vis) {
        float vf[8];
        vr[u].to_float(vf);
#pragma unroll
        for (int g = 0; g < GM; ++g) {
          if (g < gn) {
            const float pr = sm_p[g][v];
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(pr, vf[i], acc[g][i]);
          }
        }
      }
    }
  }
  // Streams of a warp (lanes j, j + L, ...), then warps in order.
#pragma unroll
  for (int g = 0; g < GM; ++g) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int o = L; o < 32; o <<= 1) acc[g][i] += __shfl_xor_sync(0xFFFFFFFFu, acc[g][i], o);
    }
  }
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < GM; ++g) {
#pragma unroll
      for (int i = 0; i < 8; ++i) sm_red[warp][g * HD + 8 * j + i] = acc[g][i];
    }
  }
  __syncthreads();
  for (int idx = tid; idx < GM * HD; idx += kAttnDecodeThreads) {
    const int g = idx / HD, d = idx % HD;
    if (g >= gn || d >= hd) continue;
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += sm_red[w][idx];
    const float mx = sm_stat[g][0], sum = sm_stat[g][1];
    const int64_t row = t * n_head + h0 + g;
    if (p.n_splits == 1) {
      p.a.out[row * hd + d] = mx == -INFINITY ? 0.0f : o / sum;  // no visible cell: zeros
    } else {
      const int64_t pr = row * p.n_splits + split;
      p.part_o[pr * hd + d] = o;
      if (d == 0) {
        p.part_ml[2 * pr] = mx;
        p.part_ml[2 * pr + 1] = sum;
      }
    }
  }
}

// One block per output row (token, head), grid-stride; merges the ranges in range order.
__global__ void __launch_bounds__(kAttnDecodeThreads)
    attn_decode_combine_kernel(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                               int64_t rows, int64_t n_splits, int64_t hd, float* __restrict__ out) {
  pdl_prologue();
  __shared__ float w_s[kAttnDecodeMaxSplits];
  __shared__ float red[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* ml = part_ml + 2 * r * n_splits;
    float mx = -INFINITY;
    for (int64_t s = threadIdx.x; s < n_splits; s += blockDim.x) mx = fmaxf(mx, ml[2 * s]);
    mx = block_max(mx, red);
    float part = 0.0f;
    for (int64_t s = threadIdx.x; s < n_splits; s += blockDim.x) {
      const float ms = ml[2 * s];
      const float w = ms == -INFINITY ? 0.0f : expf(ms - mx);
      w_s[s] = w;
      part = fmaf(ml[2 * s + 1], w, part);
    }
    const float sum = block_sum(part, red);  // its barriers also publish w_s
    const float* po = part_o + r * n_splits * hd;
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
      float o = 0.0f;
      // Unrolled so that the partial loads of 16 ranges are in flight together.
#pragma unroll 16
      for (int64_t s = 0; s < n_splits; ++s) o = fmaf(po[s * hd + d], w_s[s], o);
      out[r * hd + d] = mx == -INFINITY ? 0.0f : o / sum;
    }
    __syncthreads();  // w_s is rewritten by the next row
  }
}

template <TensorType T, int L>
bool launch_split(const DecodeParams& dp, int gm, cudaStream_t stream, const char* site) {
  const dim3 grid(static_cast<unsigned>(dp.n_splits), static_cast<unsigned>(dp.s.n_head_kv * dp.head_slices),
                  static_cast<unsigned>(dp.s.n_tok));
  if (gm <= 2) {
    launch_pdl(attn_decode_kernel<T, L, 2>, dim3(grid), dim3(kAttnDecodeThreads), 0, stream, dp);
  } else if (gm <= 4) {
    launch_pdl(attn_decode_kernel<T, L, 4>, dim3(grid), dim3(kAttnDecodeThreads), 0, stream, dp);
  } else if constexpr (8 * 8 * L <= kRedFloats) {
    launch_pdl(attn_decode_kernel<T, L, 8>, dim3(grid), dim3(kAttnDecodeThreads), 0, stream, dp);
  } else {
    return false;  // attn_decode checked heads_per_slice <= max_heads_for(head_dim)
  }
  return MINFER_LAUNCH_CHECK(site);
}

template <TensorType T>
bool launch_type(const DecodeParams& dp, int lanes, int gm, cudaStream_t stream, const char* site) {
  switch (lanes) {
    case 4: return launch_split<T, 4>(dp, gm, stream, site);
    case 8: return launch_split<T, 8>(dp, gm, stream, site);
    case 16: return launch_split<T, 16>(dp, gm, stream, site);
    case 32: return launch_split<T, 32>(dp, gm, stream, site);
    default: return false;
  }
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

const char* attn_decode_unsupported(const AttnShape& s, TensorType kv_type) {
  if (const char* why = attn_unsupported(s, kv_type); *why != '\0') return why;
  if (s.n_tok < 1 || s.n_tok > kAttnDecodeMaxBatch || (s.seq_tok > 0 ? s.seq_tok : s.n_tok) > kAttnDecodeMaxTokens)
    return "the decode kernels take 1 to 8 tokens of one sequence, or up to 64 of several with at most 8 each";
  if (s.head_dim % 8 != 0) return "the decode kernels need head_dim a multiple of 8";
  if (kv_type == TensorType::Q8_0 && s.head_dim % 32 != 0)
    return "the decode kernels need head_dim a multiple of 32 for q8_0 KV";
  const int64_t max_heads = max_heads_for(s.head_dim);
  if (s.n_head_kv * ((s.n_head / s.n_head_kv + max_heads - 1) / max_heads) > kMaxGridYZ)
    return "too many KV heads for the decode grid";
  if (s.n_kv > kChunkMax * kAttnDecodeMaxSplits) return "the decode kernels take windows of at most 262144 cells";
  return "";
}

AttnDecodePlan attn_decode_plan(const AttnShape& s, int sm_count, int64_t chunk_override,
                                int64_t head_slices_override) {
  AttnDecodePlan p;
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  // The span each token's ranges cover: its bounds' widest (s.window) or the whole window.
  const int64_t span = s.window > 0 ? s.window : s.n_kv;
  const int64_t n_kv = span > 0 ? span : 1;
  const int64_t group = s.n_head_kv > 0 && s.n_head >= s.n_head_kv ? s.n_head / s.n_head_kv : 1;
  p.lanes = lanes_for(s.head_dim);
  const int64_t max_heads = max_heads_for(s.head_dim);
  p.head_slices = (group + max_heads - 1) / max_heads;
  // A window of at most 256 cells gets one block per query head: with a block per KV head a 7B layer had
  // 4 blocks (tg128 409 -> 417 t/s with 28; docs/perf/2026-12-01-lane-blocks.md). Longer windows
  // fill the GPU with ranges instead, and read each K/V row once per KV head.
  // At most kMaxGridYZ blocks per range (grid y), which attn_decode_unsupported checked for the
  // fewest slices.
  const int64_t kv_heads = s.n_head_kv > 0 ? s.n_head_kv : 1;
  int64_t want_slices = head_slices_override > 0 ? head_slices_override : n_kv <= kChunkMax ? group : 0;
  if (want_slices > kMaxGridYZ / kv_heads) want_slices = kMaxGridYZ / kv_heads;
  if (want_slices > p.head_slices) p.head_slices = want_slices < group ? want_slices : group;
  p.heads_per_slice = (group + p.head_slices - 1) / p.head_slices;
  p.head_slices = (group + p.heads_per_slice - 1) / p.heads_per_slice;  // no empty slice
  const int64_t blocks_per_range = kv_heads * p.head_slices;
  if (n_kv <= kChunkMax) {
    p.chunk = n_kv;  // one range: one launch, no combine
  } else {
    const int64_t splits = (kBlocksPerSm * sms + blocks_per_range - 1) / blocks_per_range;
    p.chunk = (n_kv + splits - 1) / splits;
    if (p.chunk < kMinChunk) p.chunk = kMinChunk;
    if (p.chunk > kChunkMax) p.chunk = kChunkMax;
  }
  const int64_t fewest = (n_kv + kAttnDecodeMaxSplits - 1) / kAttnDecodeMaxSplits;
  if (chunk_override > 0) p.chunk = chunk_override < kChunkMax ? chunk_override : kChunkMax;
  if (p.chunk < fewest) p.chunk = fewest;  // windows over kChunkMax * kMaxSplits are refused
  p.n_splits = (n_kv + p.chunk - 1) / p.chunk;
  const auto rows = static_cast<size_t>(s.n_tok * s.n_head * p.n_splits);
  p.scratch_bytes = p.n_splits == 1 ? 0
                                    : align256(rows * static_cast<size_t>(s.head_dim) * sizeof(float)) +
                                          align256(rows * 2 * sizeof(float));
  return p;
}

bool attn_decode(TensorType kv_type, const AttnShape& s, const AttnDecodePlan& plan, const AttnArgs& a,
                 cudaStream_t stream) {
  if (s.n_tok <= 0) return true;
  if (*attn_decode_unsupported(s, kv_type) != '\0' || plan.n_splits < 1 ||
      plan.n_splits > kAttnDecodeMaxSplits || plan.chunk * plan.n_splits < (s.window > 0 ? s.window : s.n_kv) ||
      (s.window > 0 && a.kv_bounds == nullptr) ||
      plan.chunk > kChunkMax || plan.lanes != lanes_for(s.head_dim) ||
      plan.heads_per_slice > max_heads_for(s.head_dim) ||
      plan.heads_per_slice * plan.head_slices < s.n_head / s.n_head_kv ||
      (kv_type != TensorType::Q8_0 && (!aligned16(a.k) || !aligned16(a.v) || a.row_bytes % 16 != 0)) ||
      (plan.n_splits > 1 && a.scratch == nullptr)) {
    note_launch_failure("attn_decode_bad_args", cudaErrorInvalidValue);
    return false;
  }
  DecodeParams dp{s, plan.n_splits, plan.chunk, plan.head_slices, plan.heads_per_slice, a, nullptr, nullptr};
  const auto rows = static_cast<size_t>(s.n_tok * s.n_head * plan.n_splits);
  dp.part_o = static_cast<float*>(a.scratch);
  dp.part_ml = plan.n_splits == 1 ? nullptr
                                  : reinterpret_cast<float*>(static_cast<uint8_t*>(a.scratch) +
                                                             align256(rows * static_cast<size_t>(s.head_dim) * sizeof(float)));
  const int gm = static_cast<int>(plan.heads_per_slice);
  bool ok = false;
  switch (kv_type) {
    case TensorType::F32: ok = launch_type<TensorType::F32>(dp, plan.lanes, gm, stream, "attn_decode_f32"); break;
    case TensorType::F16: ok = launch_type<TensorType::F16>(dp, plan.lanes, gm, stream, "attn_decode_f16"); break;
    case TensorType::Q8_0: ok = launch_type<TensorType::Q8_0>(dp, plan.lanes, gm, stream, "attn_decode_q8_0"); break;
    default: return false;
  }
  if (!ok || plan.n_splits == 1) return ok;
  const int64_t out_rows = s.n_tok * s.n_head;
  launch_pdl(attn_decode_combine_kernel, dim3(grid_for(out_rows, 1)), dim3(kAttnDecodeThreads), 0, stream, dp.part_o,
             dp.part_ml, out_rows, plan.n_splits, s.head_dim, a.out);
  return MINFER_LAUNCH_CHECK("attn_decode_combine");
}

}  // namespace minfer::cuda
