// The matmul API (matmul.cuh): argument checks, the activation layout, and the choice between
// the MMVQ kernels (n <= 8, mmvq.cuh), the int8 tensor-core MMQ (n > 8, quantized weights,
// mmq.cuh) and the prefill GEMM (n > 8 otherwise, gemm.cuh).
#include "cuda/kernels/matmul.cuh"

#include <cstring>
#include <vector>

#include "core/env.h"
#include "core/fp16.h"
#include "cuda/kernels/gemm.cuh"
#include "cuda/kernels/hgemm.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmq.cuh"
#include "cuda/kernels/mmvq.cuh"
#include "cuda/kernels/quantize_acts.cuh"
#include "cuda/kernels/smem_optin.cuh"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace minfer::cuda {
namespace {

using mm::ActKind;
using mm::ActLayout;

constexpr int64_t kMaxK = int64_t{1} << 30;
constexpr int64_t kMaxGemmN = int64_t{65535} * mm::kGemmBN;

bool aligned(const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0; }

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

/// hgemm_plan for this device, with the A/B overrides MINFER_CUDA_HGEMM_TILE (64 or 128 rows),
/// MINFER_CUDA_HGEMM_SPLIT (k splits, capped by max_splits and by what k allows),
/// MINFER_CUDA_HGEMM_BK and MINFER_CUDA_HGEMM_WGMMA (0: the mma.sync build on sm_90a too).
mm::HgemmPlan plan_for(int64_t n, int64_t m, int64_t k, int max_splits, bool bf16 = false) {
  const int64_t tile = env_int("MINFER_CUDA_HGEMM_TILE", 0);
  const int64_t split = env_int("MINFER_CUDA_HGEMM_SPLIT", 0);
  const int64_t bk = env_int("MINFER_CUDA_HGEMM_BK", 0);
  mm::HgemmPlan p = mm::hgemm_plan(n, m, k, context_sm_count(), split > 0 ? 1 : max_splits);
  if (tile != 0) p.bw = static_cast<int>(tile);
  if (bk != 0) p.bk = static_cast<int>(bk);
  // The sm_90a wgmma build where it exists (hgemm_fit falls back), unless turned off or a 32-element
  // stage is asked for (the wgmma build has 64-element stages only).
  p.wgmma = p.bk == 64 && env_int("MINFER_CUDA_HGEMM_WGMMA", 1) != 0;
  if (split > 0) {
    int s = static_cast<int>(split < max_splits ? split : max_splits);
    while (s > 1 && mm::hgemm_split_length(k, s) * (s - 1) >= k) --s;
    p.splits = s < 1 ? 1 : s;
  }
  return mm::hgemm_fit(p, bf16);  // bw = 0: no instantiation got its shared memory
}

/// True when some f16 GEMM instantiation can launch on this device (its shared memory opted in).
bool hgemm_available() { return mm::hgemm_fit(mm::HgemmPlan{64, 1, 32}, false).bw != 0; }

/// Quantized types (the ones matmul_f16 dequantizes).
bool quantized(TensorType t) {
  ActKind kind;
  return mm::act_kind_for(t, &kind) && (kind == ActKind::Q8 || kind == ActKind::Q8K);
}

/// Rows per dequantized chunk for an m-row matrix of k-element rows when at most `avail` bytes
/// hold the chunk: the whole matrix if it fits, else equal chunks rounded up to 128 rows (64
/// when less than 128 fit); 0 when not even 64 rows fit.
int64_t f16_chunk_rows(int64_t k, int64_t m, size_t avail) {
  const int64_t fit = static_cast<int64_t>(avail / (static_cast<size_t>(k) * 2));
  if (fit >= m) return m;
  const int64_t unit = fit >= 128 ? 128 : 64;
  if (fit < unit) return 0;
  const int64_t max_rows = fit / unit * unit;
  const int64_t chunks = (m + max_rows - 1) / max_rows;
  const int64_t rows = ((m + chunks - 1) / chunks + unit - 1) / unit * unit;
  return rows <= max_rows ? rows : max_rows;
}

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

thread_local L2AheadHint t_l2_ahead;

}  // namespace

