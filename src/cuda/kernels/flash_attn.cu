// Flash-attention prefill kernel (flash_attn.cuh).
#include "cuda/kernels/flash_attn.cuh"

#include <cuda_fp16.h>

#include <climits>
#include <cstdint>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/launch.cuh"
#include "quant/blocks.h"

namespace minfer::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;
constexpr int64_t kMaxHeadDim = 256;

struct FlashParams {
  AttnShape s;
  AttnArgs a;
  int64_t rows;  // n_tok * group
  int group;
  float scale_log2;  // scale * log2(e)
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

/// Four 8x8 b16 matrices; lanes 8i .. 8i+7 give the row addresses of matrix i. Each thread
/// receives row lane/4, columns 2 (lane % 4), +1 of every matrix.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// As ldsm_x4, transposed: each thread receives rows 2 (lane % 4), +1 of column lane/4.
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// c += A (16 x 16 f16, row) * B (16 x 8 f16, col), f32 accumulate.
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// Elements e .. e+7 (e a multiple of 8) of a KV row as eight f16 values.
template <TensorType T>
__device__ __forceinline__ uint4 load8_half(const uint8_t* row, int64_t e) {
  uint4 r;
  if constexpr (T == TensorType::F16) {
    r = *reinterpret_cast<const uint4*>(row + e * 2);
  } else if constexpr (T == TensorType::F32) {
    const float4 x = *reinterpret_cast<const float4*>(row + e * 4);
    const float4 y = *reinterpret_cast<const float4*>(row + e * 4 + 16);
    r.x = pack_half2(x.x, x.y);
    r.y = pack_half2(x.z, x.w);
    r.z = pack_half2(y.x, y.y);
    r.w = pack_half2(y.z, y.w);
  } else {  // Q8_0: ggml-common.h block_q8_0 {half d; int8 qs[32]} (34 bytes, 2-byte aligned)
    const uint8_t* b = row + (e / 32) * static_cast<int64_t>(sizeof(block_q8_0));
    const float d = __half2float(__ushort_as_half(load_u16(b)));
    const uint8_t* qs = b + 2 + (e % 32);
    float f[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t u = load_u16(qs + 2 * i);
      f[2 * i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(u & 0xFF)), d);
      f[2 * i + 1] = __fmul_rn(static_cast<float>(static_cast<int8_t>(u >> 8)), d);
    }
    r.x = pack_half2(f[0], f[1]);
    r.y = pack_half2(f[2], f[3]);
    r.z = pack_half2(f[4], f[5]);
    r.w = pack_half2(f[6], f[7]);
  }
  return r;
}

// grid (row tiles, KV heads); block kFlashThreads. D: head dim, BC: cells per tile.
template <int D, int BC, TensorType T>
__global__ void __launch_bounds__(kFlashThreads) flash_attn_kernel(const FlashParams p) {
  static_assert(D % 32 == 0 && BC % 16 == 0, "tile shapes");
  constexpr int kStride = D + 8;  // halves per smem row: 16-byte rows, conflict-free ldmatrix
  constexpr int kQSteps = D / 16, kSTiles = BC / 8, kOTiles = D / 8;
  __shared__ __align__(16) uint16_t ks[BC * kStride];
  __shared__ __align__(16) uint16_t vs[BC * kStride];
  __shared__ int32_t cpos[BC], cseq[BC];
  __shared__ int32_t blk_pos_max, blk_seq_min, blk_seq_max;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t row0 = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kFlashRows;  // heaviest first
  const int64_t kvh = blockIdx.y;
  const int64_t group = p.group, n_head = p.s.n_head, n_kv = p.s.n_kv;

  if (tid == 0) {
    blk_pos_max = INT_MIN;
    blk_seq_min = INT_MAX;
    blk_seq_max = INT_MIN;
  }
  __syncthreads();
  if (tid < kFlashRows && row0 + tid < p.rows) {
    const int64_t t = (row0 + tid) / group;
    const int32_t ps = p.a.pos[t], sq = p.a.seq[t];
    atomicMax(&blk_pos_max, ps);
    atomicMin(&blk_seq_min, sq);
    atomicMax(&blk_seq_max, sq);
  }

  // This thread's two rows: lane/4 and lane/4 + 8 of the warp's 16.
  const int64_t wrow = row0 + warp * 16;
  const bool warp_active = wrow < p.rows;
  int32_t rpos[2], rseq[2];
  int64_t qoff[2];
  bool rvalid[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int64_t r = wrow + lane / 4 + 8 * i;
    rvalid[i] = r < p.rows;
    const int64_t t = rvalid[i] ? r / group : 0, g = rvalid[i] ? r % group : 0;
    rpos[i] = rvalid[i] ? p.a.pos[t] : -1;  // -1: sees no cell (kv_pos >= 0 for a live cell)
    rseq[i] = rvalid[i] ? p.a.seq[t] : 0;
    qoff[i] = (t * n_head + kvh * group + g) * D;
  }
  // Q fragments (A of m16n8k16): a0 (row, k 2q..2q+1), a1 (row + 8), a2 (row, k + 8), a3 (row + 8, k + 8).
  uint32_t qa[kQSteps][4];
#pragma unroll
  for (int kk = 0; kk < kQSteps; ++kk) {
    const int col = kk * 16 + 2 * (lane & 3);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        float2 x = make_float2(0.0f, 0.0f);
        if (rvalid[i]) x = *reinterpret_cast<const float2*>(p.a.q + qoff[i] + col + 8 * h);
        qa[kk][2 * h + i] = pack_half2(x.x, x.y);
      }
    }
  }
  float o[kOTiles][4];
