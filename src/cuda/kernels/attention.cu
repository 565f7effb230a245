#include "cuda/kernels/attention.cuh"

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/dequant.cuh"
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {

constexpr int kAttnThreads = 256;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kMaxGroup = 16;
constexpr int kAccPerThread = static_cast<int>(kAttnMaxGroupDim / kAttnThreads);  // 16
constexpr int kKPerLane = static_cast<int>(kAttnMaxHeadDim / 32);                 // 8
constexpr int64_t kMinCellsPerSplit = 64;
constexpr size_t kPrefillScratchBudget = size_t{64} << 20;

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

__device__ __forceinline__ float exp_rn(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

struct SplitParams {
  AttnShape s;
  int64_t n_splits, chunk;
  AttnArgs a;
  float* part_o;   // [n_tok][n_head][n_splits][head_dim]
  float* part_ml;  // [n_tok][n_head][n_splits][2] (max, sum)
};

// grid (n_splits, n_head_kv, tokens); block kAttnThreads.
template <TensorType T>
__global__ void __launch_bounds__(kAttnThreads) attn_split_kernel(SplitParams p) {
  __shared__ float q_s[kAttnMaxGroupDim];
  __shared__ float s_s[kMaxGroup * kAttnSubChunk];
  __shared__ float m_s[kMaxGroup], l_s[kMaxGroup], alpha_s[kMaxGroup];

  const int64_t hd = p.s.head_dim, n_head = p.s.n_head;
  const int group = static_cast<int>(n_head / p.s.n_head_kv);
  const int gd = static_cast<int>(group * hd);
  const int64_t split = blockIdx.x, kvh = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t c_begin = split * p.chunk;
  const int64_t c_end = c_begin + p.chunk < p.s.n_kv ? c_begin + p.chunk : p.s.n_kv;
  const auto* kbase = static_cast<const uint8_t*>(p.a.k);
  const auto* vbase = static_cast<const uint8_t*>(p.a.v);

  for (int64_t t = blockIdx.z; t < p.s.n_tok; t += gridDim.z) {
    __syncthreads();  // the previous token's shared state is no longer read
    const float* qt = p.a.q + (t * n_head + kvh * group) * hd;
    for (int i = threadIdx.x; i < gd; i += kAttnThreads) q_s[i] = qt[i];
    if (threadIdx.x < group) {
      m_s[threadIdx.x] = -INFINITY;
      l_s[threadIdx.x] = 0.0f;
    }
    float acc[kAccPerThread];
#pragma unroll
    for (int k = 0; k < kAccPerThread; ++k) acc[k] = 0.0f;
    const int32_t pos_t = p.a.pos[t], seq_t = p.a.seq[t];
    __syncthreads();

    for (int64_t sub = c_begin; sub < c_end; sub += kAttnSubChunk) {
      const int n_sub = static_cast<int>(c_end - sub < kAttnSubChunk ? c_end - sub : kAttnSubChunk);
      // Scores: one warp per cell, lanes across the head dimension.
      for (int cl = warp; cl < n_sub; cl += kAttnWarps) {
        const int64_t c = sub + cl;
        const int32_t cp = p.a.kv_pos[c];
        const bool visible = cp >= 0 && p.a.kv_seq[c] == seq_t && cp <= pos_t;
        if (!visible) {
          for (int g = lane; g < group; g += 32) s_s[g * kAttnSubChunk + cl] = -INFINITY;
          continue;  // uniform over the warp
        }
        const uint8_t* krow = kbase + static_cast<size_t>(c) * p.a.row_bytes;
        float kreg[kKPerLane];
#pragma unroll
        for (int i = 0; i < kKPerLane; ++i) {
          const int64_t d = lane + 32 * i;
          kreg[i] = d < hd ? dequant_element<T>(krow, kvh * hd + d) : 0.0f;
        }
        for (int g = 0; g < group; ++g) {
          float part = 0.0f;
#pragma unroll
          for (int i = 0; i < kKPerLane; ++i) {
            const int64_t d = lane + 32 * i;
            if (d < hd) part = __fadd_rn(part, __fmul_rn(q_s[g * hd + d], kreg[i]));
          }
          part = warp_sum(part);
          if (lane == 0) s_s[g * kAttnSubChunk + cl] = __fmul_rn(part, p.a.scale);
        }
      }
      __syncthreads();
      // Online softmax state: one warp per query head.
      for (int g = warp; g < group; g += kAttnWarps) {
        float* sg = s_s + g * kAttnSubChunk;
        float mx = -INFINITY;
        for (int cl = lane; cl < n_sub; cl += 32) mx = fmaxf(mx, sg[cl]);
        mx = warp_max(mx);
        const float m_old = m_s[g];
        const float m_new = fmaxf(m_old, mx);
        float sum = 0.0f;
        for (int cl = lane; cl < n_sub; cl += 32) {
          const float sc = sg[cl];
          const float pr = (sc == -INFINITY) ? 0.0f : exp_rn(__fsub_rn(sc, m_new));
          sg[cl] = pr;
          sum = __fadd_rn(sum, pr);
        }
        sum = warp_sum(sum);
        __syncwarp();  // every lane has read m_s[g] / l_s[g] before lane 0 rewrites them
        if (lane == 0) {
          const float alpha = (m_old == m_new) ? 1.0f : exp_rn(__fsub_rn(m_old, m_new));
          alpha_s[g] = alpha;
          l_s[g] = __fadd_rn(__fmul_rn(l_s[g], alpha), sum);
          m_s[g] = m_new;
        }
      }
      __syncthreads();
      // Output accumulation: each thread owns (query head, dimension) pairs.
#pragma unroll
      for (int k = 0; k < kAccPerThread; ++k) {
        const int idx = threadIdx.x + k * kAttnThreads;
        if (idx >= gd) break;
        const int g = static_cast<int>(idx / hd);
        const int64_t d = idx % hd;
        float v = __fmul_rn(acc[k], alpha_s[g]);
        const float* pg = s_s + g * kAttnSubChunk;
        for (int cl = 0; cl < n_sub; ++cl) {
          const float pr = pg[cl];
          if (pr == 0.0f) continue;  // masked (or underflowed): never read the row
          const uint8_t* vrow = vbase + static_cast<size_t>(sub + cl) * p.a.row_bytes;
          v = __fadd_rn(v, __fmul_rn(pr, dequant_element<T>(vrow, kvh * hd + d)));
        }
        acc[k] = v;
      }
      __syncthreads();  // s_s and alpha_s are rewritten by the next sub-chunk
    }
    if (p.n_splits == 1) {  // the whole window in one range: normalise and write the output
#pragma unroll
      for (int k = 0; k < kAccPerThread; ++k) {
        const int idx = threadIdx.x + k * kAttnThreads;
        if (idx >= gd) break;
        const int g = static_cast<int>(idx / hd);
        const int64_t d = idx % hd;
        const float out = m_s[g] == -INFINITY ? 0.0f : __fdiv_rn(acc[k], l_s[g]);  // no visible cell: zeros
        p.a.out[(t * n_head + kvh * group + g) * hd + d] = out;
      }
      continue;
    }
    // Partials of this range.
    const int64_t row0 = (t * n_head + kvh * group) * p.n_splits + split;  // head g adds g * n_splits
#pragma unroll
    for (int k = 0; k < kAccPerThread; ++k) {
      const int idx = threadIdx.x + k * kAttnThreads;
      if (idx >= gd) break;
      const int g = static_cast<int>(idx / hd);
      const int64_t d = idx % hd;
      p.part_o[(row0 + g * p.n_splits) * hd + d] = acc[k];
    }
    if (threadIdx.x < group) {
      const int64_t r = row0 + threadIdx.x * p.n_splits;
      p.part_ml[2 * r] = m_s[threadIdx.x];
      p.part_ml[2 * r + 1] = l_s[threadIdx.x];
    }
  }
}

// One block per (token, head) (grid-stride); threads across the head dimension.
__global__ void attn_combine_kernel(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                    int64_t rows, int64_t n_splits, int64_t hd, float* __restrict__ out) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* ml = part_ml + 2 * r * n_splits;
    float M = -INFINITY;
    for (int64_t s = 0; s < n_splits; ++s) M = fmaxf(M, ml[2 * s]);
    float L = 0.0f;
    for (int64_t s = 0; s < n_splits; ++s)
      if (ml[2 * s] != -INFINITY) L = __fadd_rn(L, __fmul_rn(ml[2 * s + 1], exp_rn(__fsub_rn(ml[2 * s], M))));
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
      if (M == -INFINITY) {
        out[r * hd + d] = 0.0f;  // no visible cell
        continue;
      }
      float o = 0.0f;
      for (int64_t s = 0; s < n_splits; ++s) {
        if (ml[2 * s] == -INFINITY) continue;
        o = __fadd_rn(o, __fmul_rn(part_o[(r * n_splits + s) * hd + d], exp_rn(__fsub_rn(ml[2 * s], M))));
      }
      out[r * hd + d] = __fdiv_rn(o, L);
    }
  }
}

