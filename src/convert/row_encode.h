// Encoding a tensor row by row into a tensor type, in parallel: the shared engine of
// `minfer quantize` (rows dequantized from the input file) and `minfer synth` (rows generated
// from a seed). Rows are independent, so the bytes do not depend on the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/thread_pool.h"
#include "core/types.h"

namespace minfer::convert {

/// Writes row `row` (n_per_row f32 values, in row order) into `dst`. Called concurrently from
/// several threads with distinct rows; must be thread-safe.
using RowSource = std::function<void(int64_t row, float* dst)>;

/// Called after each finished chunk of rows with the number of elements it held (for a
/// progress bar); called concurrently from several threads.
using RowProgress = std::function<void(uint64_t elements)>;

/// Fills `dst` with `n_rows` rows of `n_per_row` elements encoded to `type` with its reference
/// quantizer (quant_ref.h), row r at byte r * row_bytes(type, n_per_row). Rows are handed out to
/// the pool's threads in chunks of about 64 Ki elements. Throws minfer::Error when `type` cannot
/// be written (no quantizer), n_per_row is not a multiple of its block size, or a quantizer
/// rejects a row (NaN/inf, scale overflow; the message is prefixed with `what` and the row
/// number). An exception from `src` propagates; the other threads stop at their next chunk.
void encode_rows(TensorType type, int64_t n_per_row, int64_t n_rows, const RowSource& src,
                 uint8_t* dst, ThreadPool& pool, const std::string& what,
                 const RowProgress& progress = {});

}  // namespace minfer::convert
