// The matmul API (matmul.cuh): argument checks, the activation layout, and the choice between
// the MMVQ kernels (n <= 8, mmvq.cuh), the int8 tensor-core MMQ (n > 8, quantized weights,
// mmq.cuh) and the prefill GEMM (n > 8 otherwise, gemm.cuh).
#include "cuda/kernels/matmul.cuh"

#include <cstring>
#include <vector>

#include "core/env.h"
#include "core/fp16.h"
#include "cuda/kernels/gemm.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmq.cuh"
#include "cuda/kernels/mmvq.cuh"
#include "cuda/kernels/quantize_acts.cuh"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace minfer::cuda {
namespace {

using mm::ActKind;
using mm::ActLayout;

constexpr int64_t kMaxK = int64_t{1} << 30;
constexpr int64_t kMaxGemmN = int64_t{65535} * mm::kGemmBN;

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

bool bad_args(const char* site) {
  note_launch_failure(site, cudaErrorInvalidValue);
  return false;
}

/// Reports an error latched before this call (never blamed on our launches).
bool latched(const char* site) {
  const cudaError_t e = take_latched_error();
  if (e == cudaSuccess) return false;
  note_launch_failure(site, e);
  return true;
}

/// The K-quant MMVQ: the direct-load kernels where they apply (Q4_K/Q5_K with 16-byte aligned
/// weights, mmvq_kquants_direct.cu; Q6_K rows of up to 4096 elements, mmvq_q6k_direct.cu), else
/// the shared-memory staged one. MINFER_CUDA_MMVQ_STAGED=1 forces the staged kernel for all three
/// types; MINFER_CUDA_MMVQ_Q6K=0 for Q6_K only, =2 takes the direct Q6_K kernel for any row
/// length (A/B measurements).
bool launch_kquant(TensorType type, const mm::MmvqBatch& b, const mm::Q8KView& acts, cudaStream_t stream) {
  if (!env_flag("MINFER_CUDA_MMVQ_STAGED")) {
    bool launched = false;
    bool ok = true;
    if (type != TensorType::Q6_K) {
      const int kb = static_cast<int>(env_int("MINFER_CUDA_MMVQ_KB", 0));
      ok = mm::launch_mmvq_kquant_direct(type, b, acts, stream, kb, &launched);
    } else if (const int64_t q6 = env_int("MINFER_CUDA_MMVQ_Q6K", 1); q6 != 0) {
      ok = mm::launch_mmvq_q6k_direct(b, acts, stream, q6 == 2, &launched);
    }
    if (launched) return ok;
  }
  return mm::launch_mmvq_kquant(type, b, acts, stream);
}

}  // namespace

namespace mm {
bool mmvq_high_occupancy(int64_t k) {
  const int64_t mode = env_int("MINFER_CUDA_MMVQ_OCC", 0);
  return mode == 2 || (mode != 1 && k <= kMmvqHighOccMaxK);
}
}  // namespace mm

