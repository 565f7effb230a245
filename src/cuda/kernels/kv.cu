#include "cuda/kernels/kv.cuh"

#include <cmath>
#include <cstring>

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/dequant.cuh"
#include "cuda/kernels/kv_formulas.cuh"
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {

// f32 / f16 store: one thread per element (grid-stride over n * kv_dim).
template <TensorType T>
__global__ void kv_store_elem_kernel(const float* __restrict__ src, const int32_t* __restrict__ cells,
                                     int64_t kv_dim, int64_t n, uint8_t* __restrict__ region,
                                     size_t row_bytes, int64_t n_cells, uint32_t* fault) {
  const int64_t total = kv_dim * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / kv_dim, e = i % kv_dim;
    const int32_t c = cells[t];
    if (c < 0 || c >= n_cells) {
      if (e == 0) report_fault(fault, kFaultKvCell, c);
      continue;
    }
    uint8_t* row = region + static_cast<size_t>(c) * row_bytes;
    if constexpr (T == TensorType::F32) reinterpret_cast<float*>(row)[e] = src[i];
    else reinterpret_cast<uint16_t*>(row)[e] = float_to_half_bits(src[i]);
  }
}

// q8_0 store: one warp per 32-element block (grid-stride over n * kv_dim / 32 blocks).
__global__ void kv_store_q8_0_kernel(const float* __restrict__ src, const int32_t* __restrict__ cells,
                                     int64_t kv_dim, int64_t n, uint8_t* __restrict__ region,
                                     size_t row_bytes, int64_t n_cells, uint32_t* fault) {
  const int lane = threadIdx.x & 31;
  const int64_t blocks_per_row = kv_dim / 32;
  const int64_t total = blocks_per_row * n;
  const int64_t warps_per_grid = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t w = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32; w < total;
       w += warps_per_grid) {
    const int64_t t = w / blocks_per_row, b = w % blocks_per_row;
    const int32_t c = cells[t];
    if (c < 0 || c >= n_cells) {
      if (b == 0 && lane == 0) report_fault(fault, kFaultKvCell, c);
      continue;  // uniform over the warp
    }
    const float x = src[t * kv_dim + b * 32 + lane];
    store_q8_0_block(region + static_cast<size_t>(c) * row_bytes + static_cast<size_t>(b) * sizeof(block_q8_0), x, lane);
  }
}

template <TensorType T>
__global__ void kv_load_kernel(const uint8_t* __restrict__ region, size_t row_bytes, int64_t kv_dim,
                               int64_t n_kv, float* __restrict__ out) {
  const int64_t total = kv_dim * n_kv;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i / kv_dim, e = i % kv_dim;
    out[i] = dequant_element<T>(region + static_cast<size_t>(c) * row_bytes, e);
  }
}

// Non-overlapping move: every unit in parallel.
template <typename U>
__global__ void move_rows_parallel_kernel(U* base, int64_t row_units, int64_t src, int64_t dst,
                                          int64_t count) {
  const int64_t total = row_units * count;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    base[dst * row_units + i] = base[src * row_units + i];
}

// Overlapping move, one block: steps of `step` = |dst - src| rows. A step's destination is the
// previous step's source (ascending) or the next one's... (descending), both already read, so
// each step's rows are copied in parallel and the steps are separated by __syncthreads().
template <typename U>
__global__ void move_rows_overlap_kernel(U* base, int64_t row_units, int64_t src, int64_t dst,
                                         int64_t count) {
  const int64_t step = src > dst ? src - dst : dst - src;
  const int64_t n_steps = (count + step - 1) / step;
  for (int64_t k = 0; k < n_steps; ++k) {
    // Ascending (dst < src): rows [k*step, ...) first. Descending: the last rows first.
    const int64_t first = src > dst ? k * step : (n_steps - 1 - k) * step;
    const int64_t rows = (first + step <= count ? step : count - first);
    const int64_t units = rows * row_units;
    for (int64_t i = threadIdx.x; i < units; i += blockDim.x)
      base[(dst + first) * row_units + i] = base[(src + first) * row_units + i];
    __syncthreads();
  }
}

template <typename U>
bool launch_move(void* base, size_t row_bytes, int64_t src, int64_t dst, int64_t count, cudaStream_t stream) {
  const auto row_units = static_cast<int64_t>(row_bytes / sizeof(U));
  U* b = static_cast<U*>(base);
  const int64_t dist = src > dst ? src - dst : dst - src;
  if (dist >= count) {
    move_rows_parallel_kernel<U><<<grid_for(row_units * count, kBlock), kBlock, 0, stream>>>(
        b, row_units, src, dst, count);
    return MINFER_LAUNCH_CHECK("kv_move_rows");
  }
  move_rows_overlap_kernel<U><<<1, 1024, 0, stream>>>(b, row_units, src, dst, count);
  return MINFER_LAUNCH_CHECK("kv_move_rows_overlap");
}

}  // namespace

