// Matrix-vector / small-batch kernels for F32, F16 and BF16 weights, n = 1..8 token columns,
// bit-identical to the CPU reference vec_dot_f32 / _f16 / _bf16 (quant_ref.h): term t is
// w[t] * a[t] (one rounded f32 multiply; exact for F16 and BF16 products), added to virtual
// lane t % 32, lanes folded by halving. F16/BF16 activations are the converted plane that
// quantize_acts filled (the CPU rounds x to the weight type too); F32 reads x.
//
// A 16-byte word holds VL = 8 (2-byte types) or 4 (F32) consecutive elements, i.e. VL
// consecutive virtual lanes. A row is handled by TPR = 32 / VL threads: thread r loads the
// words g = r, r + TPR, ... of the row, whose elements all fall in virtual lanes VL r .. VL r +
// VL - 1, so it owns those lanes outright and the loads need no exchange between threads. A warp
// computes 32 / TPR rows. The fold: lane k += lane k + w is thread r += thread r + w / VL for
// w >= VL (a shuffle), then in-thread for w < VL.
// The vector path needs 16-byte aligned rows (W aligned, k a multiple of VL, and for F32 x
// aligned); otherwise the same arrangement runs with scalar loads.
#include <type_traits>

#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmvq.cuh"
#include "cuda/kernels/mmvq_common.cuh"

namespace minfer::cuda::mm {
namespace {

template <TensorType kType>
struct FloatT {
  static constexpr int VL = kType == TensorType::F32 ? 4 : 8;
  static constexpr int kBytes = kType == TensorType::F32 ? 4 : 2;
  using Elem = std::conditional_t<kType == TensorType::F32, float, uint16_t>;
  __device__ static float to_float(Elem v) {
    if constexpr (kType == TensorType::F32) return v;
    else if constexpr (kType == TensorType::F16) return half_to_float(v);
    else return bf16_to_float(v);
  }
  /// The VL elements of a 16-byte word.
  __device__ static void unpack(const uint4& q, float* out) {
    const uint32_t in[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (kType == TensorType::F32) {
        out[i] = __uint_as_float(in[i]);
      } else {
        out[2 * i] = to_float(static_cast<uint16_t>(in[i] & 0xFFFFu));
        out[2 * i + 1] = to_float(static_cast<uint16_t>(in[i] >> 16));
      }
    }
  }
};

constexpr int kWarps = 4;

template <TensorType kType, int N, bool kVec>
__global__ void __launch_bounds__(kWarps * 32)
    mmvq_float_kernel(const uint8_t* __restrict__ w, int64_t k, int64_t m, const void* acts_v,
                      int64_t act_stride, float* __restrict__ y, int64_t ldy) {
  using T = FloatT<kType>;
  using Elem = typename T::Elem;
  constexpr int VL = T::VL, TPR = 32 / VL, RPW = 32 / TPR;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * RPW;
  if (row0 >= m) return;  // the whole warp leaves
  const int r = lane % TPR;
  const int64_t row = row0 + lane / TPR;
  // Lanes of a row past the end compute on the last row (their shuffles are needed) and do not
  // store.
  const int64_t row_c = row < m ? row : m - 1;
  const int64_t row_bytes = k * T::kBytes;
  const uint8_t* wrow = w + row_c * row_bytes;
  const Elem* acts = static_cast<const Elem*>(acts_v);

  float acc[N][VL];
#pragma unroll
  for (int c = 0; c < N; ++c)
#pragma unroll
    for (int e = 0; e < VL; ++e) acc[c][e] = 0.0f;

  const int64_t n_words = (k + VL - 1) / VL;
  auto process = [&](const float* wv, int64_t gw) {
#pragma unroll
    for (int c = 0; c < N; ++c) {
      float av[VL];
      const Elem* ac = acts + c * act_stride + gw * VL;
      if constexpr (kVec) {
        T::unpack(__ldg(reinterpret_cast<const uint4*>(ac)), av);
      } else {
#pragma unroll
        for (int e = 0; e < VL; ++e) av[e] = gw * VL + e < k ? T::to_float(ac[e]) : 0.0f;
      }
#pragma unroll
      for (int e = 0; e < VL; ++e) acc[c][e] = __fadd_rn(acc[c][e], __fmul_rn(wv[e], av[e]));
    }
  };

  int64_t gw = r;
  if constexpr (kVec) {
    constexpr int kDepth = 4;  // independent 16-byte weight loads in flight per thread
    for (; gw + (kDepth - 1) * TPR < n_words; gw += kDepth * TPR) {
      uint4 q[kDepth];
#pragma unroll
      for (int u = 0; u < kDepth; ++u) q[u] = ldg_stream16(wrow + (gw + u * TPR) * 16);
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        float wv[VL];
        T::unpack(q[u], wv);
        process(wv, gw + u * TPR);
      }
    }
    for (; gw < n_words; gw += TPR) {
      float wv[VL];
      T::unpack(ldg_stream16(wrow + gw * 16), wv);
      process(wv, gw);
    }
  } else {
    const Elem* we = reinterpret_cast<const Elem*>(wrow);
    for (; gw < n_words; gw += TPR) {
      // Elements past k (only in the last word) read as 0 and add +0.0f to their lane, which
      // changes nothing: a lane starts at +0.0f and can never hold -0.0f (x + -x is +0.0f).
      float wv[VL];
#pragma unroll
      for (int e = 0; e < VL; ++e) wv[e] = gw * VL + e < k ? T::to_float(we[gw * VL + e]) : 0.0f;
      process(wv, gw);
    }
  }