bool matmul_supported(TensorType type, int64_t k, const char** why) {
  auto no = [&](const char* reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
  ActKind kind;
  if (!mm::act_kind_for(type, &kind)) return no("the CUDA backend has no matmul kernel for this type");
  if (k < 1 || k > kMaxK) return no("row length k must be in 1 .. 2^30");
  if (kind == ActKind::Q8 && k % 32 != 0) return no("row length k must be a multiple of 32 (the block size)");
  if (kind == ActKind::Q8K && k % 256 != 0)
    return no("row length k must be a multiple of 256 (the super-block size)");
  return true;
}

size_t quantized_activation_bytes(TensorType type, int64_t k, int64_t n) {
  ActKind kind;
  if (!matmul_supported(type, k, nullptr) || n <= 0 || !mm::act_kind_for(type, &kind)) return 0;
  return mm::act_layout(kind, k, n).total;
}

bool quantize_activations(TensorType type, const float* x, int64_t k, int64_t n, void* qx,
                          cudaStream_t stream) {
  ActKind kind;
  if (!matmul_supported(type, k, nullptr) || n < 0 || !mm::act_kind_for(type, &kind))
    return bad_args("quantize_activations_bad_args");
  if (kind == ActKind::F32 || n == 0) return true;
  if (!aligned(x, 4) || !aligned(qx, 16)) return bad_args("quantize_activations_bad_args");
  if (latched("latched_before_quantize_activations")) return false;
  return mm::launch_quantize_acts(mm::act_layout(kind, k, n), x, qx, stream);
}

bool matmul(TensorType type, const void* W, int64_t k, int64_t m, const float* x, const void* qx,
            int64_t n, float* y, int64_t ldy, cudaStream_t stream) {
  ActKind kind;
  if (!matmul_supported(type, k, nullptr) || m < 0 || n < 0 || !mm::act_kind_for(type, &kind))
    return bad_args("matmul_bad_args");
  if (m == 0 || n == 0) return true;
  const void* acts = kind == ActKind::F32 ? static_cast<const void*>(x) : qx;
  if (ldy < m || n > kMaxGemmN || !aligned(W, type == TensorType::F32 ? 4 : 2) ||
      !aligned(y, 4) || !aligned(x, 4) || !aligned(acts, kind == ActKind::F32 ? 4 : 16))
    return bad_args("matmul_bad_args");
  if (latched("latched_before_matmul")) return false;

  const ActLayout L = mm::act_layout(kind, k, n);
  const int64_t rb = static_cast<int64_t>(row_bytes(type, k));
  if (n > 8) {
    // MMQ for quantized weights; the GEMM for the float types, for W that is not 16-byte
    // aligned, and for every type under MINFER_NO_MMQ=1.
    if (n >= mm::kMmqMinTokens && mm::mmq_accepts(type, W, m, n) && !env_flag("MINFER_NO_MMQ"))
      return mm::launch_mmq(type, W, m, rb, L, acts, y, ldy, stream,
                            static_cast<int>(env_int("MINFER_CUDA_MMQ_TILE", 0)));
    return mm::launch_gemm(type, W, m, rb, L, acts, y, ldy, stream);
  }

  const mm::MmvqArgs a{W, k, m, rb, static_cast<int>(n), y, ldy};
  switch (kind) {
    case ActKind::Q8:
      return mm::launch_mmvq_legacy(type, mm::single_batch(a), mm::q8_view(L, qx), stream);
    case ActKind::Q8K: return launch_kquant(type, mm::single_batch(a), mm::q8k_view(L, qx), stream);
    case ActKind::F32: return mm::launch_mmvq_float(type, a, x, k, stream);
    case ActKind::F16:
    case ActKind::BF16: return mm::launch_mmvq_float(type, a, qx, L.stride, stream);
  }
  return bad_args("matmul_bad_args");
}

bool same_activations(TensorType a, TensorType b) {
  if (a == b) return true;
  ActKind ka, kb;
  return mm::act_kind_for(a, &ka) && mm::act_kind_for(b, &kb) && ka == kb &&
         (ka == ActKind::Q8 || ka == ActKind::Q8K);
}

bool matmul_fused_supported(TensorType type, int64_t k, int64_t n) {
  ActKind kind;
  return matmul_supported(type, k, nullptr) && mm::act_kind_for(type, &kind) &&
         (kind == ActKind::Q8 || kind == ActKind::Q8K) && n >= 1 && n <= 8;
}

namespace {

/// The checks every fused matrix-vector call shares; fills the batch's type-wide fields.
bool fused_args_ok(TensorType type, int64_t k, const void* qx, int64_t n, mm::MmvqBatch* b) {
  if (!matmul_fused_supported(type, k, n) || !aligned(qx, 16)) return false;
  b->k = k;
  b->row_bytes = static_cast<int64_t>(row_bytes(type, k));
  b->n = static_cast<int>(n);
  for (int s = 0; s < b->n_seg; ++s) {
    const mm::MmvqSegment& g = b->seg[s];
    if (g.w == nullptr || g.y == nullptr || g.m < 1 || g.ldy < g.m || !aligned(g.w, 2) || !aligned(g.y, 4) ||
        (g.res != nullptr && g.ldr < g.m))
      return false;
  }
  return true;
}

bool launch_batch(TensorType type, const mm::MmvqBatch& b, const void* qx, cudaStream_t stream) {
  ActKind kind;
  mm::act_kind_for(type, &kind);
  const ActLayout L = mm::act_layout(kind, b.k, b.n);
  if (kind == ActKind::Q8)
    return mm::launch_mmvq_legacy(type, b, mm::q8_view(L, qx), stream);
  return launch_kquant(type, b, mm::q8k_view(L, qx), stream);
}

}  // namespace

bool matmul_fused_serves(TensorType type, int64_t k, const MatmulOut* outs, int n_outs, int64_t n) {
  if (matmul_fused_supported(type, k, n)) return true;
  if (outs == nullptr || n_outs < 1 || n_outs > mm::kMmqMaxOutputs || n < mm::kMmqMinTokens || n > kMaxGemmN ||
      !matmul_supported(type, k, nullptr) || env_flag("MINFER_NO_MMQ"))
    return false;
  for (int s = 0; s < n_outs; ++s)
    if (!mm::mmq_accepts(type, outs[s].w, outs[s].m, n)) return false;
  return true;
}

bool matmul_fused(TensorType type, int64_t k, const MatmulOut* outs, int n_outs, const void* qx, int64_t n,
                  cudaStream_t stream) {
  if (n > 8) {  // prefill: one MMQ grid with the adds in its epilogue
    if (!matmul_fused_serves(type, k, outs, n_outs, n) || !aligned(qx, 16)) return bad_args("matmul_fused_bad_args");
    for (int s = 0; s < n_outs; ++s) {
      const MatmulOut& o = outs[s];
      if (o.y == nullptr || o.ldy < o.m || !aligned(o.y, 4) || (o.residual != nullptr && o.ldr < o.m))
        return bad_args("matmul_fused_bad_args");
    }
    if (latched("latched_before_matmul")) return false;
    ActKind kind;
    mm::act_kind_for(type, &kind);
    return mm::launch_mmq_batch(type, outs, n_outs, static_cast<int64_t>(row_bytes(type, k)),
                                mm::act_layout(kind, k, n), qx, stream,
                                static_cast<int>(env_int("MINFER_CUDA_MMQ_TILE", 0)));
  }
  mm::MmvqBatch b;
  if (outs == nullptr || n_outs < 1 || n_outs > mm::kMmvqMaxSegments) return bad_args("matmul_fused_bad_args");
  b.n_seg = n_outs;
  for (int s = 0; s < n_outs; ++s)
    b.seg[s] = {outs[s].w, outs[s].m, outs[s].y, outs[s].ldy, outs[s].bias, outs[s].residual, outs[s].ldr};
  if (!fused_args_ok(type, k, qx, n, &b)) return bad_args("matmul_fused_bad_args");
  if (latched("latched_before_matmul")) return false;
  return launch_batch(type, b, qx, stream);
}

bool matmul_swiglu(TensorType type, int64_t k, int64_t m, const void* w_gate, const void* w_up, const void* qx,
                   int64_t n, float* y, int64_t ldy, const float* residual, int64_t ldr, cudaStream_t stream) {
  mm::MmvqBatch b;
  b.glu = true;
  b.n_seg = 2;
  b.seg[0] = {w_gate, m, y, ldy, nullptr, residual, ldr};
  b.seg[1] = {w_up, m, y, ldy, nullptr, nullptr, 0};
  if (!fused_args_ok(type, k, qx, n, &b)) return bad_args("matmul_swiglu_bad_args");
  if (latched("latched_before_matmul")) return false;
  return launch_batch(type, b, qx, stream);
}

bool quantized_activations_to_host(TensorType type, const void* qx, int64_t k, int64_t n,
                                   void* host, cudaStream_t stream) {
  ActKind kind;
  if (!matmul_supported(type, k, nullptr) || n <= 0 || !mm::act_kind_for(type, &kind) ||
      kind == ActKind::F32)
    return false;
  const ActLayout L = mm::act_layout(kind, k, n);
  std::vector<uint8_t> buf(L.total);
  if (cudaMemcpyAsync(buf.data(), qx, L.total, cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess)
    return false;
  auto* out = static_cast<uint8_t*>(host);
  const size_t kn = static_cast<size_t>(k) * static_cast<size_t>(n);
  switch (kind) {
    case ActKind::F16:
    case ActKind::BF16:
      for (int64_t t = 0; t < n; ++t)
        std::memcpy(out + static_cast<size_t>(t * k) * 2, buf.data() + static_cast<size_t>(t * L.stride) * 2,
                    static_cast<size_t>(k) * 2);
      return true;
    case ActKind::Q8: {
      const auto* qs = reinterpret_cast<const int8_t*>(buf.data() + L.qs_off);
      const auto* ds = reinterpret_cast<const float*>(buf.data() + L.ds_off);
      const bool q8_1 = type == TensorType::Q4_1 || type == TensorType::Q5_1;
      for (size_t b = 0; b < kn / 32; ++b) {
        const uint16_t d = fp32_to_fp16(ds[2 * b]);  // exact: the value came from a half
        if (q8_1) {
          block_q8_1 blk{};
          blk.d = d;
          blk.s = 0;
          std::memcpy(blk.qs, qs + 32 * b, 32);
          std::memcpy(out + b * sizeof blk, &blk, sizeof blk);
        } else {
          block_q8_0 blk{};
          blk.d = d;
          std::memcpy(blk.qs, qs + 32 * b, 32);
          std::memcpy(out + b * sizeof blk, &blk, sizeof blk);
        }
      }
      return true;
    }
    case ActKind::Q8K: {
      const auto* qs = reinterpret_cast<const int8_t*>(buf.data() + L.qs_off);
      const auto* d = reinterpret_cast<const float*>(buf.data() + L.ds_off);
      const auto* bs = reinterpret_cast<const int16_t*>(buf.data() + L.bsums_off);
      for (size_t b = 0; b < kn / 256; ++b) {
        block_q8_K blk{};
        blk.d = d[b];
        std::memcpy(blk.qs, qs + 256 * b, 256);
        std::memcpy(blk.bsums, bs + 16 * b, sizeof blk.bsums);
        std::memcpy(out + b * sizeof blk, &blk, sizeof blk);
      }
      return true;
    }
    case ActKind::F32: break;
  }
  return false;
}

}  // namespace minfer::cuda
