// Activation quantization on the device, value-identical to the CPU's quantize_row_q8_0/_q8_1
// (ggml quantize_row_q8_0_ref), quantize_row_q8_K and quantize_row_f16/_bf16. Layout and the
// non-finite policy: quantize_acts.cuh.
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/mmvq_common.cuh"
#include "cuda/kernels/quantize_acts.cuh"
#include "cuda/kernels/quantize_blocks.cuh"

namespace minfer::cuda::mm {
namespace {

constexpr int kThreads = 256;  // F16 / BF16 conversion blocks
// Q8 / Q8K blocks: two warps (8 Q8 blocks or 2 super-blocks, 256 elements). A decode row of
// k = 3584 / 18944 is 14 / 74 super-blocks: 256-thread blocks put it on 2 / 10 SMs (Q8K; Q8:
// 4 / 19) of the H200's 132, 64-thread blocks on 7 / 37 (Q8K; Q8: 14 / 74); 32 such blocks
// per SM still fill it at prefill sizes. The bytes do not depend on the block size.
constexpr int kQuantThreads = 64;
constexpr int64_t kMaxBlocks = 65535LL * 16;  // grid-stride beyond this

size_t round_up_256(size_t v) { return (v + 255) & ~size_t{255}; }

unsigned grid_for(int64_t threads, int block_threads = kThreads) {
  int64_t b = (threads + block_threads - 1) / block_threads;
  if (b < 1) b = 1;
  if (b > kMaxBlocks) b = kMaxBlocks;
  return static_cast<unsigned>(b);
}

// ---- Q8 (Q8_0 / Q8_1 values): 8 threads per 32-element block, 4 elements each ----------------
// (quantize_blocks.cuh quantize_q8_block)
__global__ void quantize_q8_kernel(const float* __restrict__ x, int64_t k, int64_t nb,
                                   int64_t total_blocks, int8_t* __restrict__ qs,
                                   float2* __restrict__ ds) {
  pdl_prologue();
  const int lane = threadIdx.x & 31;
  const int part = lane & 7;
  const unsigned mask = 0xFFu << (lane & 24);  // the 8 lanes of this block
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kQuantThreads + threadIdx.x) >> 3;
  const int64_t step = (static_cast<int64_t>(gridDim.x) * kQuantThreads) >> 3;
  for (int64_t gb = first; gb < total_blocks; gb += step) {
    const int64_t t = gb / nb, b = gb % nb;
    quantize_q8_block(x + t * k + b * 32, part, mask, qs + t * k + b * 32, ds + gb);
  }
}

// ---- Q8K: one warp per 256-element super-block, 8 consecutive elements per lane ---------------
// (quantize_blocks.cuh quantize_q8k_block)
__global__ void quantize_q8k_kernel(const float* __restrict__ x, int64_t k, int64_t nb,
                                    int64_t total_blocks, int8_t* __restrict__ qs,
                                    float* __restrict__ dplane, int16_t* __restrict__ bsums) {
  pdl_prologue();
  const int lane = threadIdx.x & 31;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kQuantThreads + threadIdx.x) >> 5;
  const int64_t step = (static_cast<int64_t>(gridDim.x) * kQuantThreads) >> 5;
  for (int64_t gb = first; gb < total_blocks; gb += step) {
    const int64_t t = gb / nb, b = gb % nb;
    quantize_q8k_block(x + t * k + b * 256, lane, qs + t * k + b * 256, bsums + gb * 16, dplane + gb);
  }
}

// ---- F16 / BF16: one element per thread, rows padded to `stride` with zeros -----------------
template <bool kBf16>
__global__ void convert_half_kernel(const float* __restrict__ x, int64_t k, int64_t stride,
                                    int64_t total, uint16_t* __restrict__ h) {
  pdl_prologue();
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = first; i < total; i += step) {
    const int64_t t = i / stride, e = i % stride;
    uint16_t v = 0;
    if (e < k) v = kBf16 ? float_to_bf16_bits(x[t * k + e]) : float_to_half_bits(x[t * k + e]);
    h[i] = v;
  }
}

}  // namespace

