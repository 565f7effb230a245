// The CPU kernel table: dot products, activation quantizers and the matrix tile kernel of every
// weight type, plus bulk float helpers, at one SIMD level (scalar, avx2, avx512) chosen once at
// run time (cpu_features.h: CPU + OS support, capped by MINFER_SIMD). One binary runs on any
// x86-64; the AVX2 and AVX-512 code is only called after the run-time check.
//
// Exactness (the tests compare with memcmp):
// - vec_dot and gemm_tile of every type and level follow the accumulation contract of
//   quant/quant_ref.h, so each result is bit-identical to the reference minfer::ref::vec_dot_*
//   of the same rows. Precondition of the integer kernels: the activation rows were produced by
//   quantize_act (or the reference quantizer of the vec_dot_type): Q8_0 / Q8_1 values lie in
//   [-127, 127] (the quantizers clamp there) and the Q8_K bsums are the sums of their qs.
// - quantize_act gives the same bytes as the reference quantizer of the vec_dot_type
//   (ref::quantize_row_q8_0 / q8_1 / q8_K / f16 / bf16; F32 is a copy), and throws the same
//   minfer::Error for a NaN / infinite element or a scale beyond the half range.
// - The float helpers (f16/bf16 <-> f32 rows) are bit-exact with core/fp16.h, and the attention
//   helpers (attn_scores_f16, attn_pv_f16) with the reference F32 dot product.
//
// Threading: every kernel is single-threaded and reentrant (scratch is thread-local); the caller
// splits rows across threads (src/cpu/simd/README.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/types.h"
#include "cpu/simd/cpu_features.h"