#pragma unroll
  for (int n = 0; n < kOTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  __syncthreads();  // the block's position / sequence range is complete
  const int32_t qmax = blk_pos_max, smin = blk_seq_min, smax = blk_seq_max;
  const auto* kbase = static_cast<const uint8_t*>(p.a.k);
  const auto* vbase = static_cast<const uint8_t*>(p.a.v);
  const size_t rb = p.a.row_bytes;

  for (int64_t c0 = 0; c0 < n_kv; c0 += BC) {
    __syncthreads();  // every warp is done with the previous tile
    int live = 0;
    if (tid < BC) {
      const int64_t c = c0 + tid;
      int32_t kp = -1, kq = -1;
      if (c < n_kv) {
        kp = p.a.kv_pos[c];
        kq = p.a.kv_seq[c];
      }
      live = kp >= 0 && kp <= qmax && kq >= smin && kq <= smax;
      cpos[tid] = live ? kp : -1;
      cseq[tid] = kq;
    }
    if (!__syncthreads_or(live)) continue;  // no row of the block sees this tile (uniform)
    // Load K and V as f16; cells that are not live become zero rows without reading memory.
    constexpr int kChunks = BC * (D / 8);
    for (int i = tid; i < kChunks; i += kFlashThreads) {
      const int cl = i / (D / 8), e = (i % (D / 8)) * 8;
      uint4 kx = make_uint4(0, 0, 0, 0), vx = kx;
      if (cpos[cl] >= 0) {
        const size_t off = static_cast<size_t>(c0 + cl) * rb;
        kx = load8_half<T>(kbase + off, kvh * D + e);
        vx = load8_half<T>(vbase + off, kvh * D + e);
      }
      *reinterpret_cast<uint4*>(&ks[cl * kStride + e]) = kx;
      *reinterpret_cast<uint4*>(&vs[cl * kStride + e]) = vx;
    }
    __syncthreads();
    if (!warp_active) continue;  // rows past the end: the warp only joins the barriers

    // S = Q K^T (16 rows x BC cells). B fragment of k-step kk, n-tile n: K[n*8 + lane/4][kk*16 + 2(lane%4)].
    float s[kSTiles][4];
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kQSteps; kk += 2) {
#pragma unroll
      for (int n = 0; n < kSTiles; ++n) {
        uint32_t b[4];  // matrices: cols kk*16 + {0, 8, 16, 24}
        ldsm_x4(b, smem_addr(&ks[(n * 8 + (lane & 7)) * kStride + kk * 16 + (lane >> 3) * 8]));
        mma_f16(s[n], qa[kk], b[0], b[1]);
        mma_f16(s[n], qa[kk + 1], b[2], b[3]);
      }
    }
    // Mask (select, never arithmetic on masked scores) and the running maximum per row.
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kSTiles; ++n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = n * 8 + 2 * (lane & 3) + (j & 1), i = j >> 1;
        const int32_t cp = cpos[c];
        const bool vis = cp >= 0 && cp <= rpos[i] && cseq[c] == rseq[i];
        s[n][j] = vis ? s[n][j] * p.scale_log2 : -INFINITY;
        mx[i] = fmaxf(mx[i], s[n][j]);
      }
    }
    float m_use[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xFFFFFFFFu, mx[i], 1));
      mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xFFFFFFFFu, mx[i], 2));
      const float m_new = fmaxf(m[i], mx[i]);
      const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m[i] - m_new);  // m = -inf: 0
      m_use[i] = m_new == -INFINITY ? 0.0f : m_new;
      m[i] = m_new;
      l[i] *= alpha;
#pragma unroll
      for (int n = 0; n < kOTiles; ++n) {
        o[n][2 * i] *= alpha;
        o[n][2 * i + 1] *= alpha;
      }
    }
    // P (f16) as A fragments of the PV product: k-step j takes S n-tiles 2j and 2j + 1.
    uint32_t pa[BC / 16][4];
#pragma unroll
    for (int j = 0; j < BC / 16; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float* sv = s[2 * j + h] + 2 * i;
          const uint32_t u = pack_half2(exp2f(sv[0] - m_use[i]), exp2f(sv[1] - m_use[i]));
          __half2 hv = *reinterpret_cast<const __half2*>(&u);
          l[i] += __low2float(hv) + __high2float(hv);
          pa[j][2 * h + i] = u;
        }
      }
    }
    // O += P V. B fragment of k-step j, n-tile d: V[16j + 2(lane%4)][d*8 + lane/4] via ldmatrix.trans;
    // matrices: (cells +0, dims +0), (cells +8, dims +0), (cells +0, dims +8), (cells +8, dims +8).
