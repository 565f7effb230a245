// Matrix products: MatMul (weights of every supported type x f32 activations), the fused QKV and
// FFN ops built from it, and GetRows (embedding gather).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>

#include "core/error.h"
#include "cpu/kernels.h"
#include "cpu/simd/kernels.h"
#include "quant/quant.h"

namespace minfer::cpu {

using graph::Node;

QuantizedActs quantize_activations(ThreadPool& pool, std::vector<uint8_t>& buf, TensorType w_type,
                                   const float* x, int64_t k, int64_t n) {
  const simd::TypeKernels& tk = simd::cpu_kernels().get(w_type);
  QuantizedActs q;
  q.type = tk.vec_dot_type;
  q.k = k;
  q.n = n;
  if (q.type == TensorType::F32) {
    q.data = reinterpret_cast<const uint8_t*>(x);
    q.row_bytes = static_cast<size_t>(k) * sizeof(float);
    return q;
  }
  q.row_bytes = row_bytes(q.type, k);
  buf.resize(q.row_bytes * static_cast<size_t>(n));
  uint8_t* dst = buf.data();
  pool.parallel_for(n, 1, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) tk.quantize_act(x + t * k, dst + static_cast<size_t>(t) * q.row_bytes, k);
  });
  q.data = dst;
  return q;
}

void matmul_quantized(ThreadPool& pool, TensorType w_type, const void* w, int64_t m,
                      const QuantizedActs& xq, float* y, int64_t y_stride, const PackedWeight& packed) {
  const simd::TypeKernels& tk = simd::cpu_kernels().get(w_type);
  const size_t w_row = row_bytes(w_type, xq.k);
  const auto* wb = static_cast<const uint8_t*>(w);
  if (packed.data != nullptr) {
    // Split on whole interleaved groups so no thread redoes part of another's group.
    const int64_t g = packed.pack_rows;
    const int64_t groups = (m + g - 1) / g;
    pool.parallel_for(groups, 1, [&](int64_t g0, int64_t g1, int) {
      const int64_t j0 = g0 * g, j1 = std::min(m, g1 * g);
      tk.gemm_packed(xq.k, packed.data, packed.rows, j0, j1 - j0, xq.data, xq.row_bytes, xq.n, y + j0, y_stride);
    });
    return;
  }
  // One call per piece of rows (a few per thread, core/thread_pool.h) with all tokens: gemm_tile
  // repacks the activations once per call, then runs register tiles.
  pool.parallel_for(m, 16, [&](int64_t j0, int64_t j1, int) {
    tk.gemm_tile(xq.k, wb + static_cast<size_t>(j0) * w_row, w_row, j1 - j0, xq.data, xq.row_bytes, xq.n,
                 y + j0, y_stride);
  });
}

void op_matmul(const OpContext& c, const Node& n, float* out) {
  const Node& nw = c.src_node(n, 0);
  const Node& nx = c.src_node(n, 1);
  const int64_t k = nw.ne[0], m = nw.ne[1];
  const int64_t n_tok = nx.n_elements() / k;
  const QuantizedActs xq = quantize_activations(c.pool, c.work, nw.type, c.src(n, 1), k, n_tok);
  const void* w = c.plan.src_data(c.g, n, 0);
  matmul_quantized(c.pool, nw.type, w, m, xq, out, m, c.packed ? c.packed(nw, w) : PackedWeight{});
}

