#include "cpu/cpu_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/env.h"
#include "core/error.h"
#include "cpu/simd/kernels.h"
#include "cpu/kernels.h"
#include "quant/quant.h"

namespace minfer::cpu {

using graph::Node;
using graph::Op;

CpuBackend::CpuBackend(int n_threads)
    : pool_(n_threads > 0 ? n_threads : default_thread_count()), pack_enabled_(!env_flag("MINFER_NO_CPU_PACK")) {}

void CpuBackend::register_weight(const graph::WeightTensor& w) {
  // Pack now (the engine shows progress) instead of at the first MatMul.
  Node n;
  n.op = Op::Weight;
  n.type = w.type;
  n.ne = w.ne;
  n.name = w.name;
  n.weight = &w;
  if (w.n_dims >= 2 && simd::cpu_kernels().find(w.type) != nullptr) packed_weight(n, w.data);
}

PackedWeight CpuBackend::packed_weight(const Node& wn, const void* data) {
  if (!pack_enabled_ || wn.op != Op::Weight) return {};
  auto it = packed_.find(data);
  if (it != packed_.end()) return it->second.view;
  Packed& p = packed_[data];
  const simd::TypeKernels& tk = simd::cpu_kernels().get(wn.type);
  if (tk.pack == nullptr || wn.ne[2] != 1 || wn.ne[3] != 1) return {};  // cached as "no packed form"
  const int64_t k = wn.ne[0], rows = wn.ne[1];
  const size_t bytes = tk.packed_bytes(k, rows);
  void* mem = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (mem == nullptr) throw OutOfMemoryError(fmt::format("cpu: cannot allocate {} bytes to pack {}", bytes, wn.name));
  p.mem = std::unique_ptr<uint8_t, void (*)(void*)>(static_cast<uint8_t*>(mem), std::free);
  // The packed copy replaces the mapped bytes for every MatMul: for a file mapping, let the kernel
  // drop the original's pages from this process as they are consumed (clean file pages; a later
  // read maps them in again, so an embedding that GetRows also reads only brings back the rows it
  // gathers). Never for heap or anonymous memory: there MADV_DONTNEED zeroes the pages, and the
  // next reader (another backend, GetRows, a second engine) would see zero weights. Packing in
  // chunks of whole row groups (the layout is group after group, so a chunk starting at row r0
  // lands at packed_bytes(k, r0)) keeps the peak at the packed copy plus one chunk of the
  // original instead of both whole tensors.
  const size_t rb = row_bytes(wn.type, k);
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const int64_t chunk = std::max<int64_t>(tk.pack_rows, (int64_t{4} << 20) / static_cast<int64_t>(rb) /
                                                            tk.pack_rows * tk.pack_rows);
  const auto* src = static_cast<const uint8_t*>(data);
  uintptr_t released = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const bool drop_pages = wn.weight != nullptr && wn.weight->file_mapped && data == wn.weight->data;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    tk.pack(k, src + static_cast<size_t>(r0) * rb, rb, n, p.mem.get() + tk.packed_bytes(k, r0));
    const uintptr_t done = (reinterpret_cast<uintptr_t>(src) + static_cast<size_t>(r0 + n) * rb) / page * page;
    if (drop_pages && done > released) {
      madvise(reinterpret_cast<void*>(released), done - released, MADV_DONTNEED);
      released = done;
    }
  }
  p.view = PackedWeight{p.mem.get(), rows, tk.pack_rows};
  packed_bytes_ += bytes;
  return p.view;
}

CpuBackend::~CpuBackend() {
  for (Buffer& b : buffers_) std::free(b.ptr);
}

std::string CpuBackend::describe() const {
  return fmt::format("cpu ({} thread{})", pool_.size(), pool_.size() == 1 ? "" : "s");
}

bool CpuBackend::supports_fused(Op op) const {
  return op == Op::SwiGLU || op == Op::FusedFFN || op == Op::FusedQKV;
}