#pragma unroll
    for (int j = 0; j < BC / 16; ++j) {
#pragma unroll
      for (int dn = 0; dn < D / 16; ++dn) {
        uint32_t b[4];
        ldsm_x4_trans(b, smem_addr(&vs[(16 * j + (lane & 7) + ((lane >> 3) & 1) * 8) * kStride + dn * 16 +
                                       (lane >> 4) * 8]));
        mma_f16(o[2 * dn], pa[j], b[0], b[1]);
        mma_f16(o[2 * dn + 1], pa[j], b[2], b[3]);
      }
    }
  }
  if (!warp_active) return;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xFFFFFFFFu, l[i], 1);
    l[i] += __shfl_xor_sync(0xFFFFFFFFu, l[i], 2);
    if (!rvalid[i]) continue;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;  // no visible cell: zeros (o is 0 too)
    float* out = p.a.out + qoff[i] + 2 * (lane & 3);
#pragma unroll
    for (int n = 0; n < kOTiles; ++n)
      *reinterpret_cast<float2*>(out + n * 8) = make_float2(o[n][2 * i] * inv, o[n][2 * i + 1] * inv);
  }
}

template <int D, TensorType T>
bool launch(const FlashParams& fp, cudaStream_t stream, const char* site) {
  const auto tiles = static_cast<unsigned>((fp.rows + kFlashRows - 1) / kFlashRows);
  const dim3 grid(tiles, static_cast<unsigned>(fp.s.n_head_kv));
  flash_attn_kernel<D, kFlashTileCells(D), T><<<grid, kFlashThreads, 0, stream>>>(fp);
  return MINFER_LAUNCH_CHECK(site);
}

template <TensorType T>
bool launch_type(const FlashParams& fp, cudaStream_t stream, const char* s64, const char* s128,
                 const char* s256) {
  switch (fp.s.head_dim) {
    case 64: return launch<64, T>(fp, stream, s64);
    case 128: return launch<128, T>(fp, stream, s128);
    case 256: return launch<256, T>(fp, stream, s256);
    default: return false;
  }
}

bool aligned(const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace

const char* flash_attn_unsupported(const AttnShape& s, TensorType kv_type) {
  if (s.n_tok <= kAttnDecodeMaxTokens) return "decode shapes (nt <= 8) take the decode kernels";
  if (kv_type != TensorType::F32 && kv_type != TensorType::F16 && kv_type != TensorType::Q8_0)
    return "KV format must be f32, f16 or q8_0";
  if (s.head_dim != 64 && s.head_dim != 128 && s.head_dim != kMaxHeadDim) return "head_dim must be 64, 128 or 256";
  if (s.n_head_kv <= 0 || s.n_head % s.n_head_kv != 0) return "n_head must be a multiple of n_head_kv";
  if (s.n_head_kv > kMaxGridYZ) return "more than 65535 KV heads";
  if ((s.n_tok * (s.n_head / s.n_head_kv) + kFlashRows - 1) / kFlashRows > INT32_MAX)
    return "too many query rows for one grid";
  return "";
}

bool flash_attn_preferred(const AttnShape& s, TensorType kv_type, int sm_count) {
  if (*flash_attn_unsupported(s, kv_type) != '\0') return false;
  const int64_t blocks = (s.n_tok * (s.n_head / s.n_head_kv) + kFlashRows - 1) / kFlashRows * s.n_head_kv;
  return !(2 * blocks < sm_count && s.n_kv > kFlashLongWindow);
}

bool flash_attn(TensorType kv_type, const AttnShape& s, const AttnArgs& a, cudaStream_t stream) {
  if (s.n_tok <= 0) return true;
  const bool vec16 = kv_type != TensorType::Q8_0;
  if (*flash_attn_unsupported(s, kv_type) != '\0' || !aligned(a.q, 8) || !aligned(a.out, 8) ||
      (vec16 && (!aligned(a.k, 16) || !aligned(a.v, 16) || a.row_bytes % 16 != 0)) ||
      (!vec16 && (!aligned(a.k, 2) || !aligned(a.v, 2) || a.row_bytes % 2 != 0))) {
    note_launch_failure("flash_attn_bad_args", cudaErrorInvalidValue);
    return false;
  }
  FlashParams fp{s, a, 0, 0, 0.0f};
  fp.group = static_cast<int>(s.n_head / s.n_head_kv);
  fp.rows = s.n_tok * fp.group;
  fp.scale_log2 = a.scale * kLog2e;
  switch (kv_type) {
    case TensorType::F32:
      return launch_type<TensorType::F32>(fp, stream, "flash_attn_f32_d64", "flash_attn_f32_d128",
                                          "flash_attn_f32_d256");
    case TensorType::F16:
      return launch_type<TensorType::F16>(fp, stream, "flash_attn_f16_d64", "flash_attn_f16_d128",
                                          "flash_attn_f16_d256");
    case TensorType::Q8_0:
      return launch_type<TensorType::Q8_0>(fp, stream, "flash_attn_q8_0_d64", "flash_attn_q8_0_d128",
                                           "flash_attn_q8_0_d256");
    default: return false;
  }
}

}  // namespace minfer::cuda
