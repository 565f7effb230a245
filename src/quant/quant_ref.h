// Reference (scalar, portable) row kernels of every type in quant.h: dequantize, quantize and
// dot product. They define the arithmetic that the SIMD and CUDA kernels are tested against.
// Most callers go through type_traits(type) (quant.h); this header names the functions directly
// for tests, benchmarks and kernels that specialise one type.
//
// Common rules of every function here:
// - `n` is the number of elements of the row (not bytes, not blocks). It must be >= 0 and a
//   multiple of the type's block size (32 for Q4_0..Q8_1, 256 for the K-quants, 1 for
//   F32/F16/BF16); otherwise minfer::Error "<op> <type>: row length N is not a multiple of the
//   block size B". Blocks are laid out back to back (blocks.h), elements in row order.
// - Packed rows need the alignment of their block struct (2 bytes, 4 for Q8_K).
// - Quantizers reject a row they cannot encode with minfer::Error naming the type, the element
//   or block and the value: a NaN or infinite element (block types; F16/BF16 convert it the IEEE
//   way, values beyond 65504 becoming +-inf in F16), or a block whose half-precision scale or
//   min would overflow (|x| beyond about 65504 times the type's largest level). The one field
//   allowed to saturate is Q8_1's `s` (half of the block sum, +-inf beyond 65504, as in ggml);
//   no minfer kernel reads it.
//
// Dequantization is bit-exact with ggml (ggml-quants.c dequantize_row_*): one fp16 -> f32
// conversion per scale, then f32 multiplies/adds in ggml's order, e.g. Q4_K
// y = (d * sc) * q - (dmin * m). The fixtures in ../shared/fixtures/quant/ check every type.
//
// Quantization: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q8_K, F16 and BF16 give the same bytes as
// ggml's reference quantizers (quantize_row_*_ref: same scale formula, same rounding rule, same
// f32 operation order). Q4_K, Q5_K and Q6_K use minfer's own search (kquant_search.cpp), which
// minimises the squared error of the dequantized row; its bytes differ from ggml's.
//
// ---- Dot products: the accumulation contract ---------------------------------------------------
// vec_dot_<type>(n, w, a) = sum over the row of w[i] * a[i], where w is a row of <type> and a is a
// row of the type's vec_dot_type (F32 for F32, F16 for F16, BF16 for BF16, Q8_0 for
// Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for Q4_K/Q5_K/Q6_K), computed exactly as follows.
//
// 1. The row is cut into terms. For F32/F16/BF16 term t is element t; for a block type term t
//    is block t (a super-block for the K-quants). Each term is one f32 value:
//    - F32:  term = w * a (one f32 multiply, rounded; no fused multiply-add).
//    - F16, BF16: term = float(w) * float(a); exact, since a product of two halves (two bf16) fits
//      in an f32 significand (bf16: unless it leaves the f32 normal range).
//    - Q4_0, Q5_0, Q8_0 (x Q8_0): isum = sum_j wq_j * aq_j over the 32 elements in int32
//      (wq = q - 8, q - 16, q); term = (dw * da) * float(isum).
//    - Q4_1, Q5_1 (x Q8_1): isum = sum_j wq_j * aq_j, asum = sum_j aq_j (int32; wq = q in
//      [0, 15] / [0, 31]); term = (dw * da) * float(isum) + (mw * da) * float(asum).
//      The Q8_1 `s` field is not used: asum is exact, s is rounded to half.
//    - Q4_K, Q5_K (x Q8_K): isum = sum_{j<8} sc_j * (sum_{l<32} q_jl * aq_jl),
//      msum = sum_{j<8} m_j * (bsums[2j] + bsums[2j+1]) (int32; q in [0, 15] / [0, 31], bsums of
//      the Q8_K block); term = (d * da) * float(isum) - (dmin * da) * float(msum).
//    - Q6_K (x Q8_K): isum = sum_{g<16} scales[g] * (sum_{l<16} (q_gl - 32) * aq_gl) (int32);
//      term = (d * da) * float(isum).
//    Here dw, mw, d, dmin are the weight block's halves converted to f32, da the activation
//    block's scale (half converted, or the f32 d of Q8_K). Every * and + / - is one rounded f32
//    operation in the order written (parentheses first, left to right), float(i) rounds an int32
//    to nearest; no fused multiply-add. The integer sums are exact (no int32 overflow is possible
//    for any bit pattern of the blocks), so their order is free.
// 2. Term t is added (f32) to lane t % 32 of 32 lanes that start at +0.0f, in increasing t.
// 3. The lanes are folded by halving: lane[k] += lane[k + w] for w = 16, 8, 4, 2, 1 (k < w), and
//    the result is lane[0].
//
// A kernel that follows 1-3 is bit-identical to the reference. One that sums the terms in
// another order agrees within (n_terms * 2^-24) * sum_t |term_t| plus the rounding of its own
// term formula. The references are within 1e-5 * sum|w * a| of the exact (f64) value on the
// fixtures (tests/test_quant_fixtures.cpp).
#pragma once

