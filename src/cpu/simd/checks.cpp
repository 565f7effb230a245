// Argument checks shared by every kernel level (see levels.h).
#include "core/error.h"
#include "cpu/simd/levels.h"
#include "quant/quant.h"

namespace minfer::cpu::simd::detail {

int kernel_type_index(TensorType t) {
  for (size_t i = 0; i < kKernelTypes.size(); ++i)
    if (kKernelTypes[i] == t) return static_cast<int>(i);
  return -1;
}

int64_t check_row(const char* op, TensorType t, int64_t k) {
  const TypeTraits& tr = type_traits(t);
  if (!(k >= 0))
    fail("{} {}: row length {} is negative", op, type_name(t), k);
  if (!(k % tr.block_size == 0))
    fail("{} {}: row length {} is not a multiple of the block size {}", op,
         type_name(t), k, tr.block_size);
  return k / tr.block_size;
}

int64_t check_gemm(TensorType t, int64_t k, size_t w_row_bytes, int64_t nr, size_t a_row_bytes,
                   int64_t nc, int64_t out_stride) {
  const int64_t nb = check_row("gemm_tile", t, k);
  if (!(nr >= 0 && nc >= 0))
    fail("gemm_tile {}: negative tile size {} x {}", type_name(t), nr, nc);
  if (nr == 0 || nc == 0) return nb;
  const TypeTraits& tr = type_traits(t);
  const size_t wb = row_bytes(t, k), ab = row_bytes(tr.vec_dot_type, k);
  if (!(nr == 1 || w_row_bytes >= wb))
    fail("gemm_tile {}: weight row stride {} bytes is smaller than a row of {} elements ({} bytes)",
         type_name(t), w_row_bytes, k, wb);
  if (!(nc == 1 || a_row_bytes >= ab))
    fail("gemm_tile {}: activation row stride {} bytes is smaller than a {} row of {} elements ({} "
         "bytes)",
         type_name(t), a_row_bytes, type_name(tr.vec_dot_type), k, ab);
  if (!(nc == 1 || out_stride >= nr))
    fail("gemm_tile {}: output stride {} is smaller than the {} rows of the tile", type_name(t),
         out_stride, nr);
  return nb;
}

int64_t check_pack(TensorType t, int64_t k, int64_t rows, size_t w_row_bytes) {
  const int64_t nb = check_row("pack", t, k);
  if (!(rows >= 0))
    fail("pack {}: negative row count {}", type_name(t), rows);
  const size_t wb = row_bytes(t, k);
  if (!(rows <= 1 || w_row_bytes >= wb))
    fail("pack {}: weight row stride {} bytes is smaller than a row of {} elements ({} bytes)",
         type_name(t), w_row_bytes, k, wb);
  return nb;
}

int64_t check_gemm_packed(TensorType t, int64_t k, int64_t rows, int64_t row0, int64_t nr,
                          size_t a_row_bytes, int64_t nc, int64_t out_stride) {
  const int64_t nb = check_row("gemm_packed", t, k);
  if (!(rows >= 0 && row0 >= 0 && nr >= 0 && row0 + nr <= rows))
    fail("gemm_packed {}: rows [{}, {}) are not inside the {} packed rows", type_name(t), row0,
         row0 + nr, rows);
  if (!(nc >= 0))
    fail("gemm_packed {}: negative token count {}", type_name(t), nc);
  if (nr == 0 || nc == 0) return nb;
  const TypeTraits& tr = type_traits(t);
  const size_t ab = row_bytes(tr.vec_dot_type, k);
  if (!(nc == 1 || a_row_bytes >= ab))
    fail("gemm_packed {}: activation row stride {} bytes is smaller than a {} row of {} elements "
         "({} bytes)",
         type_name(t), a_row_bytes, type_name(tr.vec_dot_type), k, ab);
  if (!(nc == 1 || out_stride >= nr))
    fail("gemm_packed {}: output stride {} is smaller than the {} rows of the range", type_name(t),
         out_stride, nr);
  return nb;
}

}  // namespace minfer::cpu::simd::detail