std::string CpuBackend::unsupported_reason(const graph::Graph& g, const Node& n) const {
  const auto src_type = [&](int i) { return g.node(n.src[static_cast<size_t>(i)]).type; };
  switch (n.op) {
    case Op::MatMul:
    case Op::GetRows: {
      const TypeTraits* t = find_type_traits(src_type(0));
      if (t == nullptr || t->vec_dot == nullptr)
        return fmt::format("{} weights have no CPU kernel", type_name(src_type(0)));
      return {};
    }
    case Op::FusedQKV:
    case Op::FusedFFN:
      if (n.p.has_norm) return "the CPU keeps the RmsNorm unfolded (has_norm)";
      for (int i = 1; i <= 3; ++i) {
        const TypeTraits* t = find_type_traits(src_type(i));
        if (t == nullptr || t->vec_dot == nullptr)
          return fmt::format("{} weights have no CPU kernel", type_name(src_type(i)));
      }
      return {};
    case Op::KvcacheStore:
    case Op::KvcacheLoad:
    case Op::Attn: {
      const TensorType kt = n.op == Op::KvcacheStore ? src_type(1) : src_type(n.op == Op::Attn ? 1 : 0);
      if (kt != TensorType::F32 && kt != TensorType::F16 && kt != TensorType::Q8_0)
        return fmt::format("KV format {} is not supported (f32, f16, q8_0)", type_name(kt));
      return {};
    }
    case Op::QkvBiasRopeStore:
      return "fused op not implemented on the CPU";
    default:
      return {};
  }
}

int32_t CpuBackend::alloc_buffer(uint64_t bytes) {
  auto it = free_.find(bytes);
  if (it != free_.end() && !it->second.empty()) {
    const int32_t id = it->second.back();
    it->second.pop_back();
    return id;
  }
  const uint64_t padded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, padded == 0 ? 64 : padded);
  if (p == nullptr) throw OutOfMemoryError(fmt::format("cpu: cannot allocate {} bytes", bytes));
  buffers_.push_back(Buffer{static_cast<uint8_t*>(p), bytes});
  ++generation_;
  pool_bytes_ += bytes;
  return static_cast<int32_t>(buffers_.size() - 1);
}

void CpuBackend::release_buffer(int32_t id) {
  MINFER_ASSERT(id >= 0 && static_cast<size_t>(id) < buffers_.size());
  free_[buffers_[static_cast<size_t>(id)].bytes].push_back(id);
}

void* CpuBackend::buffer_ptr(int32_t id) const {
  MINFER_ASSERT(id >= 0 && static_cast<size_t>(id) < buffers_.size());
  return buffers_[static_cast<size_t>(id)].ptr;
}

void CpuBackend::upload(void* dst, const void* src, uint64_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::download(void* dst, const void* src, uint64_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::copy(void* dst, const void* src, uint64_t bytes) { std::memcpy(dst, src, bytes); }

void CpuBackend::move_rows(void* base, uint64_t row_bytes, int64_t src, int64_t dst, int64_t count) {
  auto* b = static_cast<uint8_t*>(base);
  // memmove copies as if through a temporary, which is the contract for overlapping runs.
  std::memmove(b + static_cast<uint64_t>(dst) * row_bytes, b + static_cast<uint64_t>(src) * row_bytes,
               static_cast<uint64_t>(count) * row_bytes);
}

void CpuBackend::execute(const graph::Graph& g, const graph::ExecPlan& plan, size_t begin, size_t end) {
  const OpContext c{g, plan, pool_, work_, work2_, fwork_,
                    [this](const Node& wn, const void* data) { return packed_weight(wn, data); }};
  for (size_t i = begin; i < end; ++i) {
    const Node& n = g.nodes()[i];
    if (n.dead) continue;
    auto* out = static_cast<float*>(plan.home(g, static_cast<graph::NodeId>(i)).data);
    switch (n.op) {
      case Op::Input:
      case Op::Weight:
      case Op::KvRegion:
      case Op::View:
      case Op::Reshape:
        break;
      case Op::Add: op_add(c, n, out); break;
      case Op::Mul: op_mul(c, n, out); break;
      case Op::Silu: op_silu(c, n, out); break;
      case Op::SwiGLU: op_swiglu(c, n, out); break;
      case Op::RmsNorm: op_rms_norm(c, n, out); break;
      case Op::QkNorm: op_qk_norm(c, n, out); break;
      case Op::Rope: op_rope(c, n, out); break;
      case Op::MatMul: op_matmul(c, n, out); break;
      case Op::FusedQKV: op_fused_qkv(c, n, out); break;
      case Op::FusedFFN: op_fused_ffn(c, n, out); break;
      case Op::GetRows: op_get_rows(c, n, out); break;
      case Op::Attn: op_attn(c, n, out); break;
      case Op::KvcacheStore: op_kv_store(c, n); break;
      case Op::KvcacheLoad: op_kv_load(c, n, out); break;
      default:
        fail("node {} ({}): no CPU kernel", n.name, graph::op_name(n.op));
    }
  }
}

}  // namespace minfer::cpu