#include <cstdint>

namespace minfer::ref {

// ---- F32, F16, BF16 (quant_float.cpp) ---------------------------------------------------------
void dequantize_row_f32(const void* src, float* dst, int64_t n);
void quantize_row_f32(const float* src, void* dst, int64_t n);
float vec_dot_f32(int64_t n, const void* w, const void* a);
/// f16: IEEE half, round to nearest even, overflow to +-inf, NaN kept (core/fp16.h).
void dequantize_row_f16(const void* src, float* dst, int64_t n);
void quantize_row_f16(const float* src, void* dst, int64_t n);
float vec_dot_f16(int64_t n, const void* w, const void* a);
/// bf16: round to nearest even, NaN kept quiet (core/fp16.h; ggml_compute_fp32_to_bf16).
void dequantize_row_bf16(const void* src, float* dst, int64_t n);
void quantize_row_bf16(const float* src, void* dst, int64_t n);
float vec_dot_bf16(int64_t n, const void* w, const void* a);

// ---- legacy 32-element blocks (quant_legacy.cpp, dot_legacy.cpp) ------------------------------
void dequantize_row_q4_0(const void* src, float* dst, int64_t n);
void dequantize_row_q4_1(const void* src, float* dst, int64_t n);
void dequantize_row_q5_0(const void* src, float* dst, int64_t n);
void dequantize_row_q5_1(const void* src, float* dst, int64_t n);
void dequantize_row_q8_0(const void* src, float* dst, int64_t n);
void dequantize_row_q8_1(const void* src, float* dst, int64_t n);
/// Q4_0: d = x_m / -8 where x_m is the element of largest magnitude (first one on ties),
/// id = 1 / d (0 when d = 0), q = min(15, trunc(x * id + 8.5)), each step one f32 operation.
/// ggml quantize_row_q4_0_ref; the other legacy quantizers follow their _ref the same way.
void quantize_row_q4_0(const float* src, void* dst, int64_t n);
/// Q4_1: d = (max - min) / 15, m = min, q = min(15, trunc((x - min) * id + 0.5)).
void quantize_row_q4_1(const float* src, void* dst, int64_t n);
/// Q5_0: d = x_m / -16, q = min(31, trunc(x * id + 16.5)).
void quantize_row_q5_0(const float* src, void* dst, int64_t n);
/// Q5_1: d = (max - min) / 31, m = min, q = trunc((x - min) * id + 0.5).
void quantize_row_q5_1(const float* src, void* dst, int64_t n);
/// Q8_0: d = max|x| / 127, q = roundf(x * id) (ties away from zero).
void quantize_row_q8_0(const float* src, void* dst, int64_t n);
/// Q8_1: as Q8_0, plus s = half(sum(q) * d) with d before rounding to half.
void quantize_row_q8_1(const float* src, void* dst, int64_t n);
/// Weight x activation dot products (contract above).
float vec_dot_q4_0(int64_t n, const void* w, const void* a);
float vec_dot_q4_1(int64_t n, const void* w, const void* a);
float vec_dot_q5_0(int64_t n, const void* w, const void* a);
float vec_dot_q5_1(int64_t n, const void* w, const void* a);
float vec_dot_q8_0(int64_t n, const void* w, const void* a);

// ---- K-quants, 256-element super-blocks (quant_kquants.cpp, kquant_search.cpp, dot_kquants.cpp)
void dequantize_row_q4_K(const void* src, float* dst, int64_t n);
void dequantize_row_q5_K(const void* src, float* dst, int64_t n);
void dequantize_row_q6_K(const void* src, float* dst, int64_t n);
void dequantize_row_q8_K(const void* src, float* dst, int64_t n);
/// Q4_K / Q5_K / Q6_K: minfer's least-squares search (see kquant_search.cpp).
void quantize_row_q4_K(const float* src, void* dst, int64_t n);
void quantize_row_q5_K(const float* src, void* dst, int64_t n);
void quantize_row_q6_K(const float* src, void* dst, int64_t n);
/// Q8_K: x_m = element of largest magnitude (first on ties), iscale = -127 / x_m,
/// q = min(127, round_half_even(iscale * x)), d = 1 / iscale, bsums = sums of 16 q.
/// An all-zero super-block gives d = 0, q = 0, bsums = 0. ggml quantize_row_q8_K_ref.
void quantize_row_q8_K(const float* src, void* dst, int64_t n);
float vec_dot_q4_K(int64_t n, const void* w, const void* a);
float vec_dot_q5_K(int64_t n, const void* w, const void* a);
float vec_dot_q6_K(int64_t n, const void* w, const void* a);

}  // namespace minfer::ref
