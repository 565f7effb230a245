// The CpuKernels table of one SIMD level (see level_api.h). Included only by table_avx2.cpp /
// table_avx512.cpp.
#pragma once

#include "cpu/simd/convert.h"
#include "cpu/simd/level_api.h"
#include "cpu/simd/levels.h"
#include "quant/quant.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {
namespace {

void q8_0_act(const float* x, void* dst, int64_t k) {
  detail::check_row("quantize", TensorType::Q8_0, k);
  quantize_q8_legacy<false>(x, dst, k);
}
void q8_1_act(const float* x, void* dst, int64_t k) {
  detail::check_row("quantize", TensorType::Q8_1, k);
  quantize_q8_legacy<true>(x, dst, k);
}
void q8_K_act(const float* x, void* dst, int64_t k) {
  detail::check_row("quantize", TensorType::Q8_K, k);
  quantize_q8_K(x, dst, k);
}
void f16_act(const float* x, void* dst, int64_t k) {
  detail::check_row("quantize", TensorType::F16, k);
  quantize_f16(x, dst, k);
}
void bf16_act(const float* x, void* dst, int64_t k) {
  detail::check_row("quantize", TensorType::BF16, k);
  quantize_bf16(x, dst, k);
}
void f32_act(const float* x, void* dst, int64_t k) {
  detail::check_row("quantize", TensorType::F32, k);
  quantize_f32(x, dst, k);
}

TypeKernels entry(TensorType t, VecDotFn dot, QuantizeActFn q, GemmTileFn gemm) {
  TypeKernels e;
  e.type = t;
  e.vec_dot_type = type_traits(t).vec_dot_type;
  e.vec_dot = dot;
  e.quantize_act = q;
  e.gemm_tile = gemm;
  return e;
}

}  // namespace

void fill(CpuKernels& k) {
  using TT = TensorType;
  k.level = MINFER_SIMD_AVX512 ? SimdLevel::kAvx512 : SimdLevel::kAvx2;
  k.types = {
      entry(TT::F32, vec_dot_f32, f32_act, gemm_f32),
      entry(TT::F16, vec_dot_f16, f16_act, gemm_f16),
      entry(TT::BF16, vec_dot_bf16, bf16_act, gemm_bf16),
      entry(TT::Q4_0, vec_dot_q4_0, q8_0_act, gemm_q4_0),
      entry(TT::Q4_1, vec_dot_q4_1, q8_1_act, gemm_q4_1),
      entry(TT::Q5_0, vec_dot_q5_0, q8_0_act, gemm_q5_0),
      entry(TT::Q5_1, vec_dot_q5_1, q8_1_act, gemm_q5_1),
      entry(TT::Q8_0, vec_dot_q8_0, q8_0_act, gemm_q8_0),
      entry(TT::Q4_K, vec_dot_q4_K, q8_K_act, gemm_q4_K),
      entry(TT::Q5_K, vec_dot_q5_K, q8_K_act, gemm_q5_K),
      entry(TT::Q6_K, vec_dot_q6_K, q8_K_act, gemm_q6_K),
  };
  k.f16_to_f32 = f16_to_f32_row;
  k.f32_to_f16 = f32_to_f16_row;
  k.bf16_to_f32 = bf16_to_f32_row;
  k.f32_to_bf16 = f32_to_bf16_row;
  k.attn_scores_f16 = attn_scores_f16;
  k.attn_pv_f16 = attn_pv_f16;
  k.exp_shift = exp_shift;
  fill_packed(k);
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