namespace minfer::cpu::simd {

/// sum_i w[i] * a[i] of one weight row `w` (k elements of the weight type) and one activation
/// row `a` (k elements of the type's vec_dot_type), in the contract's order. Throws
/// minfer::Error when k is negative or not a multiple of the type's block size.
using VecDotFn = float (*)(int64_t k, const void* w, const void* a);

/// Quantizes the f32 row `x` (k elements) to the vec_dot_type into `dst` (row_bytes(vec_dot_type,
/// k) bytes). Same bytes and same errors as the reference quantizer.
using QuantizeActFn = void (*)(const float* x, void* dst, int64_t k);

/// out[j + t * out_stride] = vec_dot(k, W row j, A row t) for j < nr, t < nc, where W row j
/// starts at (const uint8_t*)w + j * w_row_bytes and A row t at (const uint8_t*)a + t *
/// a_row_bytes (both in the standard GGUF block layout, rows of k elements; strides in bytes;
/// out_stride in floats). For a [k, m] weight and [k, n] activations the whole product is one call
/// with nr = m, nc = n, out_stride = m; a thread computing rows [j0, j1) passes w + j0 * w_row_bytes,
/// nr = j1 - j0 and out + j0. Cost: the call repacks the activations it is given (O(nc * k)) and
/// then runs register-blocked tiles, so pass many rows per call (the whole share of a thread) and
/// all tokens; nc of 1 or 2 uses a row-at-a-time path with no repacking. Throws minfer::Error for
/// a bad k, negative nr / nc, a row stride smaller than a row (when nr > 1 or nc > 1), or
/// out_stride < nr when nc > 1.
using GemmTileFn = void (*)(int64_t k, const void* w, size_t w_row_bytes, int64_t nr,
                            const void* a, size_t a_row_bytes, int64_t nc, float* out,
                            int64_t out_stride);

/// Bytes of the packed (row-interleaved) form of `rows` weight rows of k elements. Throws
/// minfer::Error for a bad k or negative rows.
using PackedBytesFn = size_t (*)(int64_t k, int64_t rows);

/// Writes the packed form of `rows` rows of k elements (standard layout at w, w_row_bytes apart)
/// to dst (packed_bytes(k, rows) bytes, any alignment). The layout is group after group of
/// pack_rows rows, so rows [r0, r0 + n) with r0 a multiple of pack_rows, packed on their own into
/// dst + packed_bytes(k, r0), give the same bytes as packing all rows at once (chunked packing).
/// Throws like gemm_tile for bad arguments.
using PackFn = void (*)(int64_t k, const void* w, size_t w_row_bytes, int64_t rows, void* dst);

/// out[(j - row0) + t * out_stride] = vec_dot(k, W row j, A row t) for row0 <= j < row0 + nr,
/// t < nc, with W given in packed form (`packed`, made by this level's pack for `rows` rows).
/// Bit-identical to gemm_tile. Any row range works; ranges that start and end on a multiple of
/// kPackRows(level) rows waste no work. Throws minfer::Error when the range is not inside
/// [0, rows) or for the argument errors of gemm_tile.
using GemmPackedFn = void (*)(int64_t k, const void* packed, int64_t rows, int64_t row0,
                              int64_t nr, const void* a, size_t a_row_bytes, int64_t nc,
                              float* out, int64_t out_stride);

/// The kernels of one weight type at one level.
struct TypeKernels {
  TensorType type = TensorType::F32;          ///< weight type
  TensorType vec_dot_type = TensorType::F32;  ///< activation type (quant.h)
  VecDotFn vec_dot = nullptr;
  QuantizeActFn quantize_act = nullptr;
  GemmTileFn gemm_tile = nullptr;
  /// Packed weights (README.md "Packed weights"): null when this type has no packed form at this
  /// level. The packed form is as large as the weights (plus padding to a multiple of
  /// pack_rows rows) and is specific to the level that made it.
  PackedBytesFn packed_bytes = nullptr;
  PackFn pack = nullptr;
  GemmPackedFn gemm_packed = nullptr;
  int pack_rows = 0;  ///< rows interleaved per group (16 on avx512, 8 on avx2), 0 without a packed form
};

/// Every weight type with kernels: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
inline constexpr std::array<TensorType, 11> kKernelTypes = {
    TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q4_0,
    TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
    TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

struct CpuKernels {
  SimdLevel level = SimdLevel::kScalar;
  std::array<TypeKernels, kKernelTypes.size()> types{};  ///< in kKernelTypes order

  /// Kernels of weight type `t`, or nullptr when the type has none (e.g. Q2_K).
  const TypeKernels* find(TensorType t) const;
  /// Like find, but throws minfer::Error "no CPU kernels for tensor type X".
  const TypeKernels& get(TensorType t) const;

  // ---- bulk helpers (n elements; n >= 0) ---------------------------------------------------
  /// dst[i] = fp16_to_fp32(src[i]): exact, bit-identical to core/fp16.h (NaN payloads kept).
  void (*f16_to_f32)(const uint16_t* src, float* dst, int64_t n) = nullptr;
  /// dst[i] = fp32_to_fp16(src[i]): bit-identical to core/fp16.h (RNE, overflow to inf, quiet NaN).
  void (*f32_to_f16)(const float* src, uint16_t* dst, int64_t n) = nullptr;
  /// dst[i] = bf16_to_fp32(src[i]): exact.
  void (*bf16_to_f32)(const uint16_t* src, float* dst, int64_t n) = nullptr;
  /// dst[i] = fp32_to_bf16(src[i]): bit-identical to core/fp16.h.
  void (*f32_to_bf16)(const float* src, uint16_t* dst, int64_t n) = nullptr;
  // ---- attention decode against an f16 KV cache (cpu/kernels_attn.cpp) ----------------------
  /// s[i] = ref::vec_dot_f32(hd, K row i as f32, q) for i < n: the score of one query row (hd
  /// floats) against n cells of K (halves; row i starts at k + i * k_stride, strides in
  /// elements). Bit-identical to converting the rows to f32 and calling the F32 gemm_tile.
  void (*attn_scores_f16)(int64_t hd, const uint16_t* k, int64_t k_stride, int64_t n, const float* q,
                          float* s) = nullptr;
  /// o[d] = ref::vec_dot_f32(n, V^T row d, p) for d < hd: the weighted sum of n cells of V
  /// (halves, row i at v + i * v_stride) by the softmax weights p (n floats), i.e. term i =
  /// float(v[i][d]) * p[i] in lane i % 32 (quant_ref.h). A cell with use[i] == 0 is skipped (its
  /// row is not read; the same as a zero row, so garbage there cannot reach o); use may be null.
  /// Bit-identical to transposing V to f32 (zero rows for the skipped cells) and calling the F32
  /// gemm_tile. Scratch: 32 * hd floats, thread-local.
  void (*attn_pv_f16)(int64_t hd, const uint16_t* v, int64_t v_stride, int64_t n, const float* p,
                      const uint8_t* use, float* o) = nullptr;
  /// x[i] = exp_softmax(x[i] - shift) (cpu/simd/exp_ref.h): softmax numerators, 0 for masked
  /// (-inf) cells; relative error <= kExpTol; bit-identical at every level.
  void (*exp_shift)(int64_t n, float* x, float shift) = nullptr;
};


/// The kernels of the process's level (selected_level()), built on first use.
const CpuKernels& cpu_kernels();

/// The kernels of a given level (tests and benchmarks compare levels). Throws minfer::Error
/// when this CPU cannot run `level`.
const CpuKernels& cpu_kernels(SimdLevel level);

}  // namespace minfer::cpu::simd
