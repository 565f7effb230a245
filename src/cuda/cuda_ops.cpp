// The op table of the CUDA backend: which ops and shapes it runs (unsupported_reason), the
// scratch each op needs, and the dispatch from each op to its kernel launchers.
#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "core/env.h"
#include "core/error.h"
#include "cuda/cuda_backend.h"
#include "graph/op_timing.h"
#include "cuda/kernels/attn_decode.cuh"
#include "cuda/kernels/attention.cuh"
#include "cuda/kernels/flash_attn.cuh"
#include "cuda/kernels/elementwise.cuh"
#include "cuda/kernels/get_rows.cuh"
#include "cuda/kernels/kv.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.cuh"
#include "cuda/kernels/norm.cuh"
#include "cuda/kernels/norm_quantize.cuh"
#include "cuda/kernels/rope.cuh"
#include "cuda/kernels/rope_store.cuh"
#include "quant/quant.h"

namespace minfer::cuda {

using graph::Graph;
using graph::Node;
using graph::NodeId;
using graph::Op;

namespace {

constexpr size_t kAlign = 256;
constexpr int64_t kMaxRopeDims = 8192;  // the rope kernel keeps n_rot floats in shared memory

size_t align_up(size_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

const Node& src(const Graph& g, const Node& n, int i) { return g.node(n.src[static_cast<size_t>(i)]); }

/// Bytes of the weight tensor w (its type's row bytes times its rows), for the L2 prefetch
/// hints; 0 (no hint) for a row that is not whole blocks, which preparing the graph refuses anyway.
size_t weight_bytes(const Node& w) {
  if (w.ne[0] < 0 || w.ne[0] % static_cast<int64_t>(type_traits(w.type).block_size) != 0) return 0;
  return row_bytes(w.type, w.ne[0]) * static_cast<size_t>(w.ne[1] * w.ne[2] * w.ne[3]);
}

/// Appends the weight tensor w, at device address p, to the hint h (at most 3 ranges).
void hint_add(L2AheadHint& h, const void* p, const Node& w) {
  if (h.n >= 3) return;
  h.w[h.n] = p;
  h.bytes[h.n] = weight_bytes(w);
  ++h.n;
}

AttnShape attn_shape(const Graph& g, const Node& n) {
  AttnShape s;
  s.n_tok = src(g, n, 0).ne[1];
  s.n_head = n.p.n_head;
  s.n_head_kv = n.p.n_head_kv;
  s.head_dim = n.p.head_dim;
  s.n_kv = n.p.n_kv;
  s.seq_tok = n.p.seq_tokens;
  s.window = n.n_src > 7 && n.src[7] != graph::kNoNode ? n.p.seq_window : 0;
  return s;
}

std::string matmul_reason(TensorType t, int64_t k) {
  const char* why = nullptr;
  if (matmul_supported(t, k, &why)) return {};
  return fmt::format("{} weights with rows of {}: {}", type_name(t), k,
                     why != nullptr ? why : "no CUDA matmul kernel");
}

/// Activations of an op are f32 (ids and positions i32): the sources that must be f32.
std::string check_f32_sources(const Graph& g, const Node& n, std::initializer_list<int> idx) {
  for (int i : idx)
    if (src(g, n, i).type != TensorType::F32)
      return fmt::format("input {} ({}) is {}, the CUDA kernels read f32 activations", i,
                         src(g, n, i).name, type_name(src(g, n, i).type));
  return {};
}

/// FusedFFN sources: x, Wgate, Wup, Wdown [, r] [, norm weight (p.has_norm)].
bool ffn_has_residual(const Node& n) { return n.n_src - (n.p.has_norm ? 1 : 0) == 5; }

/// Scratch of a FusedQKV / FusedFFN with p.has_norm for the normalized rows x [k, nt] (f32),
/// used when the one-launch norm + quantize does not serve the op's weights.
size_t norm_scratch_bytes(const Node& n, int64_t k, int64_t nt) {
  return n.p.has_norm ? align_up(static_cast<size_t>(k * nt) * sizeof(float)) : 0;
}

/// True when the whole FFN runs on the f16 tensor cores (ffn_f16): gate and up of one type,
/// both it and the down type picked by f16_gemm_serves, ff a multiple of 8.
bool ffn_f16_serves(TensorType tg, TensorType tu, TensorType td, int64_t k, int64_t ff, int64_t nt) {
  return tg == tu && ff % 8 == 0 && f16_gemm_serves(tg, k, nt) && f16_gemm_serves(td, ff, nt);
}

/// Scratch of the f16 tensor-core products (matmul_f16) of m x k weights of `type` over nt
/// tokens, when f16_gemm_serves picks them; 0 otherwise.
size_t f16_scratch(TensorType type, int64_t k, int64_t m, int64_t nt) {
  return f16_gemm_serves(type, k, nt) ? align_up(f16_gemm_scratch_bytes(type, k, m, nt)) : 0;
}

}  // namespace

bool CudaBackend::supports_fused(Op op) const {
  // RmsNorm: folded into the FusedQKV / FusedFFN that reads it (p.has_norm).
  return op == Op::SwiGLU || op == Op::FusedQKV || op == Op::FusedFFN || op == Op::MatMulAdd ||
         op == Op::QkvBiasRopeStore || op == Op::RmsNorm;
}

std::string CudaBackend::unsupported_reason(const Graph& g, const Node& n) const {
  if (graph::op_is_leaf(n.op) || graph::op_is_alias(n.op)) return {};
  if (n.op != Op::KvcacheStore && n.type != TensorType::F32)
    return fmt::format("output type {}: the CUDA kernels write f32 activations", type_name(n.type));
  switch (n.op) {
    case Op::Add:
    case Op::Mul:
    case Op::SwiGLU:
      return check_f32_sources(g, n, {0, 1});
    case Op::Silu:
      return check_f32_sources(g, n, {0});
    case Op::RmsNorm:
    case Op::QkNorm:
      return check_f32_sources(g, n, {0, 1});
    case Op::Rope:
      if (n.p.n_rot > kMaxRopeDims) return fmt::format("n_rot {} exceeds {}", n.p.n_rot, kMaxRopeDims);
      if (n.p.rope.has_freq_factors) return check_f32_sources(g, n, {0, 2});
      return check_f32_sources(g, n, {0});
    case Op::MatMul:
    case Op::MatMulAdd: {
      if (auto r = check_f32_sources(g, n, {1}); !r.empty()) return r;
      if (n.op == Op::MatMulAdd)
        if (auto r = check_f32_sources(g, n, {2}); !r.empty()) return r;
      return matmul_reason(src(g, n, 0).type, src(g, n, 0).ne[0]);
    }
    case Op::FusedQKV:
    case Op::FusedFFN: {
      if (auto r = check_f32_sources(g, n, {0}); !r.empty()) return r;
      for (int i = 1; i <= 3; ++i)
        if (auto r = matmul_reason(src(g, n, i).type, src(g, n, i).ne[0]); !r.empty()) return r;
      if (n.p.has_norm)
        if (auto r = check_f32_sources(g, n, {n.n_src - 1}); !r.empty()) return r;
      if (n.op == Op::FusedQKV && n.p.has_bias) return check_f32_sources(g, n, {4, 5, 6});
      if (n.op == Op::FusedFFN && ffn_has_residual(n)) return check_f32_sources(g, n, {4});
      return {};
    }
    case Op::GetRows:
      if (!get_rows_supported(src(g, n, 0).type))
        return fmt::format("{} tables have no CUDA gather kernel", type_name(src(g, n, 0).type));
      return {};
    case Op::KvcacheStore:
    case Op::KvcacheLoad: {
      const TensorType t = src(g, n, n.op == Op::KvcacheStore ? 1 : 0).type;
      if (!kv_type_supported(t)) return fmt::format("KV format {} is not supported (f32, f16, q8_0)", type_name(t));
      if (n.op == Op::KvcacheStore) return check_f32_sources(g, n, {0});
      return {};
    }
    case Op::QkvBiasRopeStore: {
      const TensorType kt = src(g, n, 1).type, vt = src(g, n, 2).type;
      if (kt != vt) return fmt::format("K ({}) and V ({}) regions differ in format", type_name(kt), type_name(vt));
      if (const char* why = rope_store_unsupported(n.p.head_dim, n.p.n_rot, kt); *why != '\0') return why;
      if (src(g, n, 0).ne[1] > kRopeStoreMaxTokens)
        return fmt::format("{} tokens exceed the {} a launch takes", src(g, n, 0).ne[1], kRopeStoreMaxTokens);
      if (n.p.rope.has_freq_factors)
        if (auto r = check_f32_sources(g, n, {n.n_src - 1}); !r.empty()) return r;
      if (n.p.has_qk_norm) return check_f32_sources(g, n, {0, 5, 6});
      return check_f32_sources(g, n, {0});
    }
    case Op::Attn: {
      const TensorType kt = src(g, n, 1).type, vt = src(g, n, 2).type;
      if (kt != vt) return fmt::format("K ({}) and V ({}) regions differ in format", type_name(kt), type_name(vt));
      if (const char* why = attn_unsupported(attn_shape(g, n), kt); *why != '\0') return why;
      return check_f32_sources(g, n, {0});
    }
    default:
      return fmt::format("{} has no CUDA kernel", graph::op_name(n.op));
  }
}

size_t CudaBackend::node_scratch_bytes(const Graph& g, const Node& n) const {
  switch (n.op) {
    case Op::MatMul:
    case Op::MatMulAdd: {
      const Node& w = src(g, n, 0);
      const int64_t k = w.ne[0], nt = src(g, n, 1).n_elements() / k;
      size_t b = align_up(quantized_activation_bytes(w.type, k, nt));
      if (n.op == Op::MatMulAdd) b += align_up(static_cast<size_t>(w.ne[1] * nt) * sizeof(float));  // unfused product
      return b + f16_scratch(w.type, k, w.ne[1], nt);
    }
    case Op::FusedQKV: {
      const int64_t k = src(g, n, 0).ne[0], nt = src(g, n, 0).n_elements() / k;
      size_t b = 0;
      for (int i = 1; i <= 3; ++i) {
        bool seen = false;
        for (int j = 1; j < i; ++j) seen = seen || src(g, n, j).type == src(g, n, i).type;
        if (!seen) b += align_up(quantized_activation_bytes(src(g, n, i).type, k, nt));
      }
      size_t f16 = 0;  // per weight type: the outputs of that type in one matmul_f16 call
      for (int i = 1; i <= 3; ++i) {
        const TensorType t = src(g, n, i).type;
        if (!f16_gemm_serves(t, k, nt)) continue;
        int64_t ms[3];
        int cnt = 0;
        for (int j = 1; j <= 3; ++j)
          if (src(g, n, j).type == t) ms[cnt++] = src(g, n, j).ne[1];
        f16 = std::max(f16, align_up(f16_gemm_scratch_bytes(t, k, ms, cnt, nt)));
      }
      return b + f16 + norm_scratch_bytes(n, k, nt);
    }
    case Op::FusedFFN: {
      const int64_t k = src(g, n, 0).ne[0], nt = src(g, n, 0).n_elements() / k;
      const Node& wg = src(g, n, 1);
      const Node& wu = src(g, n, 2);
      const Node& wd = src(g, n, 3);
      const int64_t ff = wg.ne[1];
      size_t b = align_up(quantized_activation_bytes(wg.type, k, nt));
      if (wu.type != wg.type) b += align_up(quantized_activation_bytes(wu.type, k, nt));
      b += 2 * align_up(static_cast<size_t>(ff * nt) * sizeof(float));
      b += align_up(quantized_activation_bytes(wd.type, ff, nt));
      if (ffn_has_residual(n)) b += align_up(static_cast<size_t>(wd.ne[1] * nt) * sizeof(float));  // unfused product
      size_t f16 = std::max({f16_scratch(wg.type, k, ff, nt), f16_scratch(wu.type, k, ff, nt),
                             f16_scratch(wd.type, ff, wd.ne[1], nt)});
      if (ffn_f16_serves(wg.type, wu.type, wd.type, k, ff, nt))
        f16 = std::max(f16, align_up(ffn_f16_scratch_bytes(wg.type, wd.type, k, ff, wd.ne[1], nt)));
      return b + f16 + norm_scratch_bytes(n, k, nt);
    }
    case Op::Attn: {
      const AttnShape s = attn_shape(g, n);
      if (*attn_decode_unsupported(s, src(g, n, 1).type) == '\0')
        return attn_decode_plan(s, ctx_.info().sm_count, attn_chunk_, attn_head_slices_).scratch_bytes;
      if (flash_attn_ && flash_attn_preferred(s, src(g, n, 1).type, ctx_.info().sm_count)) return 0;  // prefill: flash, no scratch
      return attn_plan(s, ctx_.info().sm_count).scratch_bytes;
    }
    default:
      return 0;
  }
}

namespace {

/// What a launcher needs from one node; `launched` turns a failed launch into an Error.
struct OpArgs {
  const Graph& g;
  const graph::ExecPlan& plan;
  const Node& n;
  NodeId id;
  cudaStream_t stream;
  uint8_t* scratch;
  uint32_t* fault;
  int sm_count;
  int64_t attn_chunk;  ///< MINFER_CUDA_ATTN_CHUNK (0 = auto)
  int64_t attn_head_slices;  ///< MINFER_CUDA_ATTN_HEAD_SLICES (0 = auto)
  bool flash_attn;     ///< !MINFER_CUDA_NO_FLASH_ATTN
  L2AheadHint next;    ///< the weights the next matrix product of the split reads first

