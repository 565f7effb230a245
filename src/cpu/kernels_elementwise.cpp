// Elementwise ops on f32 tensors.
#include <cmath>

#include "cpu/kernels.h"

namespace minfer::cpu {
namespace {

using graph::Node;

// Applies f(a_row, b_row, out_row, len) over rows of `n` with b broadcast by the graph rule
// (b.ne[i] == 1 repeats). Rows are ne[0] long.
template <typename F>
void broadcast_rows(const OpContext& c, const Node& n, float* out, F f) {
  const Node& na = c.src_node(n, 0);
  const Node& nb = c.src_node(n, 1);
  const float* a = c.src(n, 0);
  const float* b = c.src(n, 1);
  const int64_t ne0 = n.ne[0];
  const int64_t rows = n.ne[1] * n.ne[2] * n.ne[3];
  const bool b_full_row = nb.ne[0] == ne0;
  c.pool.parallel_for(rows, 16, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i1 = r % n.ne[1], i2 = (r / n.ne[1]) % n.ne[2], i3 = r / (n.ne[1] * n.ne[2]);
      const int64_t b_row = (nb.ne[1] == 1 ? 0 : i1) + nb.ne[1] * ((nb.ne[2] == 1 ? 0 : i2) + nb.ne[2] * (nb.ne[3] == 1 ? 0 : i3));
      f(a + r * na.ne[0], b + b_row * nb.ne[0], b_full_row, out + r * ne0, ne0);
    }
  });
}

template <typename F>
void unary(const OpContext& c, const Node& n, float* out, F f) {
  const float* a = c.src(n, 0);
  const int64_t total = n.n_elements();
  c.pool.parallel_for(total, 4096, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) out[i] = f(a[i]);
  });
}

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

void op_add(const OpContext& c, const Node& n, float* out) {
  broadcast_rows(c, n, out, [](const float* a, const float* b, bool full, float* o, int64_t len) {
    if (full) {
      for (int64_t i = 0; i < len; ++i) o[i] = a[i] + b[i];
    } else {
      for (int64_t i = 0; i < len; ++i) o[i] = a[i] + b[0];
    }
  });
}

void op_mul(const OpContext& c, const Node& n, float* out) {
  broadcast_rows(c, n, out, [](const float* a, const float* b, bool full, float* o, int64_t len) {
    if (full) {
      for (int64_t i = 0; i < len; ++i) o[i] = a[i] * b[i];
    } else {
      for (int64_t i = 0; i < len; ++i) o[i] = a[i] * b[0];
    }
  });
}

void op_silu(const OpContext& c, const Node& n, float* out) { unary(c, n, out, silu); }

void op_swiglu(const OpContext& c, const Node& n, float* out) {
  const float* g = c.src(n, 0);
  const float* u = c.src(n, 1);
  const int64_t total = n.n_elements();
  c.pool.parallel_for(total, 4096, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) out[i] = silu(g[i]) * u[i];
  });
}

}  // namespace minfer::cpu