void op_fused_qkv(const OpContext& c, const Node& n, float* out) {
  // srcs: x, Wq, Wk, Wv [, bq, bk, bv]. Output planar: q [dq, n], k [dk, n], v [dv, n].
  const Node& nx = c.src_node(n, 0);
  const int64_t k = nx.ne[0];
  const int64_t n_tok = nx.n_elements() / k;
  QuantizedActs xq{};
  float* plane = out;
  for (int p = 0; p < 3; ++p) {
    const Node& nw = c.src_node(n, 1 + p);
    // Re-quantize only when this weight pairs with a different activation type.
    if (p == 0 || type_traits(nw.type).vec_dot_type != xq.type)
      xq = quantize_activations(c.pool, p == 0 ? c.work : c.work2, nw.type, c.src(n, 0), k, n_tok);
    const int64_t m = nw.ne[1];
    const void* w = c.plan.src_data(c.g, n, 1 + p);
    matmul_quantized(c.pool, nw.type, w, m, xq, plane, m, c.packed ? c.packed(nw, w) : PackedWeight{});
    if (n.p.has_bias) {
      const float* b = c.src(n, 4 + p);
      c.pool.parallel_for(n_tok, 4, [&](int64_t a, int64_t e, int) {
        for (int64_t t = a; t < e; ++t)
          for (int64_t j = 0; j < m; ++j) plane[t * m + j] += b[j];
      });
    }
    plane += m * n_tok;
  }
}

void op_fused_ffn(const OpContext& c, const Node& n, float* out) {
  // srcs: x, Wgate, Wup, Wdown. out = Wdown^T (silu(Wgate^T x) * (Wup^T x)).
  const Node& nx = c.src_node(n, 0);
  const Node& ng = c.src_node(n, 1);
  const Node& nu = c.src_node(n, 2);
  const Node& nd = c.src_node(n, 3);
  const int64_t k = nx.ne[0];
  const int64_t n_tok = nx.n_elements() / k;
  const int64_t ff = ng.ne[1];
  const auto fn = static_cast<size_t>(ff * n_tok);
  if (c.fwork.size() < 2 * fn) c.fwork.resize(2 * fn);
  const std::span<float> gate(c.fwork.data(), fn), up(c.fwork.data() + fn, fn);
  std::vector<uint8_t>& buf2 = c.work2;
  const auto weight = [&](int i) { return c.plan.src_data(c.g, n, i); };
  const auto packed = [&](int i) { return c.packed ? c.packed(c.src_node(n, i), weight(i)) : PackedWeight{}; };
  QuantizedActs xq = quantize_activations(c.pool, c.work, ng.type, c.src(n, 0), k, n_tok);
  matmul_quantized(c.pool, ng.type, weight(1), ff, xq, gate.data(), ff, packed(1));
  if (type_traits(nu.type).vec_dot_type != xq.type)
    xq = quantize_activations(c.pool, buf2, nu.type, c.src(n, 0), k, n_tok);
  matmul_quantized(c.pool, nu.type, weight(2), ff, xq, up.data(), ff, packed(2));
  c.pool.parallel_for(ff * n_tok, 4096, [&](int64_t a, int64_t e, int) {
    for (int64_t i = a; i < e; ++i) {
      const float g = gate[static_cast<size_t>(i)];
      gate[static_cast<size_t>(i)] = g / (1.0f + std::exp(-g)) * up[static_cast<size_t>(i)];
    }
  });
  const QuantizedActs hq = quantize_activations(c.pool, buf2, nd.type, gate.data(), ff, n_tok);
  matmul_quantized(c.pool, nd.type, weight(3), nd.ne[1], hq, out, nd.ne[1], packed(3));
}

void op_get_rows(const OpContext& c, const Node& n, float* out) {
  const Node& nt = c.src_node(n, 0);
  const int32_t* ids = c.src<int32_t>(n, 1);
  const int64_t d = nt.ne[0], rows = nt.ne[1];
  const int64_t n_ids = n.ne[1];
  const auto* table = static_cast<const uint8_t*>(c.plan.src_data(c.g, n, 0));
  const size_t rb = row_bytes(nt.type, d);
  const TypeTraits& tt = type_traits(nt.type);
  for (int64_t t = 0; t < n_ids; ++t)
    if (ids[t] < 0 || ids[t] >= rows) fail("node {}: row id {} out of range [0, {})", n.name, ids[t], rows);
  c.pool.parallel_for(n_ids, 1, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const uint8_t* src = table + static_cast<size_t>(ids[t]) * rb;
      if (nt.type == TensorType::F32) std::memcpy(out + t * d, src, static_cast<size_t>(d) * sizeof(float));
      else tt.dequantize_row(src, out + t * d, d);
    }
  });
}

}  // namespace minfer::cpu
