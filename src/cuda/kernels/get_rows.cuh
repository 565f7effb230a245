// Embedding gather (GetRows): rows of a table of any weight type (or f32 activations) selected
// by i32 ids, dequantized to f32 exactly as the CPU does (dequant.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace minfer::cuda {

/// True when get_rows has a kernel for tables of `type`: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
/// Q8_0, Q4_K, Q5_K, Q6_K.
bool get_rows_supported(TensorType type);

/// out[:, t] = dequantize(table row ids[t]) for t < n. table: `rows` rows of `d` elements of
/// `type`, `row_bytes` apart; out: f32 [d, n] (d * n floats). An id outside [0, rows) writes a
/// zero row and reports kFaultRowId with the id in `fault` (common.cuh). Issued on `stream`;
/// false when the launch failed (recorded with its site, launch.cuh) or the type has no kernel.
bool get_rows(TensorType type, const void* table, int64_t d, int64_t rows, size_t row_bytes,
              const int32_t* ids, int64_t n, float* out, uint32_t* fault, cudaStream_t stream);

/// The device formulas evaluated on the host (dequant.cuh): dequantizes `n` elements of one row
/// of `type` into `out`. For tests that check the formulas against the CPU reference without a
/// device. False for a type without a kernel.
bool dequantize_row_on_host(TensorType type, const void* row, int64_t n, float* out);

}  // namespace minfer::cuda