bool kv_quantize_row_on_host(TensorType type, const float* x, int64_t n, void* out) {
  auto* o = static_cast<uint8_t*>(out);
  switch (type) {
    case TensorType::F32:
      std::memcpy(o, x, static_cast<size_t>(n) * sizeof(float));
      return true;
    case TensorType::F16:
      for (int64_t i = 0; i < n; ++i) reinterpret_cast<uint16_t*>(o)[i] = float_to_half_bits(x[i]);
      return true;
    case TensorType::Q8_0:
      if (n % 32 != 0) return false;
      for (int64_t b = 0; b < n / 32; ++b) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[32 * b + j]));
        const float d = q8_0_scale(amax);
        const float id = q8_0_inverse(d);
        uint8_t* blk = o + static_cast<size_t>(b) * sizeof(block_q8_0);
        const uint16_t dh = float_to_half_bits(d);
        std::memcpy(blk + offsetof(block_q8_0, d), &dh, sizeof dh);
        for (int j = 0; j < 32; ++j)
          reinterpret_cast<int8_t*>(blk + offsetof(block_q8_0, qs))[j] = q8_0_level(x[32 * b + j], id);
      }
      return true;
    default:
      return false;
  }
}

bool kv_type_supported(TensorType type) {
  return type == TensorType::F32 || type == TensorType::F16 || type == TensorType::Q8_0;
}

bool kv_store(TensorType type, const float* src, const int32_t* cells, int64_t kv_dim, int64_t n,
              void* region, size_t row_bytes, int64_t n_cells, uint32_t* fault, cudaStream_t stream) {
  if (n <= 0 || kv_dim <= 0) return true;
  auto* r = static_cast<uint8_t*>(region);
  switch (type) {
    case TensorType::F32:
      kv_store_elem_kernel<TensorType::F32><<<grid_for(kv_dim * n, kBlock), kBlock, 0, stream>>>(
          src, cells, kv_dim, n, r, row_bytes, n_cells, fault);
      return MINFER_LAUNCH_CHECK("kv_store_f32");
    case TensorType::F16:
      kv_store_elem_kernel<TensorType::F16><<<grid_for(kv_dim * n, kBlock), kBlock, 0, stream>>>(
          src, cells, kv_dim, n, r, row_bytes, n_cells, fault);
      return MINFER_LAUNCH_CHECK("kv_store_f16");
    case TensorType::Q8_0:
      kv_store_q8_0_kernel<<<grid_for(kv_dim / 32 * n, kBlock / 32), kBlock, 0, stream>>>(
          src, cells, kv_dim, n, r, row_bytes, n_cells, fault);
      return MINFER_LAUNCH_CHECK("kv_store_q8_0");
    default:
      return false;
  }
}

bool kv_load(TensorType type, const void* region, size_t row_bytes, int64_t kv_dim, int64_t n_kv,
             float* out, cudaStream_t stream) {
  if (n_kv <= 0 || kv_dim <= 0) return true;
  const auto* r = static_cast<const uint8_t*>(region);
  const unsigned grid = grid_for(kv_dim * n_kv, kBlock);
  switch (type) {
    case TensorType::F32:
      kv_load_kernel<TensorType::F32><<<grid, kBlock, 0, stream>>>(r, row_bytes, kv_dim, n_kv, out);
      return MINFER_LAUNCH_CHECK("kv_load_f32");
    case TensorType::F16:
      kv_load_kernel<TensorType::F16><<<grid, kBlock, 0, stream>>>(r, row_bytes, kv_dim, n_kv, out);
      return MINFER_LAUNCH_CHECK("kv_load_f16");
    case TensorType::Q8_0:
      kv_load_kernel<TensorType::Q8_0><<<grid, kBlock, 0, stream>>>(r, row_bytes, kv_dim, n_kv, out);
      return MINFER_LAUNCH_CHECK("kv_load_q8_0");
    default:
      return false;
  }
}

bool move_rows(void* base, size_t row_bytes, int64_t src, int64_t dst, int64_t count, cudaStream_t stream) {
  if (count <= 0 || src == dst || row_bytes == 0) return true;
  // The widest unit that divides the row length and the base address alignment.
  const auto addr = reinterpret_cast<uintptr_t>(base);
  if (row_bytes % 16 == 0 && addr % 16 == 0) return launch_move<uint4>(base, row_bytes, src, dst, count, stream);
  if (row_bytes % 8 == 0 && addr % 8 == 0) return launch_move<uint2>(base, row_bytes, src, dst, count, stream);
  if (row_bytes % 4 == 0 && addr % 4 == 0) return launch_move<uint32_t>(base, row_bytes, src, dst, count, stream);
  if (row_bytes % 2 == 0 && addr % 2 == 0) return launch_move<uint16_t>(base, row_bytes, src, dst, count, stream);
  return launch_move<uint8_t>(base, row_bytes, src, dst, count, stream);
}

}  // namespace minfer::cuda
