// Fused q/k norm + rope + KV store (rope_store.cuh). A block of 8 warps serves one token and up
// to 8 head slots (q heads, then k heads, then v heads), one warp per slot, with the token's
// cos/sin table built once per block exactly as rope.cu builds it.
#include "cuda/kernels/rope_store.cuh"

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/fault.h"
#include "cuda/kernels/kv_formulas.cuh"
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kMaxHd = static_cast<int>(kRopeStoreMaxHeadDim);

// grid (ceil(slots / kWarps), n_tok); block kWarps * 32.
template <TensorType T>
__global__ void __launch_bounds__(kWarps * 32) rope_store_kernel(RopeStoreArgs a) {
  __shared__ float cs[kMaxHd];            // cs[2i] = cos, cs[2i + 1] = sin of pair i
  __shared__ float buf[kWarps][kMaxHd];   // one head row per warp

  const int64_t t = blockIdx.y;
  const int64_t hd = a.head_dim, half = a.n_rot / 2;
  // The rope table, as rope.cu computes it: running float product, then cos/sin in double.
  if (threadIdx.x == 0) {
    float theta = static_cast<float>(a.pos[t]);
    for (int64_t i = 0; i < half; ++i) {
      cs[2 * i] = theta;
      theta = __fmul_rn(theta, a.theta_scale);
    }
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const double th = static_cast<double>(cs[2 * i]);
    cs[2 * i + 1] = static_cast<float>(sin(th));
    cs[2 * i] = static_cast<float>(cos(th));
  }
  __syncthreads();  // the last block-wide barrier: warps may leave after this

  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t n_slots = a.n_head + 2 * a.n_head_kv;
  if (slot >= n_slots) return;
  const int64_t n = a.n_tok, dq = a.n_head * hd, dkv = a.n_head_kv * hd;
  const bool is_q = slot < a.n_head, is_k = !is_q && slot < a.n_head + a.n_head_kv;
  const int64_t h = is_q ? slot : is_k ? slot - a.n_head : slot - a.n_head - a.n_head_kv;
  const float* src = is_q ? a.qkv + t * dq + h * hd
                          : is_k ? a.qkv + dq * n + t * dkv + h * hd : a.qkv + (dq + dkv) * n + t * dkv + h * hd;
  float* x = buf[warp];
  for (int64_t i = lane; i < hd; i += 32) x[i] = src[i];
  __syncwarp();

  if (!is_q && !is_k) {
    // v: stored as it is.
  } else {
    const float* nw = is_q ? a.q_norm : a.k_norm;
    if (nw != nullptr) {  // norm.cu's arithmetic: float squares summed in double, then (x * s) * w
      double sum = 0.0;
      for (int64_t i = lane; i < hd; i += 32) sum += static_cast<double>(__fmul_rn(x[i], x[i]));
      sum = warp_sum(sum);
      const float mean = static_cast<float>(sum / static_cast<double>(hd));
      const float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, a.eps)));
      __syncwarp();
      for (int64_t i = lane; i < hd; i += 32) x[i] = __fmul_rn(__fmul_rn(x[i], s), nw[i]);
      __syncwarp();
    }
    for (int64_t i = lane; i < half; i += 32) {  // rope.cu's rotation; dims >= n_rot stay
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const float x0 = x[i], x1 = x[i + half];
      x[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
      x[i + half] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
    __syncwarp();
  }

  if (is_q) {
    float* dst = a.q_out + t * dq + h * hd;
    for (int64_t i = lane; i < hd; i += 32) dst[i] = x[i];
    return;
  }
  const int32_t cell = a.cells[t];
  if (cell < 0 || cell >= a.n_cells) {
    if (lane == 0 && slot == a.n_head) report_fault(a.fault, kFaultKvCell, cell);  // once per token
    return;
  }
  uint8_t* row = static_cast<uint8_t*>(is_k ? a.k_region : a.v_region) + static_cast<size_t>(cell) * a.row_bytes;
  if constexpr (T == TensorType::F32) {
    for (int64_t i = lane; i < hd; i += 32) reinterpret_cast<float*>(row)[h * hd + i] = x[i];
  } else if constexpr (T == TensorType::F16) {
    for (int64_t i = lane; i < hd; i += 32) reinterpret_cast<uint16_t*>(row)[h * hd + i] = float_to_half_bits(x[i]);
  } else {  // q8_0: head_dim % 32 == 0, so the head's blocks are its own
    for (int64_t b = 0; b < hd / 32; ++b)
      store_q8_0_block(row + static_cast<size_t>(h * hd / 32 + b) * sizeof(block_q8_0), x[b * 32 + lane], lane);
  }
}

}  // namespace

const char* rope_store_unsupported(int64_t head_dim, int64_t n_rot, TensorType kv_type) {
  if (head_dim < 1 || head_dim > kRopeStoreMaxHeadDim) return "head_dim must be in [1, 256]";
  if (n_rot < 0 || n_rot > head_dim || n_rot % 2 != 0) return "n_rot must be even and at most head_dim";
  if (kv_type != TensorType::F32 && kv_type != TensorType::F16 && kv_type != TensorType::Q8_0)
    return "KV format must be f32, f16 or q8_0";
  if (kv_type == TensorType::Q8_0 && head_dim % 32 != 0) return "q8_0 KV needs head_dim a multiple of 32";
  return "";
}

bool rope_store(const RopeStoreArgs& a, cudaStream_t stream) {
  if (a.n_tok <= 0) return true;
  if (*rope_store_unsupported(a.head_dim, a.n_rot, a.kv_type) != '\0' || a.n_tok > kRopeStoreMaxTokens ||
      (a.q_norm == nullptr) != (a.k_norm == nullptr)) {
    note_launch_failure("rope_store_bad_args", cudaErrorInvalidValue);
    return false;
  }
  const int64_t slots = a.n_head + 2 * a.n_head_kv;
  const dim3 grid(static_cast<unsigned>((slots + kWarps - 1) / kWarps), static_cast<unsigned>(a.n_tok));
  switch (a.kv_type) {
    case TensorType::F32: rope_store_kernel<TensorType::F32><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case TensorType::F16: rope_store_kernel<TensorType::F16><<<grid, kWarps * 32, 0, stream>>>(a); break;
    default: rope_store_kernel<TensorType::Q8_0><<<grid, kWarps * 32, 0, stream>>>(a); break;
  }
  return MINFER_LAUNCH_CHECK("rope_store");
}

}  // namespace minfer::cuda
