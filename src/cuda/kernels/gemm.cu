// Prefill GEMM for n > 8 (design: gemm.cuh).
#include "cuda/kernels/gemm.cuh"
#include "cuda/kernels/gemm_dequant.cuh"
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda::mm {
namespace {

constexpr ActKind kind_of(TensorType t) {
  switch (t) {
    case TensorType::F32: return ActKind::F32;
    case TensorType::F16: return ActKind::F16;
    case TensorType::BF16: return ActKind::BF16;
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K: return ActKind::Q8K;
    default: return ActKind::Q8;
  }
}

constexpr int kThreads = 256;  // 16 x 16 threads, 4 x 4 outputs each
static_assert(kGemmBM == 64 && kGemmBN == 64 && kGemmBK == 32, "the thread mapping below");

template <TensorType kType>
__global__ void __launch_bounds__(kThreads)
    gemm_kernel(const uint8_t* __restrict__ w, int64_t m, int64_t row_bytes, ActLayout L,
                const void* __restrict__ acts, float* __restrict__ y, int64_t ldy) {
  __shared__ __align__(16) float ws[kGemmBK][kGemmBM];  // ws[kk][row]
  __shared__ __align__(16) float xs[kGemmBK][kGemmBN];  // xs[kk][token]
  const int tid = static_cast<int>(threadIdx.x);
  const int tm = tid & 15, tn = tid >> 4;  // compute: rows 4 tm .. 4 tm + 3, tokens 4 tn ..
  const int fr = tid & 63, fs = tid >> 6;  // fill: row / token fr, elements 8 fs .. 8 fs + 7
  const int64_t bm = static_cast<int64_t>(blockIdx.x) * kGemmBM;
  const int64_t bn = static_cast<int64_t>(blockIdx.y) * kGemmBN;
  const int64_t wrow = bm + fr, tok = bn + fr;
  const bool w_ok = wrow < m, t_ok = tok < L.n;
  const uint8_t* rp = w + (w_ok ? wrow : 0) * row_bytes;

  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  for (int64_t k0 = 0; k0 < L.k; k0 += kGemmBK) {
    const int64_t e0 = k0 + 8 * fs;
    float v[8];
    if (w_ok && e0 < L.k) {
      dequant8<kType>(rp, e0, L.k, v);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) ws[8 * fs + i][fr] = v[i];
    if (t_ok && e0 < L.k) {
      act8<kind_of(kType)>(acts, L, tok, e0, v);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) xs[8 * fs + i][fr] = v[i];
    __syncthreads();

    float part[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) part[i][j] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kGemmBK; ++kk) {
      const float4 a = *reinterpret_cast<const float4*>(&ws[kk][4 * tm]);
      const float4 b = *reinterpret_cast<const float4*>(&xs[kk][4 * tn]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) part[i][j] = fmaf(av[i], bv[j], part[i][j]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = __fadd_rn(acc[i][j], part[i][j]);
    __syncthreads();  // the tiles are refilled next step
  }

#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int64_t t = bn + 4 * tn + j;
    if (t >= L.n) break;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t r = bm + 4 * tm + i;
      if (r < m) y[r + t * ldy] = acc[i][j];
    }
  }
}

template <TensorType kType>
bool launch_type(const void* w, int64_t m, int64_t row_bytes, const ActLayout& L, const void* acts,
                 float* y, int64_t ldy, cudaStream_t stream, const char* site) {
  const dim3 grid(static_cast<unsigned>((m + kGemmBM - 1) / kGemmBM),
                  static_cast<unsigned>((L.n + kGemmBN - 1) / kGemmBN));
  gemm_kernel<kType><<<grid, kThreads, 0, stream>>>(static_cast<const uint8_t*>(w), m, row_bytes,
                                                    L, acts, y, ldy);
  return MINFER_LAUNCH_CHECK(site);
}

}  // namespace

bool launch_gemm(TensorType type, const void* w, int64_t m, int64_t row_bytes, const ActLayout& L,
                 const void* acts, float* y, int64_t ldy, cudaStream_t stream) {
#define MINFER_GEMM_CASE(T, name) \
  case TensorType::T: return launch_type<TensorType::T>(w, m, row_bytes, L, acts, y, ldy, stream, "gemm_" name);
  switch (type) {
    MINFER_GEMM_CASE(F32, "f32")
    MINFER_GEMM_CASE(F16, "f16")
    MINFER_GEMM_CASE(BF16, "bf16")
    MINFER_GEMM_CASE(Q4_0, "q4_0")
    MINFER_GEMM_CASE(Q4_1, "q4_1")
    MINFER_GEMM_CASE(Q5_0, "q5_0")
    MINFER_GEMM_CASE(Q5_1, "q5_1")
    MINFER_GEMM_CASE(Q8_0, "q8_0")
    MINFER_GEMM_CASE(Q4_K, "q4_K")
    MINFER_GEMM_CASE(Q5_K, "q5_K")
    MINFER_GEMM_CASE(Q6_K, "q6_K")
    default: return false;
  }
#undef MINFER_GEMM_CASE
}

}  // namespace minfer::cuda::mm
