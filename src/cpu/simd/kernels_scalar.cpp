// The scalar level: the reference kernels of src/quant (quant_ref.h) and plain loops. It is the
// fallback on CPUs without AVX2 and the baseline the tests compare the SIMD levels against.
#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "cpu/simd/exp_ref.h"
#include "cpu/simd/levels.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"

namespace minfer::cpu::simd::detail {
namespace {

template <TensorType T, VecDotFn Dot>
void gemm_scalar(int64_t k, const void* w, size_t w_row_bytes, int64_t nr, const void* a,
                 size_t a_row_bytes, int64_t nc, float* out, int64_t out_stride) {
  check_gemm(T, k, w_row_bytes, nr, a_row_bytes, nc, out_stride);
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int64_t t = 0; t < nc; ++t)
    for (int64_t j = 0; j < nr; ++j)
      out[j + t * out_stride] = Dot(k, wb + static_cast<size_t>(j) * w_row_bytes,
                                    ab + static_cast<size_t>(t) * a_row_bytes);
}

void f16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}
void f32_to_f16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}
void bf16_to_f32(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}
void exp_shift(int64_t n, float* x, float shift) {
  for (int64_t i = 0; i < n; ++i) x[i] = exp_softmax(x[i] - shift);
}

template <TensorType T, VecDotFn Dot, QuantizeActFn Q>
TypeKernels entry() {
  TypeKernels e;
  e.type = T;
  e.vec_dot_type = type_traits(T).vec_dot_type;
  e.vec_dot = Dot;
  e.quantize_act = Q;
  e.gemm_tile = gemm_scalar<T, Dot>;
  return e;
}

}  // namespace

void attn_scores_f16_ref(int64_t hd, const uint16_t* k, int64_t k_stride, int64_t n, const float* q, float* s) {
  std::vector<float> row(static_cast<size_t>(hd));
  for (int64_t i = 0; i < n; ++i) {
    f16_to_f32(k + i * k_stride, row.data(), hd);
    s[i] = ref::vec_dot_f32(hd, row.data(), q);
  }
}

void attn_pv_f16_ref(int64_t hd, const uint16_t* v, int64_t v_stride, int64_t n, const float* p,
                     const uint8_t* use, float* o) {
  // out[d] = ref::vec_dot_f32 over the cells of (V^T row d, p), with the skipped cells' terms
  // exact zeros: term i goes to lane i % 32, the lanes fold by halving (quant_ref.h).
  std::vector<float> acc(static_cast<size_t>(32 * hd), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    if (use != nullptr && use[i] == 0) continue;
    float* a = acc.data() + (i % 32) * hd;
    for (int64_t d = 0; d < hd; ++d) a[d] += fp16_to_fp32(v[i * v_stride + d]) * p[i];
  }
  for (int64_t w = 16; w >= 1; w /= 2)
    for (int64_t l = 0; l < w; ++l)
      for (int64_t d = 0; d < hd; ++d) acc[static_cast<size_t>(l * hd + d)] += acc[static_cast<size_t>((l + w) * hd + d)];
  std::memcpy(o, acc.data(), static_cast<size_t>(hd) * sizeof(float));
}

void fill_scalar(CpuKernels& k) {
  k.level = SimdLevel::kScalar;
  using TT = TensorType;
  k.types = {
      entry<TT::F32, ref::vec_dot_f32, ref::quantize_row_f32>(),
      entry<TT::F16, ref::vec_dot_f16, ref::quantize_row_f16>(),
      entry<TT::BF16, ref::vec_dot_bf16, ref::quantize_row_bf16>(),
      entry<TT::Q4_0, ref::vec_dot_q4_0, ref::quantize_row_q8_0>(),
      entry<TT::Q4_1, ref::vec_dot_q4_1, ref::quantize_row_q8_1>(),
      entry<TT::Q5_0, ref::vec_dot_q5_0, ref::quantize_row_q8_0>(),
      entry<TT::Q5_1, ref::vec_dot_q5_1, ref::quantize_row_q8_1>(),
      entry<TT::Q8_0, ref::vec_dot_q8_0, ref::quantize_row_q8_0>(),
      entry<TT::Q4_K, ref::vec_dot_q4_K, ref::quantize_row_q8_K>(),
      entry<TT::Q5_K, ref::vec_dot_q5_K, ref::quantize_row_q8_K>(),
      entry<TT::Q6_K, ref::vec_dot_q6_K, ref::quantize_row_q8_K>(),
  };
  k.f16_to_f32 = f16_to_f32;
  k.f32_to_f16 = f32_to_f16;
  k.bf16_to_f32 = bf16_to_f32;
  k.f32_to_bf16 = f32_to_bf16;
  k.attn_scores_f16 = attn_scores_f16_ref;
  k.attn_pv_f16 = attn_pv_f16_ref;
  k.exp_shift = exp_shift;
}

}  // namespace minfer::cpu::simd::detail