  template <typename T = float>
  T* in(int i) const { return static_cast<T*>(plan.src_data(g, n, i)); }
  float* out() const { return static_cast<float*>(plan.out_data(g, id)); }
  const Node& s(int i) const { return src(g, n, i); }
};

void launched(bool ok, const OpArgs& a) {
  if (ok) return;
  const LaunchFailure* f = launch_failure();
  const std::string site = f != nullptr && f->site != nullptr ? f->site : "(no launch recorded)";
  const std::string err = f != nullptr ? cuda_error_text(f->err) : "the launcher refused the shape";
  clear_launch_failure();
  fail("node {} ({}): CUDA launch {} failed: {}", a.n.name, graph::op_name(a.n.op), site, err);
}

Shape4 shape(const graph::Shape& s) { return {s[0], s[1], s[2], s[3]}; }

void op_add(const OpArgs& a) {
  launched(binary(BinaryOp::Add, a.in(0), a.in(1), a.out(), shape(a.n.ne), shape(a.s(1).ne), a.stream), a);
}
void op_mul(const OpArgs& a) {
  launched(binary(BinaryOp::Mul, a.in(0), a.in(1), a.out(), shape(a.n.ne), shape(a.s(1).ne), a.stream), a);
}
void op_silu(const OpArgs& a) { launched(silu(a.in(0), a.out(), a.n.n_elements(), a.stream), a); }
void op_swiglu(const OpArgs& a) { launched(swiglu(a.in(0), a.in(1), a.out(), a.n.n_elements(), a.stream), a); }
void op_rms_norm(const OpArgs& a) {
  const int64_t len = a.n.ne[0];
  launched(rms_norm(a.in(0), a.in(1), a.out(), len, a.n.n_elements() / len, a.n.p.eps, "rms_norm", a.stream), a);
}
void op_qk_norm(const OpArgs& a) {
  const int64_t len = a.n.p.head_dim;
  launched(rms_norm(a.in(0), a.in(1), a.out(), len, a.n.n_elements() / len, a.n.p.eps, "qk_norm", a.stream), a);
}
void op_rope(const OpArgs& a) {
  const int64_t hd = a.n.p.head_dim, n_rot = a.n.p.n_rot;
  // The CPU's expression (src/cpu/kernels_norm_rope.cpp), evaluated here on the host.
  const float theta_scale = std::pow(a.n.p.rope_theta, -2.0f / static_cast<float>(n_rot));
  const float* ff = a.n.p.rope.has_freq_factors ? a.in(2) : nullptr;
  launched(rope(a.in(0), a.in<int32_t>(1), a.out(), hd, a.n.ne[0] / hd, a.n.ne[1], n_rot, theta_scale, a.n.p.rope,
                ff, a.stream), a);
}
void op_get_rows(const OpArgs& a) {
  const Node& t = a.s(0);
  launched(get_rows(t.type, a.in<void>(0), t.ne[0], t.ne[1], row_bytes(t.type, t.ne[0]),
                    a.in<int32_t>(1), a.n.ne[1], a.out(), a.fault, a.stream), a);
}
void op_kv_store(const OpArgs& a) {
  const Node& r = a.s(1);
  const int64_t d = a.s(0).ne[0];
  launched(kv_store(r.type, a.in(0), a.in<int32_t>(2), d, a.s(0).ne[1], a.in<void>(1),
                    row_bytes(r.type, d), r.ne[1], a.fault, a.stream), a);
}
// srcs: qkv (planar FusedQKV output), K region, V region, pos, cells [, q_norm, k_norm]
// [, freq factors (last)].
void op_rope_store(const OpArgs& a) {
  const Node& kr = a.s(1);
  RopeStoreArgs r;
  r.qkv = a.in(0);
  r.n_tok = a.s(0).ne[1];
  r.head_dim = a.n.p.head_dim;
  r.n_head = a.n.p.n_head;
  r.n_head_kv = a.n.p.n_head_kv;
  r.n_rot = a.n.p.n_rot;
  // The CPU's expression (src/cpu/kernels_norm_rope.cpp), as op_rope evaluates it.
  r.theta_scale = std::pow(a.n.p.rope_theta, -2.0f / static_cast<float>(a.n.p.n_rot));
  r.rope = a.n.p.rope;
  if (a.n.p.rope.has_freq_factors) r.freq_factors = a.in(a.n.n_src - 1);
  r.pos = a.in<int32_t>(3);
  r.cells = a.in<int32_t>(4);
  if (a.n.p.has_qk_norm) {
    r.q_norm = a.in(5);
    r.k_norm = a.in(6);
    r.eps = a.n.p.eps;
  }
  r.q_out = a.out();
  r.k_region = a.in<void>(1);
  r.v_region = a.in<void>(2);
  r.row_bytes = row_bytes(kr.type, kr.ne[0]);
  r.n_cells = kr.ne[1];
  r.kv_type = kr.type;
  r.fault = a.fault;
  launched(rope_store(r, a.stream), a);
}

void op_kv_load(const OpArgs& a) {
  const Node& r = a.s(0);
  launched(kv_load(r.type, a.in<void>(0), row_bytes(r.type, r.ne[0]), r.ne[0], a.n.p.n_kv, a.out(), a.stream), a);
}
void op_attn(const OpArgs& a) {
  const AttnShape s = attn_shape(a.g, a.n);
  AttnArgs args;
  args.q = a.in(0);
  args.k = a.in<void>(1);
  args.v = a.in<void>(2);
  args.row_bytes = row_bytes(a.s(1).type, a.s(1).ne[0]);
  args.pos = a.in<int32_t>(3);
  args.seq = a.in<int32_t>(4);
  args.kv_pos = a.in<int32_t>(5);
  args.kv_seq = a.in<int32_t>(6);
  if (s.window > 0) args.kv_bounds = a.in<int32_t>(7);
  args.scale = a.n.p.scale;
  args.out = a.out();
  args.scratch = a.scratch;
  const TensorType kv = a.s(1).type;
  // Decode shapes (nt <= 8, or up to 64 tokens of several sequences with at most 8 each) take the
  // split-K decode kernels; the plan never depends on nt.
  if (*attn_decode_unsupported(s, kv) == '\0')
    launched(attn_decode(kv, s, attn_decode_plan(s, a.sm_count, a.attn_chunk, a.attn_head_slices), args, a.stream), a);
  else if (a.flash_attn && flash_attn_preferred(s, kv, a.sm_count))  // prefill (nt > 8): flash_attn.cuh
    launched(flash_attn(kv, s, args, a.stream), a);
  else
    launched(attention(kv, s, attn_plan(s, a.sm_count), args, a.stream), a);
}

/// y [m, n] (rows ldy apart) = W^T x for weights `w` of node source `wi`; `qx` holds the
/// quantized x for that weight type (or is x when the type reads f32 activations).
void matmul_into(const OpArgs& a, int wi, const float* x, const void* qx, int64_t n, float* y, int64_t ldy) {
  const Node& w = a.s(wi);
  launched(matmul(w.type, a.in<void>(wi), w.ne[0], w.ne[1], x, qx, n, y, ldy, a.stream), a);
}

/// Quantizes x [k, n] for weights of `type` into the scratch at `*cursor` (advanced); returns
/// the buffer the matmul reads (x itself when the type reads f32 activations).
const void* quantize_into(const OpArgs& a, TensorType type, const float* x, int64_t k, int64_t n, size_t* cursor) {
  const size_t bytes = quantized_activation_bytes(type, k, n);
  if (bytes == 0) return x;
  void* qx = a.scratch + *cursor;
  *cursor += align_up(bytes);
  launched(quantize_activations(type, x, k, n, qx, a.stream), a);
  return qx;
}

/// The input of a FusedQKV / FusedFFN with p.has_norm (x and, as the last source, the norm
/// weight): when every weight in `types` reads the same quantized activations and
/// rms_norm_quantize serves them, one launch writes those activations into the scratch at
/// `*cursor` (advanced) and *qx points at them; the returned x is then nullptr (nothing reads
/// f32 activations). Otherwise the normalized rows go to the scratch and are returned (*qx
/// stays nullptr). Without has_norm: x as it is.
const float* norm_input(const OpArgs& a, std::initializer_list<TensorType> types, int64_t k, int64_t n,
                        size_t* cursor, const void** qx) {
  *qx = nullptr;
  const float* x = a.in(0);
  if (!a.n.p.has_norm) return x;
  const float* w = a.in(a.n.n_src - 1);
  const TensorType t0 = *types.begin();
  bool one_family = rms_norm_quantize_supported(t0, k);
  for (TensorType t : types) one_family = one_family && same_activations(t0, t);
  if (one_family) {
    void* q = a.scratch + *cursor;
    *cursor += align_up(quantized_activation_bytes(t0, k, n));
    launched(rms_norm_quantize(t0, x, w, k, n, a.n.p.eps, q, a.stream), a);
    *qx = q;
    return nullptr;
  }
  auto* h = reinterpret_cast<float*>(a.scratch + *cursor);
  *cursor += align_up(static_cast<size_t>(k * n) * sizeof(float));
  launched(rms_norm(x, w, h, k, n, a.n.p.eps, "rms_norm_folded", a.stream), a);
  return h;
}

/// Runs `outs` (weights of type t with rows of k, reading qx) on the f16 tensor cores when
/// f16_gemm_serves picks them for n tokens, with their scratch at `cursor` (node_scratch_bytes
/// reserves f16_scratch beyond every op's other parts); false, launching nothing, otherwise.
bool f16_products(const OpArgs& a, TensorType t, int64_t k, const MatmulOut* outs, int n_outs, const void* qx,
                  int64_t n, size_t cursor) {
  if (!f16_gemm_serves(t, k, n)) return false;
  int64_t ms[3];
  for (int i = 0; i < n_outs && i < 3; ++i) ms[i] = outs[i].m;
  launched(matmul_f16(t, k, outs, n_outs, qx, n, a.scratch + cursor, f16_gemm_scratch_bytes(t, k, ms, n_outs, n),
                      a.stream, a.fault), a);
  return true;
}

/// One token column: the K-quant products `outs` straight from the f32 x where the lane kernel
/// serves them (it quantizes x itself: no quantize launch). True when that launch ran.
bool products_from_f32(const OpArgs& a, TensorType t, int64_t k, const MatmulOut* outs, int n_outs, const float* x,
                       int64_t n) {
  if (n != 1) return false;
  bool ran = false;
  launched(matmul_fused_from_f32(t, k, outs, n_outs, x, a.stream, &ran), a);
  return ran;
}

MatmulOut out_of(const void* w, int64_t m, float* y, const float* residual) {
  MatmulOut o;
  o.w = w;
  o.m = m;
  o.y = y;
  o.ldy = m;
  o.residual = residual;
  o.ldr = residual != nullptr ? m : 0;
  return o;
}

void op_matmul(const OpArgs& a) {
  const int64_t k = a.s(0).ne[0], n = a.s(1).n_elements() / k;
  size_t cursor = 0;
  set_l2_ahead_hint(a.next);
  const MatmulOut o = out_of(a.in<void>(0), a.s(0).ne[1], a.out(), nullptr);
  if (products_from_f32(a, a.s(0).type, k, &o, 1, a.in(1), n)) return;
  const void* qx = quantize_into(a, a.s(0).type, a.in(1), k, n, &cursor);
  if (f16_products(a, a.s(0).type, k, &o, 1, qx, n, cursor)) return;
  matmul_into(a, 0, a.in(1), qx, n, a.out(), a.s(0).ne[1]);
}

/// The unfused residual step: the product y [m, n] goes to the scratch at `*cursor` (advanced;
/// binary()'s operands are __restrict__, so the add never runs in place), then out = r + y (the
/// CPU's Add(r, product): one rounded add each).
void product_then_residual(const OpArgs& a, int wi, const float* x, const void* qx, int64_t n, const float* r,
                           size_t* cursor) {
  const int64_t m = a.s(wi).ne[1];
  auto* y = reinterpret_cast<float*>(a.scratch + *cursor);
  *cursor += align_up(static_cast<size_t>(m * n) * sizeof(float));
  matmul_into(a, wi, x, qx, n, y, m);
  const Shape4 s{m, n, 1, 1};
  launched(binary(BinaryOp::Add, r, y, a.out(), s, s, a.stream), a);
}

// srcs: W, x, r: out = r + W^T x. One launch with the add in the epilogue where the MMVQ kernels
// or MMQ kernels serve the shape (matmul_fused_serves), else the product and then the add.
void op_matmul_add(const OpArgs& a) {
  const TensorType t = a.s(0).type;
  const int64_t k = a.s(0).ne[0], m = a.s(0).ne[1], n = a.s(1).n_elements() / k;
  size_t cursor = 0;
  set_l2_ahead_hint(a.next);
  const MatmulOut o = out_of(a.in<void>(0), m, a.out(), a.in(2));
  if (products_from_f32(a, t, k, &o, 1, a.in(1), n)) return;
  const void* qx = quantize_into(a, t, a.in(1), k, n, &cursor);
  if (f16_products(a, t, k, &o, 1, qx, n, cursor)) return;
  if (matmul_fused_serves(t, k, &o, 1, n)) {
    launched(matmul_fused(t, k, &o, 1, qx, n, a.stream), a);
    return;
  }
  product_then_residual(a, 0, a.in(1), qx, n, a.in(2), &cursor);
}

/// FusedQKV's projection j (0 q, 1 k, 2 v) as a matmul output into its plane, with its bias.
MatmulOut qkv_out(const OpArgs& a, int j, float* const (&planes)[3]) {
  MatmulOut o;
  o.w = a.in<void>(1 + j);
  o.m = a.s(1 + j).ne[1];
  o.y = planes[j];
  o.ldy = o.m;
  o.bias = a.n.p.has_bias ? a.in(4 + j) : nullptr;
  return o;
}

/// Decode (one token) FusedQKV whose projections have exactly two K-quant types that the lane
/// kernel takes in one grid (matmul_fused_mixed): the first type's projections, then the
/// other's, with their biases, reading one quantized x (qx[0], or quantized here into the
/// scratch at *cursor and stored into qx[] for the per-type path if the launch declines). True
/// when that one launch ran.
bool qkv_in_one_mixed_launch(const OpArgs& a, int64_t k, const float* x, float* const (&planes)[3], const void* (&qx)[3],
                             size_t* cursor) {
  if (env_int("MINFER_CUDA_MMVQ_LANE_MIXED", 1) == 0) return false;  // off: one launch per type
  const TensorType t0 = a.s(1).type;
  TensorType t1 = t0;
  for (int j = 1; j < 3; ++j)
    if (a.s(1 + j).type != t0) {
      if (t1 != t0 && a.s(1 + j).type != t1) return false;  // three types
      t1 = a.s(1 + j).type;
    }
  if (t1 == t0) return false;
  const bool fwd = matmul_mixed_pair(t0, t1);
  if (!fwd && !matmul_mixed_pair(t1, t0)) return false;
  const TensorType ta = fwd ? t0 : t1, tb = fwd ? t1 : t0;
  MatmulOut outs[3];
  int n_outs = 0, count_a = 0;
  for (const TensorType t : {ta, tb}) {
    for (int j = 0; j < 3; ++j)
      if (a.s(1 + j).type == t) outs[n_outs++] = qkv_out(a, j, planes);
    if (t == ta) count_a = n_outs;  // outs[0, count_a) hold type ta
  }
  if (qx[0] == nullptr) {
    qx[0] = quantize_into(a, ta, x, k, 1, cursor);
    for (int j = 1; j < 3; ++j) qx[j] = qx[0];
  }
  set_l2_ahead_hint(a.next);
  bool ran = false;
  launched(matmul_fused_mixed(ta, tb, k, outs, count_a, 3, qx[0], a.stream, &ran), a);
  return ran;
}

// srcs: x, Wq, Wk, Wv [, bq, bk, bv] [, norm weight (has_norm: x is normalized first, in the
// quantize launch where norm_input allows)]; output planar: q [dq, n], then k, then v. The projections
// of one weight type share their quantized x; where the MMVQ kernels serve it, every projection
// of that type (with its bias) is one launch.
void op_fused_qkv(const OpArgs& a) {
  const int64_t k = a.s(0).ne[0], n = a.s(0).n_elements() / k;
  size_t cursor = 0;
  const void* qn = nullptr;
  const float* x = norm_input(a, {a.s(1).type, a.s(2).type, a.s(3).type}, k, n, &cursor, &qn);
  const void* qx[3] = {qn, qn, qn};
  float* planes[3];
  float* plane = a.out();
  for (int p = 0; p < 3; ++p) {
    planes[p] = plane;
    plane += a.s(1 + p).ne[1] * n;
  }
  bool done[3] = {false, false, false};
  if (n == 1 && qkv_in_one_mixed_launch(a, k, x, planes, qx, &cursor)) return;
  for (int p = 0; p < 3; ++p) {
    if (done[p]) continue;
    const TensorType t = a.s(1 + p).type;
    for (int j = 0; j < p; ++j)  // an earlier group of the same activation family
      if (qx[p] == nullptr && same_activations(a.s(1 + j).type, t)) qx[p] = qx[j];
    if (qx[p] == nullptr) qx[p] = quantize_into(a, t, x, k, n, &cursor);
    MatmulOut outs[3];
    int n_outs = 0;
    for (int j = p; j < 3; ++j)
      if (a.s(1 + j).type == t) outs[n_outs++] = qkv_out(a, j, planes);
    // The L2 hint of this group's launch: the projections a later launch computes, else the
    // next node's product.
    L2AheadHint later;
    for (int j = p + 1; j < 3; ++j)
      if (!done[j] && a.s(1 + j).type != t) hint_add(later, a.in<void>(1 + j), a.s(1 + j));
    set_l2_ahead_hint(later.n > 0 ? later : a.next);
    const bool f16 = f16_gemm_serves(t, k, n);
    if (f16 || matmul_fused_serves(t, k, outs, n_outs, n)) {
      for (int j = p; j < 3; ++j) {
        if (a.s(1 + j).type != t) continue;
        done[j] = true;
        qx[j] = qx[p];
      }
      if (!f16_products(a, t, k, outs, n_outs, qx[p], n, cursor))
        launched(matmul_fused(t, k, outs, n_outs, qx[p], n, a.stream), a);
      continue;
    }
    for (int j = p; j < 3; ++j) {
      if (a.s(1 + j).type != t) continue;
      const int64_t m = a.s(1 + j).ne[1];
      matmul_into(a, 1 + j, x, qx[p], n, planes[j], m);
      if (a.n.p.has_bias) launched(add_bias(planes[j], a.in(4 + j), m, n, a.stream), a);
      done[j] = true;
      qx[j] = qx[p];
    }
  }
}

// srcs: x, Wgate, Wup, Wdown [, r] [, norm weight (has_norm, as in op_fused_qkv)]: out = Wdown^T (silu(Wgate^T x) * (Wup^T x)) [+ r].
// Where the MMVQ kernels serve them, gate, up and SwiGLU are one launch and the residual add
// is the down product's epilogue.
void op_fused_ffn(const OpArgs& a) {
  const int64_t k = a.s(0).ne[0], n = a.s(0).n_elements() / k;
  const int64_t ff = a.s(1).ne[1];
  const TensorType tg = a.s(1).type, tu = a.s(2).type, td = a.s(3).type;
  const int64_t m = a.s(3).ne[1];
  const float* res = ffn_has_residual(a.n) ? a.in(4) : nullptr;
  size_t cursor = 0;
  const void* qg = nullptr;
  const float* x = norm_input(a, {tg, tu}, k, n, &cursor, &qg);
  if (qg == nullptr) qg = quantize_into(a, tg, x, k, n, &cursor);
  if (ffn_f16_serves(tg, tu, td, k, ff, n)) {  // prefill: gate/up + SwiGLU, then down, on f16 tensor cores
    launched(ffn_f16(tg, td, k, ff, m, a.in<void>(1), a.in<void>(2), a.in<void>(3), qg, n, a.out(), res,
                     a.scratch + cursor, ffn_f16_scratch_bytes(tg, td, k, ff, m, n), a.stream, a.fault), a);
    return;
  }
  auto* gate = reinterpret_cast<float*>(a.scratch + cursor);
  cursor += align_up(static_cast<size_t>(ff * n) * sizeof(float));
  L2AheadHint down;  // read after gate/up
  hint_add(down, a.in<void>(3), a.s(3));
  set_l2_ahead_hint(down);
  if (tu == tg && matmul_fused_supported(tg, k, n)) {
    launched(matmul_swiglu(tg, k, ff, a.in<void>(1), a.in<void>(2), qg, n, gate, ff, nullptr, 0, a.stream), a);
  } else {
    const void* qu = same_activations(tu, tg) ? qg : quantize_into(a, tu, x, k, n, &cursor);
    auto* up = reinterpret_cast<float*>(a.scratch + cursor);
    cursor += align_up(static_cast<size_t>(ff * n) * sizeof(float));
    const MatmulOut gu[2] = {out_of(a.in<void>(1), ff, gate, nullptr), out_of(a.in<void>(2), ff, up, nullptr)};
    if (tu != tg || !f16_products(a, tg, k, gu, 2, qg, n, cursor)) {
      matmul_into(a, 1, x, qg, n, gate, ff);
      matmul_into(a, 2, x, qu, n, up, ff);
    }
    launched(swiglu(gate, up, gate, ff * n, a.stream), a);
  }
  const MatmulOut o = out_of(a.in<void>(3), m, a.out(), res);
  set_l2_ahead_hint(a.next);
  if (products_from_f32(a, td, ff, &o, 1, gate, n)) return;
  const void* qh = quantize_into(a, td, gate, ff, n, &cursor);
  if (f16_products(a, td, ff, &o, 1, qh, n, cursor)) return;
  if (res != nullptr && matmul_fused_serves(td, ff, &o, 1, n)) {
    launched(matmul_fused(td, ff, &o, 1, qh, n, a.stream), a);
    return;
  }
  if (res != nullptr) {
    product_then_residual(a, 3, gate, qh, n, res, &cursor);
    return;
  }
  matmul_into(a, 3, gate, qh, n, a.out(), m);
}

using OpFn = void (*)(const OpArgs&);
struct OpEntry {
  Op op;
  OpFn fn;
};

// The dispatch table: one launcher per op (leaves and aliases have nothing to run).
constexpr OpEntry kOpTable[] = {
    {Op::Add, op_add},               {Op::Mul, op_mul},
    {Op::Silu, op_silu},             {Op::SwiGLU, op_swiglu},
    {Op::RmsNorm, op_rms_norm},      {Op::QkNorm, op_qk_norm},
    {Op::Rope, op_rope},             {Op::MatMul, op_matmul},
    {Op::FusedQKV, op_fused_qkv},    {Op::FusedFFN, op_fused_ffn},
    {Op::GetRows, op_get_rows},      {Op::KvcacheStore, op_kv_store},
    {Op::KvcacheLoad, op_kv_load},   {Op::Attn, op_attn},
    {Op::MatMulAdd, op_matmul_add},  {Op::QkvBiasRopeStore, op_rope_store},
};

OpFn find_op(Op op) {
  for (const OpEntry& e : kOpTable)
    if (e.op == op) return e.fn;
  return nullptr;
}

}  // namespace

namespace {

/// The weights the first matrix product after node `id` (before node `end`, the split's end)
/// reads first: a MatMul's or MatMulAdd's matrix, FusedQKV's q, k, v matrices in grid order,
/// FusedFFN's gate and up side by side. Empty when none follows within the next 16 nodes that
/// compute (dead nodes, leaves such as the next layer's weights, and aliases do not count).
L2AheadHint next_product_weights(const Graph& g, const graph::ExecPlan& plan, NodeId id, size_t end) {
  L2AheadHint h;
  int computing = 0;
  for (size_t j = static_cast<size_t>(id) + 1; j < end && computing < 16; ++j) {
    const Node& n = g.nodes()[j];
    if (n.dead || graph::op_is_leaf(n.op) || graph::op_is_alias(n.op)) continue;
    ++computing;
    int first = -1, count = 0;
    if (n.op == Op::MatMul || n.op == Op::MatMulAdd) first = 0, count = 1;
    if (n.op == Op::FusedQKV) first = 1, count = 3;
    if (n.op == Op::FusedFFN) first = 1, count = 2, h.side_by_side = true;
    if (first < 0) continue;
    for (int s = first; s < first + count; ++s) hint_add(h, plan.src_data(g, n, s), src(g, n, s));
    return h;
  }
  return h;
}

}  // namespace

void CudaBackend::run_node(const Graph& g, const graph::ExecPlan& plan, NodeId id, size_t end) {
  const Node& n = g.node(id);
  if (n.dead || graph::op_is_leaf(n.op) || graph::op_is_alias(n.op)) return;
  const OpFn fn = find_op(n.op);
  if (fn == nullptr) fail("node {} ({}): no CUDA kernel", n.name, graph::op_name(n.op));
  // An error latched by an earlier CUDA call is reported as latched, never blamed on this node.
  if (const cudaError_t e = take_latched_error(); e != cudaSuccess)
    fail("node {} ({}): a CUDA error was latched before its launch (raised by an earlier call, "
         "not by this node): {}", n.name, graph::op_name(n.op), cuda_error_text(e));
  // The L2 hint the node's matmul launches pass on is this thread's until the node returns or
  // throws.
  struct HintReset {
    ~HintReset() { set_l2_ahead_hint({}); }
  } reset;
  fn(OpArgs{g, plan, n, id, stream_, static_cast<uint8_t*>(scratch_), fault_dev_, ctx_.info().sm_count, attn_chunk_,
            attn_head_slices_, flash_attn_, next_product_weights(g, plan, id, end)});
}

void CudaBackend::run_direct(const Graph& g, const graph::ExecPlan& plan, size_t begin, size_t end) {
  if (profile_) return run_profiled(g, plan, begin, end);
  for (size_t i = begin; i < end; ++i) run_node(g, plan, static_cast<NodeId>(i), end);
}

namespace {
// "MatMul q4_K 3584x18944 n1": op timing's row (the op, +norm where an RmsNorm is folded in,
// the weight type of matrix ops), the weight's shape, the token count.
std::string profile_class(const Graph& g, const Node& n) {
  std::string key = graph::op_timing_class(g, n);
  if (const int src_w = graph::matrix_weight_source(n); src_w >= 0) {
    const Node& w = g.node(n.src[static_cast<size_t>(src_w)]);
    key += fmt::format(" {}x{}", w.ne[0], w.ne[1]);
  }
  if (n.op == Op::Attn) key += fmt::format(" kv{}", n.p.n_kv);
  key += fmt::format(" n{}", n.op == Op::Attn || n.op == Op::Rope ? n.ne[1] : n.ne[1]);
  return key;
}
}  // namespace

void CudaBackend::run_profiled(const Graph& g, const graph::ExecPlan& plan, size_t begin, size_t end) {
  struct Mark {
    NodeId id;
    std::string key;  ///< MINFER_CUDA_PROFILE's row (profile_class)
    cudaEvent_t a, b;
  };
  std::vector<Mark> marks;
  // Trace events place the device times from the host clock read as the first event is queued.
  const double host0 = graph::trace_clock_ms();
  for (size_t i = begin; i < end; ++i) {
    const Node& n = g.nodes()[i];
    if (n.dead || graph::op_is_leaf(n.op) || graph::op_is_alias(n.op)) continue;
    Mark m{static_cast<NodeId>(i), profile_class(g, n), nullptr, nullptr};
    cudaEventCreate(&m.a);
    cudaEventCreate(&m.b);
    cudaEventRecord(m.a, stream_);
    run_node(g, plan, m.id, end);
    cudaEventRecord(m.b, stream_);
    marks.push_back(std::move(m));
  }
  cudaStreamSynchronize(stream_);
  const bool op_timing = graph::op_timing_enabled();
  const bool prefill = graph::is_prefill(g);
  for (const Mark& m : marks) {
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, m.a, m.b);
    if (op_timing) {
      const std::string cls = graph::op_timing_class(g, g.node(m.id));
      graph::record_op_time(prefill, cls, ms);
      float since = 0.0f;
      cudaEventElapsedTime(&since, marks.front().a, m.a);
      graph::record_trace_node(prefill, g.node(m.id).name, cls, host0 + since, ms, true);
    }
    ProfileEntry& e = profile_entries_[m.key];
    e.ms += ms;
    e.count++;
    profile_total_ms_ += ms;
  }
  for (const Mark& m : marks) {  // after the loop: the first event is every trace event's origin
    cudaEventDestroy(m.a);
    cudaEventDestroy(m.b);
  }
}

void CudaBackend::print_profile() const {
  if (!profile_ || profile_entries_.empty() || !env_flag("MINFER_CUDA_PROFILE")) return;
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [k, e] : profile_entries_) rows.push_back({e.ms, k});
  std::sort(rows.rbegin(), rows.rend());
  std::fprintf(stderr, "cuda profile (device time between events around each node, direct launches):\n");
  std::fprintf(stderr, "%10s %7s %9s %10s  %s\n", "total ms", "share", "count", "us/call", "class");
  for (const auto& [ms, k] : rows) {
    const ProfileEntry& e = profile_entries_.at(k);
    std::fprintf(stderr, "%10.3f %6.1f%% %9llu %10.2f  %s\n", ms, 100.0 * ms / profile_total_ms_,
                 static_cast<unsigned long long>(e.count), 1000.0 * ms / static_cast<double>(e.count), k.c_str());
  }
}

}  // namespace minfer::cuda