bool act_kind_for(TensorType type, ActKind* kind) {
  switch (type) {
    case TensorType::F32: *kind = ActKind::F32; return true;
    case TensorType::F16: *kind = ActKind::F16; return true;
    case TensorType::BF16: *kind = ActKind::BF16; return true;
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0: *kind = ActKind::Q8; return true;
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K: *kind = ActKind::Q8K; return true;
    default: return false;
  }
}

ActLayout act_layout(ActKind kind, int64_t k, int64_t n) {
  ActLayout L;
  L.kind = kind;
  L.k = k;
  L.n = n;
  const size_t kn = static_cast<size_t>(k) * static_cast<size_t>(n);
  switch (kind) {
    case ActKind::F32: break;
    case ActKind::F16:
    case ActKind::BF16:
      L.stride = (k + 7) / 8 * 8;
      L.total = round_up_256(static_cast<size_t>(L.stride) * static_cast<size_t>(n) * 2);
      break;
    case ActKind::Q8:
      L.nb = k / 32;
      L.qs_off = 0;
      L.ds_off = round_up_256(kn);
      L.total = round_up_256(L.ds_off + static_cast<size_t>(L.nb) * static_cast<size_t>(n) * 8);
      break;
    case ActKind::Q8K:
      L.nb = k / 256;
      L.qs_off = 0;
      L.ds_off = round_up_256(kn);
      L.bsums_off = round_up_256(L.ds_off + static_cast<size_t>(L.nb) * static_cast<size_t>(n) * 4);
      L.total = round_up_256(L.bsums_off + static_cast<size_t>(L.nb) * static_cast<size_t>(n) * 32);
      break;
  }
  return L;
}

bool launch_quantize_acts(const ActLayout& L, const float* x, void* qx, cudaStream_t stream) {
  if (L.kind == ActKind::F32 || L.n == 0) return true;
  auto* base = static_cast<uint8_t*>(qx);
  switch (L.kind) {
    case ActKind::Q8: {
      const int64_t blocks = L.nb * L.n;
      launch_pdl(quantize_q8_kernel, dim3(grid_for(blocks * 8, kQuantThreads)), dim3(kQuantThreads), 0, stream, x,
                 L.k, L.nb, blocks, reinterpret_cast<int8_t*>(base + L.qs_off), reinterpret_cast<float2*>(base + L.ds_off));
      return MINFER_LAUNCH_CHECK("quantize_acts_q8");
    }
    case ActKind::Q8K: {
      const int64_t blocks = L.nb * L.n;
      launch_pdl(quantize_q8k_kernel, dim3(grid_for(blocks * 32, kQuantThreads)), dim3(kQuantThreads), 0, stream, x,
                 L.k, L.nb, blocks, reinterpret_cast<int8_t*>(base + L.qs_off), reinterpret_cast<float*>(base + L.ds_off),
                 reinterpret_cast<int16_t*>(base + L.bsums_off));
      return MINFER_LAUNCH_CHECK("quantize_acts_q8k");
    }
    case ActKind::F16: {
      const int64_t total = L.stride * L.n;
      launch_pdl(convert_half_kernel<false>, dim3(grid_for(total)), dim3(kThreads), 0, stream, x, L.k, L.stride, total,
                 reinterpret_cast<uint16_t*>(base));
      return MINFER_LAUNCH_CHECK("quantize_acts_f16");
    }
    case ActKind::BF16: {
      const int64_t total = L.stride * L.n;
      launch_pdl(convert_half_kernel<true>, dim3(grid_for(total)), dim3(kThreads), 0, stream, x, L.k, L.stride, total,
                 reinterpret_cast<uint16_t*>(base));
      return MINFER_LAUNCH_CHECK("quantize_acts_bf16");
    }
    case ActKind::F32: break;
  }
  return true;
}

}  // namespace minfer::cuda::mm