template <TensorType T>
bool launch_split(const SplitParams& sp, cudaStream_t stream, const char* site) {
  const auto tokens = static_cast<unsigned>(sp.s.n_tok < kMaxGridYZ ? sp.s.n_tok : kMaxGridYZ);
  const dim3 grid(static_cast<unsigned>(sp.n_splits), static_cast<unsigned>(sp.s.n_head_kv), tokens);
  attn_split_kernel<T><<<grid, kAttnThreads, 0, stream>>>(sp);
  return MINFER_LAUNCH_CHECK(site);
}

}  // namespace

const char* attn_unsupported(const AttnShape& s, TensorType kv_type) {
  if (kv_type != TensorType::F32 && kv_type != TensorType::F16 && kv_type != TensorType::Q8_0)
    return "KV format must be f32, f16 or q8_0";
  if (s.head_dim <= 0 || s.head_dim > kAttnMaxHeadDim) return "head_dim must be in [1, 256]";
  if (s.n_head_kv <= 0 || s.n_head % s.n_head_kv != 0) return "n_head must be a multiple of n_head_kv";
  if (s.n_head / s.n_head_kv > kMaxGroup) return "more than 16 query heads per KV head";
  if (s.n_head / s.n_head_kv * s.head_dim > kAttnMaxGroupDim)
    return "(n_head / n_head_kv) * head_dim exceeds 4096";
  if (s.n_head_kv > kMaxGridYZ) return "more than 65535 KV heads";
  if (kv_type == TensorType::Q8_0 && (s.n_head_kv * s.head_dim) % 32 != 0)
    return "a q8_0 KV row must be a multiple of 32 elements";
  return "";
}

