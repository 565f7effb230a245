// Validation of row lengths shared by the reference kernels. Internal to src/quant.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "core/fp16.h"
#include "core/types.h"

namespace minfer::quant_detail {

/// Blocks in a row of `n` elements. Throws minfer::Error "<op> <type>: row length N is not a
/// multiple of the block size B" (or "is negative") so a bad length never reads out of bounds.
inline int64_t blocks_in_row(const char* op, TensorType type, int64_t n, int64_t block_size) {
  MINFER_CHECK(n >= 0, "{} {}: row length {} is negative", op, type_name(type), n);
  MINFER_CHECK(n % block_size == 0, "{} {}: row length {} is not a multiple of the block size {}", op,
        type_name(type), n, block_size);
  return n / block_size;
}

/// Throws minfer::Error "quantize <type>: element I of the row is not finite (V)" when one of
/// the `count` values at `x` (row elements first..first+count-1) is NaN or infinite.
inline void check_finite(TensorType type, const float* x, int64_t count, int64_t first) {
  bool ok = true;
  for (int64_t j = 0; j < count; ++j) ok &= std::isfinite(x[j]);
  if (ok) return;
  for (int64_t j = 0; j < count; ++j)
    if (!std::isfinite(x[j]))
      fail("quantize {}: element {} of the row is not finite ({})", type_name(type), first + j,
           x[j]);
}

/// `v` as a half for the field `field` of block `block`; throws minfer::Error naming the type,
/// block, field and value when the half would be infinite (|v| >= 65520) or `v` is not finite.
inline uint16_t half_field(TensorType type, int64_t block, const char* field, float v) {
  const uint16_t h = fp32_to_fp16(v);
  if ((h & 0x7C00u) == 0x7C00u)  // inf or NaN
    fail("quantize {}: block {} needs {} = {:g}, beyond the half-precision range (65504)",
         type_name(type), block, field, v);
  return h;
}

}  // namespace minfer::quant_detail
