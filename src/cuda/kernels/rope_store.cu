// Fused q/k norm + rope + KV store (rope_store.cuh). One warp per head slot (q heads, then k
// heads, then v heads), kWarps slots per block; warps never wait for each other. A warp issues its
// head row's loads (and the token's position and cell) first, then every lane builds the angles of
// its own rotation pairs exactly as rope.cu builds the table: the running float product
// theta_{i+1} = theta_i * theta_scale from theta_0 = pos (each lane runs the whole product, a
// chain of n_rot / 2 multiplies, and keeps its pairs' values), cos/sin in double rounded to float.
#include "cuda/kernels/rope_store.cuh"

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/fault.h"
#include "cuda/kernels/kv_formulas.cuh"
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxHd = static_cast<int>(kRopeStoreMaxHeadDim);
constexpr int kPerLane = kMaxHd / 32;  // head-row elements a lane holds (i = lane + 32 k)

// grid (ceil(slots / kWarps), n_tok); block kWarps * 32.
template <TensorType T>
__global__ void __launch_bounds__(kWarps * 32) rope_store_kernel(RopeStoreArgs a) {
  pdl_prologue();
  __shared__ float buf[kWarps][kMaxHd];  // one head row per warp

  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int64_t t = blockIdx.y;
  const int64_t slot = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t n_slots = a.n_head + 2 * a.n_head_kv;
  if (slot >= n_slots) return;  // no block-wide barrier below
  const int hd = static_cast<int>(a.head_dim), half = static_cast<int>(a.n_rot / 2);
  const int64_t n = a.n_tok, dq = a.n_head * a.head_dim, dkv = a.n_head_kv * a.head_dim;
  const bool is_q = slot < a.n_head, is_k = !is_q && slot < a.n_head + a.n_head_kv;
  const int64_t h = is_q ? slot : is_k ? slot - a.n_head : slot - a.n_head - a.n_head_kv;
  const float* src = is_q ? a.qkv + t * dq + h * a.head_dim
                          : is_k ? a.qkv + dq * n + t * dkv + h * a.head_dim
                                 : a.qkv + (dq + dkv) * n + t * dkv + h * a.head_dim;
  // The loads first: the row, the position (q, k) and the cell (k, v) are all independent.
  float xr[kPerLane];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) xr[k] = lane + 32 * k < hd ? src[lane + 32 * k] : 0.0f;
  const int32_t cell = is_q ? 0 : a.cells[t];
  const float pos = is_q || is_k ? static_cast<float>(a.pos[t]) : 0.0f;
  float* x = buf[warp];
#pragma unroll
  for (int k = 0; k < kPerLane; ++k)
    if (lane + 32 * k < hd) x[lane + 32 * k] = xr[k];
  __syncwarp();

  if (is_q || is_k) {
    const float* nw = is_q ? a.q_norm : a.k_norm;
    if (nw != nullptr) {  // norm.cu's arithmetic: float squares summed in double, then (x * s) * w
      double sum = 0.0;
      for (int i = lane; i < hd; i += 32) sum += static_cast<double>(__fmul_rn(x[i], x[i]));
      sum = warp_sum(sum);
      const float mean = static_cast<float>(sum / static_cast<double>(hd));
      const float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, a.eps)));
      __syncwarp();
      for (int i = lane; i < hd; i += 32) x[i] = __fmul_rn(__fmul_rn(x[i], s), nw[i]);
      __syncwarp();
    }
    // Angles of this lane's pairs i = lane + 32 k (k < kPerLane / 2, i < half): rope.cu's
    // running product, evaluated by every lane in full.
    float th[kPerLane / 2];
#pragma unroll
    for (int k = 0; k < kPerLane / 2; ++k) th[k] = 0.0f;
    float theta = pos;
    for (int i = 0; i < half; ++i) {
#pragma unroll
      for (int k = 0; k < kPerLane / 2; ++k)
        if (i == lane + 32 * k) th[k] = theta;
      theta = __fmul_rn(theta, a.theta_scale);
    }
    // rope.cu's angle rule and rotation; pair i is (i, i + half) NEOX, (2i, 2i + 1) normal.
    const bool neox = a.rope.layout == graph::RopeLayout::Neox;
    float xo0[kPerLane / 2], xo1[kPerLane / 2];
#pragma unroll
    for (int k = 0; k < kPerLane / 2; ++k) {  // dims >= n_rot stay
      const int i = lane + 32 * k;
      xo0[k] = xo1[k] = 0.0f;
      if (i < half) {
        const float ang = graph::rope_angle(th[k], i, a.freq_factors != nullptr ? a.freq_factors[i] : 1.0f, a.rope);
        const double td = static_cast<double>(ang);
        const float c = __fmul_rn(static_cast<float>(cos(td)), a.rope.mscale);
        const float sn = __fmul_rn(static_cast<float>(sin(td)), a.rope.mscale);
        const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        const float x0 = x[i0], x1 = x[i1];
        xo0[k] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
        xo1[k] = __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c));
      }
    }
    __syncwarp();  // every lane has read its pairs before any is overwritten
#pragma unroll
    for (int k = 0; k < kPerLane / 2; ++k) {
      const int i = lane + 32 * k;
      if (i < half) {
        x[neox ? i : 2 * i] = xo0[k];
        x[neox ? i + half : 2 * i + 1] = xo1[k];
      }
    }
    __syncwarp();
  }

  if (is_q) {
    float* dst = a.q_out + t * dq + h * a.head_dim;
    for (int i = lane; i < hd; i += 32) dst[i] = x[i];
    return;
  }
  if (cell < 0 || cell >= a.n_cells) {
    if (lane == 0 && slot == a.n_head) report_fault(a.fault, kFaultKvCell, cell);  // once per token
    return;
  }
  uint8_t* row = static_cast<uint8_t*>(is_k ? a.k_region : a.v_region) + static_cast<size_t>(cell) * a.row_bytes;
  if constexpr (T == TensorType::F32) {
    for (int i = lane; i < hd; i += 32) reinterpret_cast<float*>(row)[h * hd + i] = x[i];
  } else if constexpr (T == TensorType::F16) {
    for (int i = lane; i < hd; i += 32) reinterpret_cast<uint16_t*>(row)[h * hd + i] = float_to_half_bits(x[i]);
  } else {  // q8_0: head_dim % 32 == 0, so the head's blocks are its own
    for (int b = 0; b < hd / 32; ++b)
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
    case TensorType::F32:
      launch_pdl(rope_store_kernel<TensorType::F32>, dim3(grid), dim3(kWarps * 32), 0, stream, a);
      break;
    case TensorType::F16:
      launch_pdl(rope_store_kernel<TensorType::F16>, dim3(grid), dim3(kWarps * 32), 0, stream, a);
      break;
    default: launch_pdl(rope_store_kernel<TensorType::Q8_0>, dim3(grid), dim3(kWarps * 32), 0, stream, a); break;
  }
  return MINFER_LAUNCH_CHECK("rope_store");
}

}  // namespace minfer::cuda
