#include "cuda/kernels/get_rows.cuh"

#include "cuda/kernels/common.cuh"
#include "cuda/kernels/dequant.cuh"
#include "cuda/kernels/launch.cuh"

namespace minfer::cuda {
namespace {

// grid.x walks the elements of a row, grid.y the ids (both grid-stride).
template <TensorType T>
__global__ void get_rows_kernel(const uint8_t* __restrict__ table, int64_t d, int64_t rows,
                                size_t row_bytes, const int32_t* __restrict__ ids, int64_t n,
                                float* __restrict__ out, uint32_t* fault) {
  pdl_prologue();
  for (int64_t t = blockIdx.y; t < n; t += gridDim.y) {
    const int32_t id = ids[t];
    const bool ok = id >= 0 && id < rows;
    if (!ok && blockIdx.x == 0 && threadIdx.x == 0) report_fault(fault, kFaultRowId, id);
    const uint8_t* row = table + static_cast<size_t>(ok ? id : 0) * row_bytes;
    float* dst = out + t * d;
    for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < d;
         e += static_cast<int64_t>(gridDim.x) * blockDim.x)
      dst[e] = ok ? dequant_element<T>(row, e) : 0.0f;
  }
}

template <TensorType T>
bool launch(const void* table, int64_t d, int64_t rows, size_t row_bytes, const int32_t* ids,
            int64_t n, float* out, uint32_t* fault, cudaStream_t stream, const char* site) {
  const dim3 grid(grid_for(d, kBlock), static_cast<unsigned>(n < kMaxGridYZ ? n : kMaxGridYZ));
  launch_pdl(get_rows_kernel<T>, dim3(grid), dim3(kBlock), 0, stream, static_cast<const uint8_t*>(table), d, rows,
                                                  row_bytes, ids, n, out, fault);
  return MINFER_LAUNCH_CHECK(site);
}

template <TensorType T>
void dequantize_row_host(const void* row, int64_t n, float* out) {
  for (int64_t e = 0; e < n; ++e) out[e] = dequant_element<T>(static_cast<const uint8_t*>(row), e);
}

}  // namespace

bool dequantize_row_on_host(TensorType type, const void* row, int64_t n, float* out) {
  using T = TensorType;
  switch (type) {
    case T::F32: dequantize_row_host<T::F32>(row, n, out); return true;
    case T::F16: dequantize_row_host<T::F16>(row, n, out); return true;
    case T::BF16: dequantize_row_host<T::BF16>(row, n, out); return true;
    case T::Q4_0: dequantize_row_host<T::Q4_0>(row, n, out); return true;
    case T::Q4_1: dequantize_row_host<T::Q4_1>(row, n, out); return true;
    case T::Q5_0: dequantize_row_host<T::Q5_0>(row, n, out); return true;
    case T::Q5_1: dequantize_row_host<T::Q5_1>(row, n, out); return true;
    case T::Q8_0: dequantize_row_host<T::Q8_0>(row, n, out); return true;
    case T::Q4_K: dequantize_row_host<T::Q4_K>(row, n, out); return true;
    case T::Q5_K: dequantize_row_host<T::Q5_K>(row, n, out); return true;
    case T::Q6_K: dequantize_row_host<T::Q6_K>(row, n, out); return true;
    default: return false;
  }
}

bool get_rows_supported(TensorType type) {
  switch (type) {
    case TensorType::F32: case TensorType::F16: case TensorType::BF16:
    case TensorType::Q4_0: case TensorType::Q4_1: case TensorType::Q5_0: case TensorType::Q5_1:
    case TensorType::Q8_0: case TensorType::Q4_K: case TensorType::Q5_K: case TensorType::Q6_K:
      return true;
    default:
      return false;
  }
}

bool get_rows(TensorType type, const void* table, int64_t d, int64_t rows, size_t row_bytes,
              const int32_t* ids, int64_t n, float* out, uint32_t* fault, cudaStream_t stream) {
  if (n <= 0 || d <= 0) return true;
  using T = TensorType;
  switch (type) {
    case T::F32: return launch<T::F32>(table, d, rows, row_bytes, ids, n, out, fault, stream, "get_rows_f32");
    case T::F16: return launch<T::F16>(table, d, rows, row_bytes, ids, n, out, fault, stream, "get_rows_f16");
    case T::BF16: return launch<T::BF16>(table, d, rows, row_bytes, ids, n, out, fault, stream, "get_rows_bf16");
    case T::Q4_0: return launch<T::Q4_0>(table, d, rows, row_bytes, ids, n, out, fault, stream, "get_rows_q4_0");
    case T::Q4_1: return launch<T::Q4_1>(table, d, rows, row_bytes, ids, n, out, fault, stream, "get_rows_q4_1");
    case T::Q5_0: return launch<T::Q5_0>(table, d, rows, row_bytes, ids, n, out, fault, stream, "get_rows_q5_0");
    case T::Q5_1: return launch<T::Q5_1>(table, d, rows, row_bytes, ids, n, out, fault, stream, "get_rows_q5_1");
    case T::Q8_0: return launch<T::Q8_0>(table, d, rows, row_bytes, ids, n, out, fault, stream, "get_rows_q8_0");
    case T::Q4_K: return launch<T::Q4_K>(table, d, rows, row_bytes, ids, n, out, fault, stream, "get_rows_q4_K");
    case T::Q5_K: return launch<T::Q5_K>(table, d, rows, row_bytes, ids, n, out, fault, stream, "get_rows_q5_K");
    case T::Q6_K: return launch<T::Q6_K>(table, d, rows, row_bytes, ids, n, out, fault, stream, "get_rows_q6_K");
    default: return false;
  }
}

}  // namespace minfer::cuda
