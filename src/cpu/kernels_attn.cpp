// Attention over the KV cache and the KV store/load ops. KV regions are [kv_dim, n_ctx]: one row
// of kv_dim = n_head_kv * head_dim elements per cell, in f32, f16 or q8_0 (32-element blocks
// within the row, ggml's block_q8_0).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "cpu/kernels.h"
#include "cpu/simd/kernels.h"
#include "quant/quant.h"

namespace minfer::cpu {

using graph::Node;

void kv_row_to_f32(TensorType type, const void* region, int64_t row_len, int64_t row, float* dst) {
  const size_t rb = row_bytes(type, row_len);
  const uint8_t* src = static_cast<const uint8_t*>(region) + static_cast<size_t>(row) * rb;
  if (type == TensorType::F32) {
    std::memcpy(dst, src, rb);
  } else {
    type_traits(type).dequantize_row(src, dst, row_len);
  }
}

void op_kv_store(const OpContext& c, const Node& n) {
  const Node& ns = c.src_node(n, 0);
  const Node& nr = c.src_node(n, 1);
  const float* src = c.src(n, 0);
  auto* region = static_cast<uint8_t*>(c.plan.src_data(c.g, n, 1));
  const int32_t* cells = c.src<int32_t>(n, 2);
  const int64_t d = ns.ne[0];
  const int64_t n_tok = ns.ne[1];
  const int64_t n_cells = nr.ne[1];
  const size_t rb = row_bytes(nr.type, d);
  for (int64_t t = 0; t < n_tok; ++t)
    if (cells[t] < 0 || cells[t] >= n_cells)
      fail("node {}: KV cell {} out of range [0, {})", n.name, cells[t], n_cells);
  const TypeTraits* tt = nr.type == TensorType::F32 ? nullptr : &type_traits(nr.type);
  c.pool.parallel_for(n_tok, 1, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      uint8_t* dst = region + static_cast<size_t>(cells[t]) * rb;
      if (tt == nullptr) std::memcpy(dst, src + t * d, rb);
      else tt->quantize_row(src + t * d, dst, d);
    }
  });
}

void op_kv_load(const OpContext& c, const Node& n, float* out) {
  const Node& nr = c.src_node(n, 0);
  const void* region = c.plan.src_data(c.g, n, 0);
  const int64_t d = nr.ne[0];
  c.pool.parallel_for(n.p.n_kv, 16, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) kv_row_to_f32(nr.type, region, d, r, out + r * d);
  });
}

// For each token t and query head h (KV head h / (n_head / n_head_kv)):
//   s_c = scale * dot(q[t,h], K[c, kvh])  for visible cells c, softmax over them,
//   out[t,h] = sum_c p_c V[c, kvh].
// f32 and f16 regions are read in place by the SIMD dot/axpy helpers (src/cpu/simd); q8_0 rows
// are dequantized per (cell, KV head) into a small scratch. The cells are visited in index
// order for every token, so a token's result does not depend on how the batch was split.
void op_attn(const OpContext& c, const Node& n, float* out) {
  const Node& nk = c.src_node(n, 1);
  const Node& nv = c.src_node(n, 2);
  const float* q = c.src(n, 0);
  const auto* kreg = static_cast<const uint8_t*>(c.plan.src_data(c.g, n, 1));
  const auto* vreg = static_cast<const uint8_t*>(c.plan.src_data(c.g, n, 2));
  const int32_t* pos = c.src<int32_t>(n, 3);
  const int32_t* seq = c.src<int32_t>(n, 4);
  const int32_t* kv_pos = c.src<int32_t>(n, 5);
  const int32_t* kv_seq = c.src<int32_t>(n, 6);
  const int64_t hd = n.p.head_dim, n_head = n.p.n_head, n_head_kv = n.p.n_head_kv;
  const int64_t n_kv = n.p.n_kv;
  const int64_t n_tok = n.ne[1];
  const int64_t kv_dim = n_head_kv * hd;
  const int64_t group = n_head / n_head_kv;
  const float scale = n.p.scale;
  const simd::CpuKernels& kk = simd::cpu_kernels();
  const size_t k_row = row_bytes(nk.type, kv_dim), v_row = row_bytes(nv.type, kv_dim);
  // Byte offset of KV head kvh inside a row (q8_0: head_dim is a multiple of 32, so a head
  // starts on a block boundary).
  const auto head_offset = [&](TensorType t, int64_t kvh) { return row_bytes(t, kvh * hd); };
  if (nk.type == TensorType::Q8_0 || nv.type == TensorType::Q8_0)
    if (hd % 32 != 0) fail("node {}: q8_0 KV needs head_dim a multiple of 32, is {}", n.name, hd);

  c.pool.parallel_for(n_tok * n_head, 1, [&](int64_t w0, int64_t w1, int) {
    std::vector<float> scores(static_cast<size_t>(n_kv));
    std::vector<float> acc(static_cast<size_t>(hd)), tmp(static_cast<size_t>(hd));
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t t = w / n_head, h = w % n_head, kvh = h / group;
      const float* qv = q + (t * n_head + h) * hd;
      const size_t ko = head_offset(nk.type, kvh), vo = head_offset(nv.type, kvh);
      float mx = -INFINITY;
      for (int64_t cell = 0; cell < n_kv; ++cell) {
        const bool visible = kv_pos[cell] >= 0 && kv_seq[cell] == seq[t] && kv_pos[cell] <= pos[t];
        if (!visible) {
          scores[static_cast<size_t>(cell)] = -INFINITY;
          continue;
        }
        const uint8_t* kr = kreg + static_cast<size_t>(cell) * k_row + ko;
        float s;
        if (nk.type == TensorType::F32) {
          s = kk.dot_f32(hd, qv, reinterpret_cast<const float*>(kr));
        } else if (nk.type == TensorType::F16) {
          s = kk.dot_f32_f16(hd, qv, reinterpret_cast<const uint16_t*>(kr));
        } else {
          type_traits(nk.type).dequantize_row(kr, tmp.data(), hd);
          s = kk.dot_f32(hd, qv, tmp.data());
        }
        s *= scale;
        scores[static_cast<size_t>(cell)] = s;
        mx = std::max(mx, s);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      float* o = out + (t * n_head + h) * hd;
      if (mx == -INFINITY) {  // no visible cell: defined as zeros
        std::copy(acc.begin(), acc.end(), o);
        continue;
      }
      double sum = 0.0;
      for (int64_t cell = 0; cell < n_kv; ++cell) {
        const float s = scores[static_cast<size_t>(cell)];
        if (s == -INFINITY) continue;
        const float p = std::exp(s - mx);
        sum += p;
        const uint8_t* vr = vreg + static_cast<size_t>(cell) * v_row + vo;
        if (nv.type == TensorType::F32) {
          kk.axpy_f32(hd, p, reinterpret_cast<const float*>(vr), acc.data());
        } else if (nv.type == TensorType::F16) {
          kk.axpy_f16(hd, p, reinterpret_cast<const uint16_t*>(vr), acc.data());
        } else {
          type_traits(nv.type).dequantize_row(vr, tmp.data(), hd);
          kk.axpy_f32(hd, p, tmp.data(), acc.data());
        }
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t i = 0; i < hd; ++i) o[i] = acc[static_cast<size_t>(i)] * inv;
    }
  });
}

}  // namespace minfer::cpu