AttnPlan attn_plan(const AttnShape& s, int sm_count) {
  AttnPlan p;
  const int64_t sms = sm_count > 0 ? sm_count : 1;
  const int64_t by_window = (s.n_kv + kMinCellsPerSplit - 1) / kMinCellsPerSplit;
  const int64_t target = (2 * sms + s.n_head_kv - 1) / s.n_head_kv;
  int64_t splits = target < by_window ? target : by_window;
  if (s.n_tok > kAttnDecodeMaxTokens) {
    const auto per_split = static_cast<size_t>(s.n_tok * s.n_head * (s.head_dim + 2)) * sizeof(float);
    const auto fit = static_cast<int64_t>(kPrefillScratchBudget / per_split);
    if (fit < splits) splits = fit;
  }
  if (splits < 1) splits = 1;
  p.chunk = (s.n_kv + splits - 1) / splits;
  p.n_splits = (s.n_kv + p.chunk - 1) / p.chunk;
  // One range writes the output directly; several need partials for the combine kernel.
  const auto rows = static_cast<size_t>(s.n_tok * s.n_head * p.n_splits);
  p.scratch_bytes = p.n_splits == 1 ? 0
                                    : align256(rows * static_cast<size_t>(s.head_dim) * sizeof(float)) +
                                          align256(rows * 2 * sizeof(float));
  return p;
}

bool attention(TensorType kv_type, const AttnShape& s, const AttnPlan& plan, const AttnArgs& a,
               cudaStream_t stream) {
  if (s.n_tok <= 0) return true;
  SplitParams sp{s, plan.n_splits, plan.chunk, a, nullptr, nullptr};
  const auto rows = static_cast<size_t>(s.n_tok * s.n_head * plan.n_splits);
  sp.part_o = static_cast<float*>(a.scratch);
  sp.part_ml = reinterpret_cast<float*>(static_cast<uint8_t*>(a.scratch) +
                                        align256(rows * static_cast<size_t>(s.head_dim) * sizeof(float)));
  bool ok = false;
  switch (kv_type) {
    case TensorType::F32: ok = launch_split<TensorType::F32>(sp, stream, "attn_split_f32"); break;
    case TensorType::F16: ok = launch_split<TensorType::F16>(sp, stream, "attn_split_f16"); break;
    case TensorType::Q8_0: ok = launch_split<TensorType::Q8_0>(sp, stream, "attn_split_q8_0"); break;
    default: return false;
  }
  if (!ok || plan.n_splits == 1) return ok;
  const int64_t out_rows = s.n_tok * s.n_head;
  attn_combine_kernel<<<grid_for(out_rows, 1), 128, 0, stream>>>(sp.part_o, sp.part_ml, out_rows,
                                                                 plan.n_splits, s.head_dim, a.out);
  return MINFER_LAUNCH_CHECK("attn_combine");
}

}  // namespace minfer::cuda