  // Fold the 32 virtual lanes: across threads for w = 16 .. VL, then inside thread r = 0.
#pragma unroll
  for (int c = 0; c < N; ++c) {
#pragma unroll
    for (int s = TPR / 2; s >= 1; s >>= 1)
#pragma unroll
      for (int e = 0; e < VL; ++e)
        acc[c][e] = __fadd_rn(acc[c][e], __shfl_down_sync(kFullMask, acc[c][e], s));
#pragma unroll
    for (int wd = VL / 2; wd >= 1; wd >>= 1)
#pragma unroll
      for (int e = 0; e < wd; ++e) acc[c][e] = __fadd_rn(acc[c][e], acc[c][e + wd]);
  }
  if (r == 0 && row < m) {
#pragma unroll
    for (int c = 0; c < N; ++c) y[row + c * ldy] = acc[c][0];
  }
}

#define MINFER_FLOAT_SITES(name, path)                                                          \
  {                                                                                             \
    "mmvq_" name "_" path "_n1", "mmvq_" name "_" path "_n2", "mmvq_" name "_" path "_n3",      \
        "mmvq_" name "_" path "_n4", "mmvq_" name "_" path "_n5", "mmvq_" name "_" path "_n6", \
        "mmvq_" name "_" path "_n7", "mmvq_" name "_" path "_n8"                              \
  }

template <TensorType kType, bool kVec>
bool launch_type(const MmvqArgs& a, const void* acts, int64_t act_stride, cudaStream_t stream,
                 const char* const* sites) {
  constexpr int RPW = FloatT<kType>::VL;  // rows per warp = 32 / (32 / VL)
  const int64_t rows_per_block = static_cast<int64_t>(kWarps) * RPW;
  const dim3 grid(static_cast<unsigned>((a.m + rows_per_block - 1) / rows_per_block));
  const dim3 block(kWarps * 32);
  const auto* w = static_cast<const uint8_t*>(a.w);
  switch (a.n) {
#define MINFER_CASE(N)                                                                        \
  case N:                                                                                     \
    mmvq_float_kernel<kType, N, kVec><<<grid, block, 0, stream>>>(w, a.k, a.m, acts,          \
                                                                  act_stride, a.y, a.ldy);    \
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

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

bool launch_mmvq_float(TensorType type, const MmvqArgs& a, const void* acts, int64_t act_stride,
                       cudaStream_t stream) {
  static const char* const kF32v[8] = MINFER_FLOAT_SITES("f32", "vec");
  static const char* const kF32s[8] = MINFER_FLOAT_SITES("f32", "scalar");
  static const char* const kF16v[8] = MINFER_FLOAT_SITES("f16", "vec");
  static const char* const kF16s[8] = MINFER_FLOAT_SITES("f16", "scalar");
  static const char* const kBF16v[8] = MINFER_FLOAT_SITES("bf16", "vec");
  static const char* const kBF16s[8] = MINFER_FLOAT_SITES("bf16", "scalar");
  // 16-byte rows: the weights' and (columns apart by act_stride elements) the activations'.
  const bool vec_w = aligned16(a.w) && a.row_bytes % 16 == 0;
  switch (type) {
    case TensorType::F32: {
      const bool vec = vec_w && aligned16(acts) && (act_stride * 4) % 16 == 0;
      return vec ? launch_type<TensorType::F32, true>(a, acts, act_stride, stream, kF32v)
                 : launch_type<TensorType::F32, false>(a, acts, act_stride, stream, kF32s);
    }
    case TensorType::F16: {
      const bool vec = vec_w && aligned16(acts) && (act_stride * 2) % 16 == 0;
      return vec ? launch_type<TensorType::F16, true>(a, acts, act_stride, stream, kF16v)
                 : launch_type<TensorType::F16, false>(a, acts, act_stride, stream, kF16s);
    }
    case TensorType::BF16: {
      const bool vec = vec_w && aligned16(acts) && (act_stride * 2) % 16 == 0;
      return vec ? launch_type<TensorType::BF16, true>(a, acts, act_stride, stream, kBF16v)
                 : launch_type<TensorType::BF16, false>(a, acts, act_stride, stream, kBF16s);
    }
    default: return false;
  }
}

}  // namespace minfer::cuda::mm
