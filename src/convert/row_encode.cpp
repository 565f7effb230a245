#include "convert/row_encode.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "quant/quant.h"
#include "quant/row_check.h"

namespace minfer::convert {
namespace {

/// Elements per chunk handed to one thread: large enough that the atomic counter costs
/// nothing, small enough that a 2-row tail does not leave threads idle for long.
constexpr int64_t kChunkElements = int64_t{1} << 16;

/// The float types' writers convert whatever they get; a file written by quantize or synth must
/// not hold NaN or infinite weights (the block quantizers refuse them too), and a value beyond
/// the half range would become infinite in F16.
void check_float_row(TensorType type, const float* x, int64_t n) {
  quant_detail::check_finite(type, x, n, 0);
  if (type == TensorType::F16) {
    for (int64_t j = 0; j < n; ++j)
      if (std::fabs(x[j]) >= 65520.0f)  // rounds to infinity in half precision (max finite 65504)
        fail("quantize {}: element {} of the row ({:g}) is beyond the half-precision range (65504)", type_name(type),
             j, x[j]);
  } else if (type == TensorType::BF16) {
    for (int64_t j = 0; j < n; ++j)
      if ((fp32_to_bf16(x[j]) & 0x7FFFu) == 0x7F80u)  // rounds up to infinity (|x| >= ~3.3961e38)
        fail("quantize {}: element {} of the row ({:g}) rounds to infinity in bfloat16", type_name(type), j, x[j]);
  }
}

}  // namespace

void encode_rows(TensorType type, int64_t n_per_row, int64_t n_rows, const RowSource& src,
                 uint8_t* dst, ThreadPool& pool, const std::string& what,
                 const RowProgress& progress) {
  const TypeTraits& tr = type_traits(type);
  MINFER_CHECK(tr.quantize_row != nullptr, "{}: type {} cannot be written", what, type_name(type));
  const size_t rb = row_bytes(type, n_per_row);
  if (n_rows <= 0) return;
  const bool float_type = type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16;
  const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElements / std::max<int64_t>(1, n_per_row));
  const int64_t n_chunks = (n_rows + rows_per_chunk - 1) / rows_per_chunk;
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  pool.run([&](int) {
    std::vector<float> row(static_cast<size_t>(n_per_row));
    try {
      for (;;) {
        if (failed.load(std::memory_order_relaxed)) return;
        const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
        if (c >= n_chunks) return;
        const int64_t r0 = c * rows_per_chunk;
        const int64_t r1 = std::min(n_rows, r0 + rows_per_chunk);
        for (int64_t r = r0; r < r1; ++r) {
          src(r, row.data());
          try {
            if (float_type) check_float_row(type, row.data(), n_per_row);
            tr.quantize_row(row.data(), dst + static_cast<size_t>(r) * rb, n_per_row);
          } catch (const Error& e) {
            fail("{}: row {}: {}", what, r, e.what());
          }
        }
        if (progress) progress(static_cast<uint64_t>((r1 - r0) * n_per_row));
      }
    } catch (...) {
      failed.store(true);
      throw;
    }
  });
}

}  // namespace minfer::convert