L2AheadHint l2_ahead_prefix(const L2AheadHint& h, size_t cap) {
  L2AheadHint a;
  a.side_by_side = h.side_by_side;
  const int n = h.n < 0 ? 0 : h.n > 3 ? 3 : h.n;
  size_t left = cap;
  for (int i = 0; i < n && left > 0; ++i) {
    if (h.w[i] == nullptr || h.bytes[i] == 0) continue;
    const auto p = reinterpret_cast<uintptr_t>(h.w[i]);
    const uintptr_t p16 = (p + 15) & ~uintptr_t{15};
    if (h.bytes[i] <= p16 - p) continue;
    size_t len = h.bytes[i] - (p16 - p);
    const size_t share = h.side_by_side ? cap / static_cast<size_t>(n) : left;
    if (len > share) len = share;
    len &= ~size_t{15};
    if (len > kL2AheadMaxRange) len = kL2AheadMaxRange;
    if (len == 0) continue;
    a.w[a.n] = reinterpret_cast<const void*>(p16);
    a.bytes[a.n] = len;
    ++a.n;
    if (!h.side_by_side) left -= len;
  }
  return a;
}

namespace {

/// The lane kernel's tuning from the environment, with the L2 prefetch of the thread's hint.
mm::LaneTuning lane_tuning() {
  mm::LaneTuning tu;
  tu.stages = static_cast<int>(env_int("MINFER_CUDA_MMVQ_LANE_STAGES", 0));
  tu.block_warps = static_cast<int>(env_int("MINFER_CUDA_MMVQ_LANE_BLOCK_WARPS", 0));
  tu.max_warps = env_int("MINFER_CUDA_MMVQ_LANE_WARPS", 0);
  tu.split = static_cast<int>(env_int("MINFER_CUDA_MMVQ_LANE_SPLIT", 0));
  if (const int64_t mb = env_int("MINFER_CUDA_L2_AHEAD_MB", 0); mb > 0) {
    const L2AheadHint pre = l2_ahead_prefix(t_l2_ahead, static_cast<size_t>(mb) << 20);
    for (int i = 0; i < pre.n; ++i) {
      tu.ahead.p[i] = pre.w[i];
      tu.ahead.bytes[i] = static_cast<uint32_t>(pre.bytes[i]);
    }
    tu.ahead.n = pre.n;
  }
  return tu;
}

/// The lane kernel (mmvq_lane.cu) with the tuning the environment asks for.
bool launch_lane(TensorType type, const mm::MmvqBatch& b, const mm::Q8KView& acts, const float* xf, cudaStream_t stream,
                 bool* launched) {
  return mm::launch_mmvq_lane(type, b, acts, xf, stream, lane_tuning(), launched);
}

/// The K-quant MMVQ: for one token column the one-super-block-per-lane kernel (mmvq_lane.cu) where
/// it applies (MINFER_CUDA_MMVQ_LANE=0: never); for 3..8 columns the tensor-core kernel
/// (mmvq_mma.cu; MINFER_CUDA_MMVQ_MMA=0: never, =2: its 8-warp variant); else the direct-load
/// kernels where they apply (Q4_K/Q5_K with 16-byte aligned weights, mmvq_kquants_direct.cu; Q6_K
/// rows of up to 4096 elements, mmvq_q6k_direct.cu), else the shared-memory staged one.
/// MINFER_CUDA_MMVQ_STAGED=1 forces the staged kernel for all three types; MINFER_CUDA_MMVQ_Q6K=0
/// for Q6_K only, =2 takes the direct Q6_K kernel for any row length (A/B measurements).
bool launch_kquant(TensorType type, const mm::MmvqBatch& b, const mm::Q8KView& acts, cudaStream_t stream) {
  if (!env_flag("MINFER_CUDA_MMVQ_STAGED")) {
    bool launched = false;
    bool ok = true;
    if (const int64_t lane = env_int("MINFER_CUDA_MMVQ_LANE", 1); b.n == 1 && lane != 0) {
      ok = launch_lane(type, b, acts, nullptr, stream, &launched);
      if (launched) return ok;
    }
    // Same bits as the dp4a kernels (device test CudaMmvqMma). Its time hardly depends on the
    // column count, the dp4a kernels' grows with it: on the H100 (2026-12-08, 7B Q4_K_M) a verify
    // forward of 2 tokens took 4.2 ms with dp4a and 4.5 ms with tensor cores, of 4: 6.4 / 4.7 ms,
    // of 8: 10.8 / 4.7 ms (docs/perf/2026-12-08-session29-device.md). Hence 3..8 columns only.
    if (const int64_t mma = env_int("MINFER_CUDA_MMVQ_MMA", 1); b.n >= 3 && mma != 0) {
      ok = mm::launch_mmvq_kquant_mma(type, b, acts, stream, static_cast<int>(mma), &launched);
      if (launched) return ok;
    }
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
    // F16/BF16 weights on their own tensor cores when rows and x are 16-byte chunked.
    const mm::HgemmPlan plan = plan_for(n, m, k, 1, kind == ActKind::BF16);
    if ((kind == ActKind::F16 || kind == ActKind::BF16) && k % 8 == 0 && aligned(W, 16) && aligned(acts, 16) &&
        plan.bw != 0) {
      mm::HgemmOut o;
      o.w = static_cast<const uint16_t*>(W);
      o.ldw = k;
      o.m = m;
      o.y = y;
      o.ldy = ldy;
      return mm::launch_hgemm(kind == ActKind::BF16, static_cast<const uint16_t*>(acts), L.stride, n, k, o,
                              plan, nullptr, 0, stream);
    }
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

void set_l2_ahead_hint(const L2AheadHint& hint) { t_l2_ahead = hint; }

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

bool matmul_fused_from_f32(TensorType type, int64_t k, const MatmulOut* outs, int n_outs, const float* x,
                           cudaStream_t stream, bool* launched) {
  *launched = false;
  ActKind kind;
  if (!mm::act_kind_for(type, &kind) || kind != ActKind::Q8K || env_int("MINFER_CUDA_MMVQ_LANE", 1) == 0 ||
      env_int("MINFER_CUDA_MMVQ_LANE_QUANTIZE", 1) == 0 || env_flag("MINFER_CUDA_MMVQ_STAGED"))
    return true;
  if (outs == nullptr || n_outs < 1 || n_outs > mm::kMmvqMaxSegments || x == nullptr) return true;
  mm::MmvqBatch b;
  b.n_seg = n_outs;
  for (int s = 0; s < n_outs; ++s)
    b.seg[s] = {outs[s].w, outs[s].m, outs[s].y, outs[s].ldy, outs[s].bias, outs[s].residual, outs[s].ldr};
  if (!fused_args_ok(type, k, x, 1, &b)) return true;  // the caller's quantize + matmul_fused path decides
  if (latched("latched_before_matmul")) return false;
  const mm::Q8KView none{nullptr, nullptr, nullptr, k, k / 256};
  return launch_lane(type, b, none, x, stream, launched);
}

bool matmul_mixed_pair(TensorType type_a, TensorType type_b) { return mm::lane_mixed_pair(type_a, type_b); }

bool matmul_fused_mixed(TensorType type_a, TensorType type_b, int64_t k, const MatmulOut* outs, int n_a, int n_outs,
                        const void* qx, cudaStream_t stream, bool* launched) {
  *launched = false;
  if (env_int("MINFER_CUDA_MMVQ_LANE_MIXED", 1) == 0 || env_int("MINFER_CUDA_MMVQ_LANE", 1) == 0 ||
      env_flag("MINFER_CUDA_MMVQ_STAGED") || !mm::lane_mixed_pair(type_a, type_b) || outs == nullptr || n_a < 1 ||
      n_outs <= n_a || n_outs > mm::kMmvqMaxSegments)
    return true;
  mm::MmvqBatch b;
  b.n_seg = n_outs;
  for (int s = 0; s < n_outs; ++s)
    b.seg[s] = {outs[s].w, outs[s].m, outs[s].y, outs[s].ldy, outs[s].bias, outs[s].residual, outs[s].ldr};
  if (!fused_args_ok(type_a, k, qx, 1, &b) || !matmul_fused_supported(type_b, k, 1)) return true;
  if (latched("latched_before_matmul")) return false;
  const ActLayout L = mm::act_layout(ActKind::Q8K, k, 1);
  return mm::launch_mmvq_lane_mixed(type_a, type_b, b, n_a, static_cast<int64_t>(row_bytes(type_b, k)),
                                    mm::q8k_view(L, qx), nullptr, stream, lane_tuning(), launched);
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

bool f16_gemm_serves(TensorType type, int64_t k, int64_t n) {
  if (n <= 8 || !quantized(type) || !matmul_supported(type, k, nullptr) || env_flag("MINFER_NO_MMQ")) return false;
  const std::string mode = env_choice("MINFER_CUDA_PREFILL_MATMUL");
  // auto: MMQ below kF16GemmMinTokens, and on sm_90 (split-k MMQ for small grids) up to
  // kMmqDecodeMaxTokens, the token counts of decode steps and verifies.
  if (mode == "mmq" || (mode != "f16" && (n < mm::kF16GemmMinTokens ||
                                          (n <= mm::kMmqDecodeMaxTokens && context_compute_capability() >= 90))))
    return false;
  return hgemm_available();
}

namespace {

/// The scratch matmul_f16 asks for: [f16 activations][partial sums][a chunk of `rows` rows].
struct F16Layout {
  int64_t rows = 0;          ///< dequantized rows per chunk
  size_t act_bytes = 0;      ///< f16 activations (256-aligned)
  size_t partial_bytes = 0;  ///< partial sums of the chunk's split plan (256-aligned)
  size_t total = 0;
};

/// Rows per chunk of an m-row matrix of k-element rows within MINFER_CUDA_F16_CHUNK_MB (at
/// least 64 rows, or all of a smaller matrix).
int64_t default_chunk_rows(int64_t k, int64_t m) {
  const size_t cap = static_cast<size_t>(env_int("MINFER_CUDA_F16_CHUNK_MB", 512)) << 20;
  const int64_t rows = f16_chunk_rows(k, m, cap);
  return rows > 0 ? rows : (m < 64 ? m : 64);
}

F16Layout f16_layout(int64_t k, const int64_t* ms, int n_ms, int64_t n) {
  F16Layout l;
  int64_t m_max = 0;
  for (int i = 0; i < n_ms; ++i) m_max = ms[i] > m_max ? ms[i] : m_max;
  l.rows = default_chunk_rows(k, m_max);
  l.act_bytes = align256(static_cast<size_t>(n * k) * 2);
  // The partial sums of the largest split plan any chunk of any output gets (full chunks and
  // each output's last, shorter one), so every output keeps the plan it would get alone.
  size_t partial = 0;
  for (int i = 0; i < n_ms; ++i)
    for (const int64_t cnt : {ms[i] < l.rows ? ms[i] : l.rows, ms[i] % l.rows}) {
      if (cnt < 1) continue;
      const size_t b = mm::hgemm_partial_bytes(n, cnt, plan_for(n, cnt, k, mm::kHgemmMaxSplits).splits);
      partial = b > partial ? b : partial;
    }
  l.partial_bytes = align256(partial);
  l.total = l.act_bytes + l.partial_bytes + static_cast<size_t>(l.rows * k) * 2;
  return l;
}

}  // namespace

size_t f16_gemm_scratch_bytes(TensorType type, int64_t k, const int64_t* ms, int n_ms, int64_t n) {
  if (!quantized(type) || !matmul_supported(type, k, nullptr) || n < 1 || ms == nullptr || n_ms < 1) return 0;
  for (int i = 0; i < n_ms; ++i)
    if (ms[i] < 1) return 0;
  return f16_layout(k, ms, n_ms, n).total;
}

size_t f16_gemm_scratch_bytes(TensorType type, int64_t k, int64_t m_max, int64_t n) {
  return f16_gemm_scratch_bytes(type, k, &m_max, 1, n);
}

namespace {

/// The scratch ffn_f16 uses: [f16 x][f16 h][partial sums][a chunk of dequantized rows], the
/// chunk holding `rows_gu` interleaved gate/up rows of k or `rows_d` down rows of ff elements.
struct FfnLayout {
  int64_t rows_gu = 0, rows_d = 0;
  size_t x_bytes = 0, h_bytes = 0, partial_bytes = 0, w_bytes = 0, total = 0;
};

FfnLayout ffn_layout(int64_t k, int64_t ff, int64_t m, int64_t n) {
  FfnLayout l;
  l.rows_gu = default_chunk_rows(k, 2 * ff);
  l.rows_d = default_chunk_rows(ff, m);
  l.x_bytes = align256(static_cast<size_t>(n * k) * 2);
  l.h_bytes = align256(static_cast<size_t>(n * ff) * 2);
  const size_t p_gu = mm::hgemm_partial_bytes(n, l.rows_gu, plan_for(n, l.rows_gu, k, mm::kHgemmMaxSplits).splits);
  const size_t p_d = mm::hgemm_partial_bytes(n, l.rows_d, plan_for(n, l.rows_d, ff, mm::kHgemmMaxSplits).splits);
  l.partial_bytes = align256(p_gu > p_d ? p_gu : p_d);
  const int64_t w_el = l.rows_gu * k > l.rows_d * ff ? l.rows_gu * k : l.rows_d * ff;
  l.w_bytes = static_cast<size_t>(w_el) * 2;
  l.total = l.x_bytes + l.h_bytes + l.partial_bytes + l.w_bytes;
  return l;
}

/// Chunks of `rows` rows of one product: dequantize, then the GEMM (plan per chunk, splits
/// capped by the partial buffer). `pairs`: the rows are interleaved gate/up rows of w and w_up
/// (row space 2 m_out), written to h as f16 SwiGLU outputs.
bool f16_chunks(TensorType type, int64_t k, int64_t rows_total, int64_t rows, const void* w, const void* w_up,
                const uint16_t* a, int64_t n, mm::HgemmOut out, uint16_t* w16, float* partial, size_t partial_bytes,
                cudaStream_t stream) {
  const int64_t rb = static_cast<int64_t>(row_bytes(type, k));
  for (int64_t r0 = 0; r0 < rows_total; r0 += rows) {
    const int64_t cnt = rows_total - r0 < rows ? rows_total - r0 : rows;
    mm::HgemmPlan plan = plan_for(n, cnt, k, mm::kHgemmMaxSplits);
    while (plan.splits > 1 && mm::hgemm_partial_bytes(n, cnt, plan.splits) > partial_bytes) --plan.splits;
    mm::HgemmOut h = out;
    h.w = w16;
    h.ldw = k;
    h.m = cnt;
    if (out.glu) {
      if (!mm::launch_dequant_f16(type, w, rb, k, r0 / 2, cnt / 2, w16, 2 * k, stream) ||
          !mm::launch_dequant_f16(type, w_up, rb, k, r0 / 2, cnt / 2, w16 + k, 2 * k, stream))
        return false;
      h.y16 = out.y16 + r0 / 2;
    } else {
      if (!mm::launch_dequant_f16(type, w, rb, k, r0, cnt, w16, k, stream)) return false;
      h.y = out.y + r0;
      h.bias = out.bias != nullptr ? out.bias + r0 : nullptr;
      h.res = out.res != nullptr ? out.res + r0 : nullptr;
    }
    if (!mm::launch_hgemm(false, a, k, n, k, h, plan, partial, partial_bytes, stream)) return false;
  }
  return true;
}

}  // namespace

bool matmul_f16(TensorType type, int64_t k, const MatmulOut* outs, int n_outs, const void* qx, int64_t n,
                void* scratch, size_t scratch_bytes, cudaStream_t stream, uint32_t* fault) {
  ActKind kind;
  if (!quantized(type) || !matmul_supported(type, k, nullptr) || !mm::act_kind_for(type, &kind) || n < 1 ||
      outs == nullptr || n_outs < 1 || n_outs > mm::kMmqMaxOutputs || qx == nullptr || scratch == nullptr ||
      !aligned(qx, 16) || !aligned(scratch, 16))
    return bad_args("matmul_f16_bad_args");
  int64_t m_max = 0, ms[mm::kMmqMaxOutputs];
  for (int s = 0; s < n_outs; ++s) {
    const MatmulOut& o = outs[s];
    if (o.w == nullptr || o.y == nullptr || o.m < 1 || o.ldy < o.m || !aligned(o.w, 2) || !aligned(o.y, 4) ||
        (o.residual != nullptr && o.ldr < o.m))
      return bad_args("matmul_f16_bad_args");
    m_max = o.m > m_max ? o.m : m_max;
    ms[s] = o.m;
  }
  // Scratch: f16_layout's when it is that large; a smaller one holds the activations and chunks
  // of whatever rows fit (at least 64, or all), without k splits.
  F16Layout l = f16_layout(k, ms, n_outs, n);
  if (scratch_bytes < l.total) {
    if (scratch_bytes <= l.act_bytes) return bad_args("matmul_f16_bad_args");
    l.partial_bytes = 0;
    l.rows = f16_chunk_rows(k, m_max, scratch_bytes - l.act_bytes);
    if (l.rows < 1 || (l.rows < 64 && l.rows < m_max)) return bad_args("matmul_f16_bad_args");
  }
  const int64_t rows = l.rows;
  const size_t act_bytes = l.act_bytes, partial_bytes = l.partial_bytes;
  if (latched("latched_before_matmul")) return false;

  auto* a16 = static_cast<uint16_t*>(scratch);
  auto* partial = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + act_bytes);
  auto* w16 = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(scratch) + act_bytes + partial_bytes);
  if (!mm::launch_acts_to_f16(mm::act_layout(kind, k, n), qx, a16, k, stream, fault)) return false;
  for (int s = 0; s < n_outs; ++s) {
    const MatmulOut& o = outs[s];
    mm::HgemmOut h;
    h.y = o.y;
    h.ldy = o.ldy;
    h.bias = o.bias;
    h.res = o.residual;
    h.ldr = o.ldr;
    if (!f16_chunks(type, k, o.m, rows, o.w, nullptr, a16, n, h, w16, partial, partial_bytes, stream)) return false;
  }
  return true;
}

size_t ffn_f16_scratch_bytes(TensorType t_gu, TensorType t_down, int64_t k, int64_t ff, int64_t m, int64_t n) {
  if (!quantized(t_gu) || !quantized(t_down) || !matmul_supported(t_gu, k, nullptr) ||
      !matmul_supported(t_down, ff, nullptr) || n < 1 || m < 1 || ff < 1)
    return 0;
  return ffn_layout(k, ff, m, n).total;
}

bool ffn_f16(TensorType t_gu, TensorType t_down, int64_t k, int64_t ff, int64_t m, const void* w_gate,
             const void* w_up, const void* w_down, const void* qx, int64_t n, float* y, const float* residual,
             void* scratch, size_t scratch_bytes, cudaStream_t stream, uint32_t* fault) {
  ActKind kind;
  if (ffn_f16_scratch_bytes(t_gu, t_down, k, ff, m, n) == 0 || !mm::act_kind_for(t_gu, &kind) || w_gate == nullptr ||
      w_up == nullptr || w_down == nullptr || qx == nullptr || y == nullptr || scratch == nullptr ||
      !aligned(qx, 16) || !aligned(scratch, 16) || !aligned(y, 4) || ff % 8 != 0)
    return bad_args("ffn_f16_bad_args");
  const FfnLayout l = ffn_layout(k, ff, m, n);
  if (scratch_bytes < l.total) return bad_args("ffn_f16_bad_args");
  if (latched("latched_before_matmul")) return false;
  auto* base = static_cast<uint8_t*>(scratch);
  auto* x16 = reinterpret_cast<uint16_t*>(base);
  auto* h16 = reinterpret_cast<uint16_t*>(base + l.x_bytes);
  auto* partial = reinterpret_cast<float*>(base + l.x_bytes + l.h_bytes);
  auto* w16 = reinterpret_cast<uint16_t*>(base + l.x_bytes + l.h_bytes + l.partial_bytes);
  if (!mm::launch_acts_to_f16(mm::act_layout(kind, k, n), qx, x16, k, stream, fault)) return false;
  mm::HgemmOut gu;
  gu.glu = true;
  gu.y16 = h16;
  gu.fault = fault;
  gu.ldy = ff;
  if (!f16_chunks(t_gu, k, 2 * ff, l.rows_gu, w_gate, w_up, x16, n, gu, w16, partial, l.partial_bytes, stream))
    return false;
  mm::HgemmOut down;
  down.y = y;
  down.ldy = m;
  down.res = residual;
  down.ldr = m;
  return f16_chunks(t_down, ff, m, l.rows_d, w_down, nullptr, h16, n, down, w16, partial, l.partial_bytes, stream);
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
