// Attention over the KV cache and the KV store/load ops. KV regions are [kv_dim, n_ctx]: one row
// of kv_dim = n_head_kv * head_dim elements per cell, in f32, f16 or q8_0 (32-element blocks
// within the row, ggml's block_q8_0).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

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
  } else if (type == TensorType::F16) {  // SIMD conversion, bit-identical to core/fp16.h
    simd::cpu_kernels().f16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, row_len);
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
  // f16 through the SIMD row conversion and q8_0 through the SIMD activation quantizer: both
  // give the reference bytes (cpu/simd/kernels.h), so the cache holds the same bits either way.
  const simd::CpuKernels& kk = simd::cpu_kernels();
  const TypeTraits* tt = nr.type == TensorType::F32 ? nullptr : &type_traits(nr.type);
  const simd::TypeKernels* q8 = nr.type == TensorType::Q8_0 ? &kk.get(TensorType::Q8_0) : nullptr;
  c.pool.parallel_for(n_tok, 1, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      uint8_t* dst = region + static_cast<size_t>(cells[t]) * rb;
      if (tt == nullptr) std::memcpy(dst, src + t * d, rb);
      else if (nr.type == TensorType::F16) kk.f32_to_f16(src + t * d, reinterpret_cast<uint16_t*>(dst), d);
      else if (q8 != nullptr && q8->vec_dot_type == TensorType::Q8_0) q8->quantize_act(src + t * d, dst, d);
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

// Attention as two matrix products per (query head, block of tokens), so prefill runs at GEMM
// speed: S = Q K^T over the cells [0, hi) that any token of the block can see, a masked softmax
// per token row, O = P V. K of each KV head is read as f32 rows (f32 regions in place, f16/q8_0
// converted once per op over the used window), V is converted transposed (rows of n_kv cells per
// dimension) so P V is a row-by-row dot product too. Both products use the SIMD gemm_tile of F32
// weights, whose result for a (row, token) pair does not depend on how many tokens or rows a
// call covers (the accumulation contract of quant_ref.h), and extra masked cells only add exact
// zeros, so a token's output is bitwise the same whether the batch held 1 token or 512. Decode
// over an f16 cache skips the conversion and computes the same terms from the halves (below).
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
  // Per-token bounds (graph.h KvBounds, optional): token t sees no cell outside [lo, hi).
  const int32_t* bounds = n.n_src > 7 && n.src[7] != graph::kNoNode ? c.src<int32_t>(n, 7) : nullptr;
  const int64_t hd = n.p.head_dim, n_head = n.p.n_head, n_head_kv = n.p.n_head_kv;
  const int64_t n_kv = n.p.n_kv;
  const int64_t n_tok = n.ne[1];
  const int64_t kv_dim = n_head_kv * hd;
  const int64_t group = n_head / n_head_kv;
  const float scale = n.p.scale;
  const simd::CpuKernels& kk = simd::cpu_kernels();
  const simd::TypeKernels& f32k = kk.get(TensorType::F32);
  constexpr int64_t kTokenBlock = 32;
  // Blocks of at most this many tokens take the direct f16 path below. Llama-3.2-1B Q4_0 at depth
  // 1024, 2 threads: a verify of 2 tokens 31.6 -> 37.7 t/s that way, of 4 tokens 52.2 -> 41.3 (the
  // GEMM path shares one conversion of the window among a block's tokens).
  constexpr int64_t kDirectTokens = 2;

  // Visible cells: hi[t] = 1 + the last cell token t may attend to (0 when none).
  std::vector<int64_t> hi(static_cast<size_t>(n_tok), 0);
  const auto visible = [&](int64_t t, int64_t cell) {
    return kv_pos[cell] >= 0 && kv_seq[cell] == seq[t] && kv_pos[cell] <= pos[t];
  };
  // lo[t]: the first cell the products of token t start at, a multiple of 32 (the lanes of the
  // dot-product contract, quant_ref.h), so that the cells skipped before it, which would only add
  // exact zeros to lanes that start at +0, leave every sum's bits as they are.
  std::vector<int64_t> lo(static_cast<size_t>(n_tok), 0);
  int64_t hi_all = 0;
  for (int64_t t = 0; t < n_tok; ++t) {
    const int64_t top = bounds != nullptr ? std::min<int64_t>(n_kv, bounds[2 * t + 1]) : n_kv;
    if (bounds != nullptr) lo[static_cast<size_t>(t)] = std::clamp<int64_t>(bounds[2 * t], 0, top) / 32 * 32;
    for (int64_t cell = top - 1; cell >= lo[static_cast<size_t>(t)]; --cell)
      if (visible(t, cell)) {
        hi[static_cast<size_t>(t)] = cell + 1;
        break;
      }
    hi_all = std::max(hi_all, hi[static_cast<size_t>(t)]);
  }

  // Cells no token of this op can see (empty, another sequence's, or past every token's position
  // in its sequence) may hold any bytes, NaN included (a cache is not cleared). The GEMMs below
  // run over every cell up to hi, so such cells enter as zeros: masked scores become -inf anyway,
  // and a zero V row keeps 0 * NaN out of P V. Seen by some token iff kv_pos >= 0 and kv_pos <= the
  // largest position of its sequence among the tokens.
  std::vector<std::pair<int32_t, int32_t>> seq_max_pos;  // (seq, max pos) of the op's tokens
  for (int64_t t = 0; t < n_tok; ++t) {
    auto it = std::find_if(seq_max_pos.begin(), seq_max_pos.end(), [&](const auto& e) { return e.first == seq[t]; });
    if (it == seq_max_pos.end()) seq_max_pos.emplace_back(seq[t], pos[t]);
    else it->second = std::max(it->second, pos[t]);
  }
  const auto seen_by_some_token = [&](int64_t cell) {
    if (kv_pos[cell] < 0) return false;
    for (const auto& [s, p] : seq_max_pos)
      if (s == kv_seq[cell]) return kv_pos[cell] <= p;
    return false;
  };

  // Token blocks: runs of at most kTokenBlock consecutive tokens of one sequence (a decode step of
  // several sequences: one block each, over that sequence's cells only).
  std::vector<std::pair<int64_t, int64_t>> blocks;  // (first token, tokens)
  for (int64_t t = 0; t < n_tok;) {
    int64_t e = t + 1;
    while (e < n_tok && e - t < kTokenBlock && seq[e] == seq[t]) ++e;
    blocks.emplace_back(t, e - t);
    t = e;
  }
  const auto n_blocks = static_cast<int64_t>(blocks.size());

  // block_window: the cells [blo, bhi) the products of the tokens [t0, t0 + tb) run over.
  // softmax_row: token t's scores over that window (srow[i] is cell blo + i) become masked (-inf),
  // scaled, then softmax numerators (exp_softmax of simd/exp_ref.h); returns their sum, in double
  // in cell order. normalize: o (hd floats) times 1 / sum.
  const auto block_window = [&](int64_t t0, int64_t tb) {
    int64_t bhi = 0, blo = n_kv;
    for (int64_t t = t0; t < t0 + tb; ++t) {
      bhi = std::max(bhi, hi[static_cast<size_t>(t)]);
      blo = std::min(blo, lo[static_cast<size_t>(t)]);
    }
    return std::pair<int64_t, int64_t>(blo, bhi);
  };
  const auto softmax_row = [&](int64_t t, float* srow, int64_t blo, int64_t wn) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < wn; ++i) {
      if (!visible(t, blo + i)) {
        srow[i] = -INFINITY;
        continue;
      }
      srow[i] *= scale;
      mx = std::max(mx, srow[i]);
    }
    double sum = 0.0;
    if (mx == -INFINITY) {  // this token sees no cell of the block's window
      std::fill(srow, srow + wn, 0.0f);
    } else {
      kk.exp_shift(wn, srow, mx);  // masked (-inf) cells become exact zeros
      for (int64_t i = 0; i < wn; ++i) sum += srow[i];
    }
    return sum;
  };
  const auto normalize = [&](float* o, double sum) {
    const float inv = sum > 0.0 ? static_cast<float>(1.0 / sum) : 0.0f;
    for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
  };

  // Decode (blocks of at most kDirectTokens tokens) over an f16 cache: each token's scores and
  // weighted sum straight from the halves (attn_scores_f16 / attn_pv_f16), with the same terms in
  // the same lanes as the two products below, so the same bits, without converting and transposing
  // the whole window for every token. Cells no token of the op sees are skipped in P V, as their
  // zero rows are below.
  int64_t max_tb = 0;
  for (const auto& b : blocks) max_tb = std::max(max_tb, b.second);
  if (nk.type == TensorType::F16 && nv.type == TensorType::F16 && max_tb <= kDirectTokens) {
    std::vector<uint8_t> seen(static_cast<size_t>(hi_all));
    for (int64_t cell = 0; cell < hi_all; ++cell) seen[static_cast<size_t>(cell)] = seen_by_some_token(cell) ? 1 : 0;
    const auto* k16 = reinterpret_cast<const uint16_t*>(kreg);
    const auto* v16 = reinterpret_cast<const uint16_t*>(vreg);
    c.pool.parallel_for(n_head * n_blocks, 1, [&](int64_t w0, int64_t w1, int) {
      std::vector<float> sbuf;
      for (int64_t w = w0; w < w1; ++w) {
        const int64_t h = w / n_blocks, b = w % n_blocks, g = h / group;
        const int64_t t0 = blocks[static_cast<size_t>(b)].first, tb = blocks[static_cast<size_t>(b)].second;
        const auto [blo, bhi] = block_window(t0, tb);
        for (int64_t t = t0; t < t0 + tb; ++t) {
          float* o = out + (t * n_head + h) * hd;
          if (bhi <= blo) {  // no token of the block sees a cell: defined as zeros
            std::fill(o, o + hd, 0.0f);
            continue;
          }
          const int64_t wn = bhi - blo;
          sbuf.resize(static_cast<size_t>(wn));
          kk.attn_scores_f16(hd, k16 + blo * kv_dim + g * hd, kv_dim, wn, q + (t * n_head + h) * hd, sbuf.data());
          const double sum = softmax_row(t, sbuf.data(), blo, wn);
          kk.attn_pv_f16(hd, v16 + blo * kv_dim + g * hd, kv_dim, wn, sbuf.data(), seen.data() + blo, o);
          normalize(o, sum);
        }
      }
    });
    return;
  }

  // K as f32 rows (in place when the region is f32), V transposed: vt[g][d][cell].
  const float* kf = reinterpret_cast<const float*>(kreg);
  const int64_t k_stride = kv_dim;  // floats between cells of kf
  const size_t k_elems = nk.type == TensorType::F32 ? 0 : static_cast<size_t>(hi_all * kv_dim);
  const size_t v_elems = static_cast<size_t>(kv_dim * hi_all);
  if (c.fwork.size() < k_elems + v_elems) c.fwork.resize(k_elems + v_elems);
  float* kbuf = c.fwork.data();
  float* vt = c.fwork.data() + k_elems;
  // V is transposed kTransposeCells cells at a time through a small row-major tile, so each store
  // into vt fills a run of kTransposeCells floats of one row (cell by cell, every store landed
  // in a different cache line: at 512 cells that was most of a 1B model's attention time).
  constexpr int64_t kTransposeCells = 16;
  c.pool.parallel_for(hi_all, kTransposeCells, [&](int64_t r0, int64_t r1, int) {
    std::vector<float> tile(static_cast<size_t>(kTransposeCells * kv_dim));
    for (int64_t c0 = r0; c0 < r1; c0 += kTransposeCells) {
      const int64_t nc = std::min(kTransposeCells, r1 - c0);
      for (int64_t i = 0; i < nc; ++i) {
        const int64_t cell = c0 + i;
        float* row = tile.data() + i * kv_dim;
        if (!seen_by_some_token(cell)) {
          if (k_elems != 0) std::fill(kbuf + cell * kv_dim, kbuf + (cell + 1) * kv_dim, 0.0f);
          std::fill(row, row + kv_dim, 0.0f);
          continue;
        }
        if (k_elems != 0) kv_row_to_f32(nk.type, kreg, kv_dim, cell, kbuf + cell * kv_dim);
        kv_row_to_f32(nv.type, vreg, kv_dim, cell, row);
      }
      for (int64_t d = 0; d < kv_dim; ++d) {
        float* dst = vt + d * hi_all + c0;
        for (int64_t i = 0; i < nc; ++i) dst[i] = tile[static_cast<size_t>(i * kv_dim + d)];
      }
    }
  });
  if (k_elems != 0) kf = kbuf;

  c.pool.parallel_for(n_head * n_blocks, 1, [&](int64_t w0, int64_t w1, int) {
    std::vector<float> sbuf;
    std::vector<double> sums(static_cast<size_t>(kTokenBlock));
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t h = w / n_blocks, b = w % n_blocks, g = h / group;
      const int64_t t0 = blocks[static_cast<size_t>(b)].first, tb = blocks[static_cast<size_t>(b)].second;
      const auto [blo, bhi] = block_window(t0, tb);
      float* o0 = out + (t0 * n_head + h) * hd;
      if (bhi <= blo) {  // no token of the block sees a cell: defined as zeros
        for (int64_t t = 0; t < tb; ++t) std::fill(o0 + t * n_head * hd, o0 + t * n_head * hd + hd, 0.0f);
        continue;
      }
      const int64_t wn = bhi - blo;  // cells [blo, bhi); srow[i] is cell blo + i
      sbuf.resize(static_cast<size_t>(tb * wn));
      // S[t][cell] = dot(K row cell, q row t).
      f32k.gemm_tile(hd, kf + blo * k_stride + g * hd, static_cast<size_t>(k_stride) * sizeof(float), wn,
                     q + (t0 * n_head + h) * hd, static_cast<size_t>(n_head * hd) * sizeof(float), tb,
                     sbuf.data(), wn);
      for (int64_t t = 0; t < tb; ++t) sums[static_cast<size_t>(t)] = softmax_row(t0 + t, sbuf.data() + t * wn, blo, wn);
      // O[t][d] = dot(V^T row d, P row t), written straight into the output, then 1/sum.
      f32k.gemm_tile(wn, vt + g * hd * hi_all + blo, static_cast<size_t>(hi_all) * sizeof(float), hd, sbuf.data(),
                     static_cast<size_t>(wn) * sizeof(float), tb, o0, n_head * hd);
      for (int64_t t = 0; t < tb; ++t) normalize(o0 + t * n_head * hd, sums[static_cast<size_t>(t)]);
    }
  });
}

}  // namespace minfer::cpu
