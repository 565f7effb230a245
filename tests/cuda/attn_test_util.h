// Helpers of the attention device tests: KV regions made the way the CPU stores them, a window
// of cells with sequences, positions and empty cells, and the one-node Attn graph over them.
#pragma once

#ifdef MINFER_HAS_CUDA

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda_test_util.h"
#include "quant/quant.h"

namespace minfer::test {

/// Region bytes of `cells` rows of `kv_dim` values quantized (as the CPU stores them) to `type`.
inline std::vector<uint8_t> region_bytes(TensorType type, int64_t kv_dim, int64_t cells, uint32_t seed) {
  const auto v = random_floats(static_cast<size_t>(kv_dim * cells), seed);
  const size_t rb = row_bytes(type, kv_dim);
  std::vector<uint8_t> out(rb * static_cast<size_t>(cells));
  for (int64_t c = 0; c < cells; ++c)
    type_traits(type).quantize_row(v.data() + c * kv_dim, out.data() + static_cast<size_t>(c) * rb, kv_dim);
  return out;
}

struct AttnCase {
  const char* name;
  int64_t nt, n_head, n_head_kv, hd, n_ctx, n_kv;
};

/// Cells 0 .. n_used-1 hold sequence (c % n_seq) at increasing positions per sequence; the rest
/// are empty. Tokens continue their sequences; the last token of a case with 3 sequences asks
/// for sequence 7, which holds no cell (it must get zeros).
struct AttnData {
  std::vector<int32_t> pos, seq, kv_pos, kv_seq;
};

inline AttnData attn_data(const AttnCase& c, int n_seq) {
  AttnData d;
  const int64_t n_used = c.n_kv - 17;
  std::vector<int32_t> next(static_cast<size_t>(n_seq), 0);
  for (int64_t cell = 0; cell < c.n_kv; ++cell) {
    if (cell < n_used) {
      const int s = static_cast<int>(cell % n_seq);
      d.kv_seq.push_back(s);
      d.kv_pos.push_back(next[static_cast<size_t>(s)]++);
    } else {
      d.kv_seq.push_back(-1);
      d.kv_pos.push_back(-1);
    }
  }
  for (int64_t t = 0; t < c.nt; ++t) {
    const int s = static_cast<int>(t % n_seq);
    d.seq.push_back(s);
    // Tokens sit inside their sequence (causal masking cuts the window) or at its end.
    d.pos.push_back(t % 2 == 0 ? next[static_cast<size_t>(s)] - 1 : next[static_cast<size_t>(s)] / 2);
  }
  if (n_seq == 3) d.seq.back() = 7;
  return d;
}

/// The one-node Attn graph of case c; with `bounds` (i32 [2 * nt], graph.h KvBounds) also the
/// per-token bounds input and the hints seq_tokens / seq_window.
inline TestGraph attn_graph(const AttnCase& c, TensorType type, const AttnData& d, const std::vector<float>& q,
                            const std::vector<uint8_t>& kb, const std::vector<uint8_t>& vb,
                            const std::vector<int32_t>* bounds = nullptr, int32_t seq_tokens = 0,
                            int64_t seq_window = 0) {
  TestGraph t;
  const int64_t kv_dim = c.n_head_kv * c.hd;
  const graph::NodeId qn = t.g.input(graph::InputKind::Other, TensorType::F32, {c.hd * c.n_head, c.nt, 1, 1}, "q");
  t.inputs.emplace_back(qn, as_bytes(q));
  const graph::NodeId kr = t.g.kv_region(0, 0, type, kv_dim, c.n_ctx);
  const graph::NodeId vr = t.g.kv_region(0, 1, type, kv_dim, c.n_ctx);
  t.regions.push_back({0, 0, kb});
  t.regions.push_back({0, 1, vb});
  const auto in = [&](graph::InputKind kind, const std::vector<int32_t>& v, const char* name) {
    const graph::NodeId id = t.g.input(kind, TensorType::I32, {static_cast<int64_t>(v.size()), 1, 1, 1}, name);
    t.inputs.emplace_back(id, as_bytes(v));
    return id;
  };
  const graph::NodeId pos = in(graph::InputKind::Positions, d.pos, "pos");
  const graph::NodeId seq = in(graph::InputKind::SeqIds, d.seq, "seq");
  const graph::NodeId kvp = in(graph::InputKind::KvPos, d.kv_pos, "kv_pos");
  const graph::NodeId kvs = in(graph::InputKind::KvSeq, d.kv_seq, "kv_seq");
  const graph::NodeId kvb = bounds != nullptr ? in(graph::InputKind::KvBounds, *bounds, "kv_bounds") : graph::kNoNode;
  const graph::NodeId y = t.g.attn(qn, kr, vr, pos, seq, kvp, kvs, static_cast<int32_t>(c.n_head),
                                   static_cast<int32_t>(c.n_head_kv), static_cast<int32_t>(c.hd), c.n_kv,
                                   1.0f / std::sqrt(static_cast<float>(c.hd)), "attn", kvb, seq_tokens, seq_window);
  t.g.mark_output(y);
  t.outputs.push_back(y);
  return t;
}

}  // namespace minfer::test

#endif  // MINFER_HAS_CUDA
