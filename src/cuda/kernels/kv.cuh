// KV cache kernels: store f32 rows into a region (f32, f16 or q8_0 rows), load (dequantize) the
// first cells of a region, and move rows within a region (KV compaction).
//
// A region is [kv_dim, n_cells]: one row of kv_dim elements per cell, `row_bytes` apart (kv_dim
// * 4 for f32, * 2 for f16, kv_dim / 32 * 34 for q8_0: ggml-common.h block_q8_0).
// Store gives the CPU's bytes for the same f32 input (src/cpu/kernels_attn.cpp, quant_ref.h):
// f16 rounds to nearest even (core/fp16.h's algorithm); q8_0 per 32 elements d = max|x| / 127,
// id = 1 / d (0 when d = 0), q = round-half-away(x * id) clamped to [-127, 127], d stored as
// half. Inputs the CPU refuses (NaN / inf, a q8_0 scale beyond the half range) are not refused
// on the device: NaN quantizes to 0 and an overflowing scale is stored as inf.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/types.h"

namespace minfer::cuda {

/// True for the KV formats the kernels handle: F32, F16, Q8_0 (Q8_0 needs kv_dim % 32 == 0).
bool kv_type_supported(TensorType type);

/// Row t of src [kv_dim, n] goes to cell cells[t] of `region` (type `type`, n_cells cells).
/// A cell outside [0, n_cells) is skipped and reported as kFaultKvCell in `fault`.
bool kv_store(TensorType type, const float* src, const int32_t* cells, int64_t kv_dim, int64_t n,
              void* region, size_t row_bytes, int64_t n_cells, uint32_t* fault, cudaStream_t stream);

/// out [kv_dim, n_kv] f32 = cells [0, n_kv) of `region`, dequantized exactly.
bool kv_load(TensorType type, const void* region, size_t row_bytes, int64_t kv_dim, int64_t n_kv,
             float* out, cudaStream_t stream);

/// Moves rows [src, src + count) of `row_bytes`-byte rows at `base` to [dst, dst + count); the
/// ranges may overlap: the result equals a copy through a temporary. Overlapping moves run in
/// one block, in steps of |dst - src| rows, ascending when dst < src and descending when
/// dst > src, so no step overwrites a row a later step reads.
bool move_rows(void* base, size_t row_bytes, int64_t src, int64_t dst, int64_t count,
               cudaStream_t stream);

/// The store's formulas evaluated on the host: one row of `n` f32 values in `type`'s layout
/// (F32, F16, Q8_0), for tests that check them against the CPU without a device.
bool kv_quantize_row_on_host(TensorType type, const float* x, int64_t n, void* out);

}  // namespace minfer::cuda
