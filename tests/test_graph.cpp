// The graph pipeline on the CPU backend: shape checks at build time, the FusionPass keeps results
// bitwise identical, the allocator reuses memory, execute queues the readbacks behind the work.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "graph/prepared_graph.h"

namespace minfer::graph {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

WeightTensor f32_weight(const std::string& name, std::vector<float>& data, int64_t ne0, int64_t ne1) {
  WeightTensor w;
  w.name = name;
  w.type = TensorType::F32;
  w.ne = {ne0, ne1, 1, 1};
  w.n_dims = ne1 == 1 ? 1 : 2;
  w.data = reinterpret_cast<const uint8_t*>(data.data());
  w.nbytes = data.size() * sizeof(float);
  return w;
}

KvResolver no_kv() {
  return [](BackendKind, int32_t, int32_t) -> TensorRef { return {}; };
}

TEST(Graph, ShapeMismatchIsAnErrorNamingTheNode) {
  std::vector<float> wd(4 * 3);
  WeightTensor w = f32_weight("w", wd, 4, 3);
  Graph g;
  const NodeId x = g.input(InputKind::Other, TensorType::F32, {5, 2, 1, 1}, "x");
  const NodeId wn = g.weight(w);
  try {
    g.matmul(wn, x, "blk.0.proj");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.proj"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ne0 4 vs 5"), std::string::npos) << e.what();
  }
}

// Attn's optional hints: per-token bounds must be i32 [2 * n], seq_window in [0, n_kv] and
// seq_tokens in [0, n]; the node records them (source 7, p.seq_window, p.seq_tokens).
TEST(Graph, AttnBoundsHintsAreCheckedAndRecorded) {
  const auto build = [](int64_t bounds_len, int32_t seq_tokens, int64_t seq_window) {
    Graph g;
    const NodeId q = g.input(InputKind::Other, TensorType::F32, {8, 3, 1, 1}, "q");
    const NodeId k = g.kv_region(0, 0, TensorType::F16, 4, 64);
    const NodeId v = g.kv_region(0, 1, TensorType::F16, 4, 64);
    const auto i32 = [&](int64_t n, const char* name) { return g.input(InputKind::Other, TensorType::I32, {n, 1, 1, 1}, name); };
    const NodeId b = i32(bounds_len, "bounds");
    const NodeId a = g.attn(q, k, v, i32(3, "pos"), i32(3, "seq"), i32(32, "kv_pos"), i32(32, "kv_seq"), 2, 1, 4, 32,
                            0.5f, "blk.0.attn", b, seq_tokens, seq_window);
    return std::pair<Graph, NodeId>(std::move(g), a);
  };
  const auto [g, a] = build(6, 1, 32);
  EXPECT_EQ(g.node(a).n_src, 8);
  EXPECT_EQ(g.node(a).p.seq_tokens, 1);
  EXPECT_EQ(g.node(a).p.seq_window, 32);
  const auto fails = [&](int64_t len, int32_t st, int64_t sw, const char* what) {
    try {
      build(len, st, sw);
      ADD_FAILURE() << "expected an error about " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("blk.0.attn"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  fails(3, 1, 32, "bounds must be i32 [6]");
  fails(6, 4, 32, "seq_tokens 4");
  fails(6, 1, 33, "seq_window 33");
}

// x -> q/k/v projections with biases -> sum of the three; FFN: down(silu(gate x) * up x).
struct Toy {
  std::vector<float> wq = random_vec(16 * 16, 1), wk = random_vec(16 * 8, 2), wv = random_vec(16 * 8, 3);
  std::vector<float> bq = random_vec(16, 4), bk = random_vec(8, 5), bv = random_vec(8, 6);
  std::vector<float> wg = random_vec(16 * 24, 7), wu = random_vec(16 * 24, 8), wd = random_vec(24 * 16, 9);
  WeightTensor Wq = f32_weight("wq", wq, 16, 16), Wk = f32_weight("wk", wk, 16, 8), Wv = f32_weight("wv", wv, 16, 8);
  WeightTensor Bq = f32_weight("bq", bq, 16, 1), Bk = f32_weight("bk", bk, 8, 1), Bv = f32_weight("bv", bv, 8, 1);
  WeightTensor Wg = f32_weight("wg", wg, 16, 24), Wu = f32_weight("wu", wu, 16, 24), Wd = f32_weight("wd", wd, 24, 16);

  Graph build(int64_t nt, NodeId* x_out, NodeId* y_out) const {
    Graph g;
    const NodeId x = g.input(InputKind::Other, TensorType::F32, {16, nt, 1, 1}, "x");
    const NodeId wq_ = g.weight(Wq), wk_ = g.weight(Wk), wv_ = g.weight(Wv);
    const NodeId bq_ = g.weight(Bq), bk_ = g.weight(Bk), bv_ = g.weight(Bv);
    const NodeId wg_ = g.weight(Wg), wu_ = g.weight(Wu), wd_ = g.weight(Wd);
    const auto proj = [&](NodeId w, NodeId b, const char* name) {
      const NodeId y = g.add(g.matmul(w, x, name), b, std::string(name) + ".b");
      return g.reshape(y, g.node(y).ne, std::string(name) + ".out");
    };
    const NodeId q = proj(wq_, bq_, "q");
    const NodeId k = proj(wk_, bk_, "k");
    const NodeId v = proj(wv_, bv_, "v");
    // Combine: q[0:8] + k + v as a [8, nt] tensor via views of q.
    const NodeId q8 = g.matmul(wd_, g.mul(g.silu(g.matmul(wg_, q, "gate"), "silu"), g.matmul(wu_, q, "up"), "act"), "down");
    const NodeId kv = g.add(k, v, "kv");
    const NodeId kv2 = g.add(kv, g.view(q8, 0, {8, nt, 1, 1}, "q8v"), "out");
    g.mark_output(kv2);
    *x_out = x;
    *y_out = kv2;
    return g;
  }
};

std::vector<float> run_toy(bool fuse, FusionStats* stats, int64_t nt) {
  static const Toy toy;
  cpu::CpuBackend cpu(2);
  Backend* bks[2] = {&cpu, nullptr};
  NodeId x, y;
  PrepareOptions opt;
  opt.fuse = fuse;
  PreparedGraph pg(toy.build(nt, &x, &y), bks, no_kv(), opt);
  if (stats) *stats = pg.fusion();
  const auto in = random_vec(static_cast<size_t>(16 * nt), 42);
  pg.set_input(x, in.data(), in.size() * 4);
  pg.execute();
  std::vector<float> out(static_cast<size_t>(8 * nt));
  pg.read_output(y, out.data(), out.size() * 4);
  return out;
}

TEST(Fusion, FusedQkvAndFfnAreBitwiseEqualToTheUnfusedGraph) {
  for (int64_t nt : {1, 3, 7}) {
    FusionStats st;
    const auto fused = run_toy(true, &st, nt);
    const auto plain = run_toy(false, nullptr, nt);
    EXPECT_EQ(st.qkv, 1);
    EXPECT_EQ(st.swiglu, 1);
    EXPECT_EQ(st.ffn, 1);
    ASSERT_EQ(fused.size(), plain.size());
    EXPECT_EQ(0, std::memcmp(fused.data(), plain.data(), fused.size() * 4)) << "nt=" << nt;
  }
}

TEST(Fusion, UnfusedToyMatchesAHandComputedReference) {
  const Toy toy;
  const int64_t nt = 2;
  const auto in = random_vec(static_cast<size_t>(16 * nt), 42);
  const auto out = run_toy(false, nullptr, nt);
  // Reference in double: q/k/v projections, FFN on q, kv + first 8 rows of ffn.
  const auto mm = [](const std::vector<float>& w, int64_t k, int64_t m, const std::vector<double>& xv, int64_t t) {
    std::vector<double> y(static_cast<size_t>(m));
    for (int64_t j = 0; j < m; ++j)
      for (int64_t i = 0; i < k; ++i) y[static_cast<size_t>(j)] += static_cast<double>(w[static_cast<size_t>(j * k + i)]) * xv[static_cast<size_t>(t * k + i)];
    return y;
  };
  std::vector<double> xv(in.begin(), in.end());
  std::vector<std::vector<double>> kk, vv, dd;
  for (int64_t t = 0; t < nt; ++t) {
    auto q = mm(toy.wq, 16, 16, xv, t);
    auto k = mm(toy.wk, 16, 8, xv, t);
    auto v = mm(toy.wv, 16, 8, xv, t);
    for (int j = 0; j < 16; ++j) q[static_cast<size_t>(j)] += toy.bq[static_cast<size_t>(j)];
    for (int j = 0; j < 8; ++j) {
      k[static_cast<size_t>(j)] += toy.bk[static_cast<size_t>(j)];
      v[static_cast<size_t>(j)] += toy.bv[static_cast<size_t>(j)];
    }
    const auto g_ = mm(toy.wg, 16, 24, q, 0);
    const auto u_ = mm(toy.wu, 16, 24, q, 0);
    std::vector<double> act(24);
    for (int j = 0; j < 24; ++j)
      act[static_cast<size_t>(j)] = g_[static_cast<size_t>(j)] / (1.0 + std::exp(-g_[static_cast<size_t>(j)])) * u_[static_cast<size_t>(j)];
    kk.push_back(k);
    vv.push_back(v);
    dd.push_back(mm(toy.wd, 24, 16, act, 0));
  }
  for (int64_t t = 0; t < nt; ++t) {
    for (int64_t j = 0; j < 8; ++j) {
      // The view reads the FFN output [16, nt] as a flat [8, nt] tensor.
      const int64_t flat = t * 8 + j;
      const double d = dd[static_cast<size_t>(flat / 16)][static_cast<size_t>(flat % 16)];
      const double ref = kk[static_cast<size_t>(t)][static_cast<size_t>(j)] + vv[static_cast<size_t>(t)][static_cast<size_t>(j)] + d;
      EXPECT_NEAR(out[static_cast<size_t>(flat)], ref, 1e-3 * (1.0 + std::abs(ref))) << "t=" << t << " j=" << j;
    }
  }
}

TEST(Allocator, ALongChainReusesBuffers) {
  cpu::CpuBackend cpu(1);
  Backend* bks[2] = {&cpu, nullptr};
  Graph g;
  const NodeId x = g.input(InputKind::Other, TensorType::F32, {1024, 1, 1, 1}, "x");
  // One factor broadcast over x (Mul's rule): each step is the one rounded product x * f.
  const NodeId f = g.input(InputKind::Other, TensorType::F32, {1, 1, 1, 1}, "f");
  NodeId y = x;
  for (int i = 0; i < 50; ++i) y = g.mul(y, f, "s" + std::to_string(i));
  g.mark_output(y);
  PreparedGraph pg(std::move(g), bks, no_kv(), PrepareOptions{});
  // The inputs, the output and two scratch buffers at most, not 51 (f is 4 bytes).
  EXPECT_LE(cpu.pool_bytes(), 4u * 1024 * 4);
  std::vector<float> in(1024, 1.0f), out(1024);
  const float factor = 1.0f + 1.0f / 64;
  pg.set_input(x, in.data(), 4096);
  pg.set_input(f, &factor, 4);
  pg.execute();
  pg.read_output(y, out.data(), 4096);
  float expect = 1.0f;
  for (int i = 0; i < 50; ++i) expect *= 1.0f + 1.0f / 64;
  EXPECT_EQ(out[7], expect);
}

// A CPU backend whose download_at_sync copies only at its next synchronize (as a device's queued
// readback does), counting both calls.
class DeferredReadBackend : public cpu::CpuBackend {
 public:
  DeferredReadBackend() : CpuBackend(1) {}
  void download_at_sync(void* dst, const void* src, uint64_t bytes) override {
    if (++reads == fail_at_read) fail("test: readback {} refused", reads);
    queued_.push_back({dst, src, bytes});
  }
  size_t queued() const { return queued_.size(); }
  void synchronize() override {
    for (const auto& q : queued_) std::memcpy(q.dst, q.src, q.bytes);
    queued_.clear();
    ++syncs;
  }
  int reads = 0, syncs = 0;
  int fail_at_read = 0;  ///< the download_at_sync call (1-based) that throws; 0 = none

 private:
  struct Queued {
    void* dst;
    const void* src;
    uint64_t bytes;
  };
  std::vector<Queued> queued_;
};

TEST(Scheduler, AGraphForABackendTheEngineLacksIsAnErrorNamingIt) {
  // Every node runs on opt.preferred (no per-node placement, no second backend; ADR 0007).
  cpu::CpuBackend cpu(1);
  Backend* bks[2] = {&cpu, nullptr};
  const Toy toy;
  NodeId x, y;
  PrepareOptions opt;
  opt.preferred = BackendKind::Cuda;
  try {
    PreparedGraph pg(toy.build(3, &x, &y), bks, no_kv(), opt);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("assigned to the cuda backend, which this engine does not have"),
              std::string::npos) << e.what();
  }
}

TEST(Scheduler, ExecuteQueuesOutputReadsBehindTheGraphAndWaitsOnce) {
  DeferredReadBackend cpu;
  Backend* bks[2] = {&cpu, nullptr};
  const Toy toy;
  NodeId x, y;
  PreparedGraph pg(toy.build(3, &x, &y), bks, no_kv(), PrepareOptions{});
  const auto in = random_vec(16 * 3, 42);
  pg.set_input(x, in.data(), in.size() * 4);
  std::vector<float> out(8 * 3, -1.0f);
  const OutputRead read{y, out.data(), 8 * 4};  // the first column only: fewer bytes than the node
  pg.execute(std::span<const OutputRead>(&read, 1));
  EXPECT_EQ(cpu.reads, 1);
  EXPECT_EQ(cpu.syncs, 1) << "one wait for the work and the readback";
  const auto ref = run_toy(false, nullptr, 3);
  EXPECT_EQ(0, std::memcmp(out.data(), ref.data(), 8 * 4));
  EXPECT_EQ(out[8], -1.0f) << "bytes past the read were written";
  // A read larger than its node is refused before anything runs.
  std::vector<float> big(8 * 3 + 1);
  const OutputRead too_big{y, big.data(), big.size() * 4};
  try {
    pg.execute(std::span<const OutputRead>(&too_big, 1));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds 96 bytes, asked for 100"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cpu.syncs, 1) << "the refused execute ran";
  // A readback that fails after another was queued: the queued one is finished (or dropped) by
  // a wait before the error leaves execute, so nothing is written into the caller's memory later.
  std::vector<float> a(8), b(8);
  const OutputRead two[2] = {{y, a.data(), 8 * 4}, {y, b.data(), 8 * 4}};
  cpu.fail_at_read = cpu.reads + 2;
  const int syncs_before = cpu.syncs;
  try {
    pg.execute(two);
    FAIL() << "expected the refused readback";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("readback"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cpu.queued(), 0u) << "a readback stayed queued past the failed execute";
  EXPECT_EQ(cpu.syncs, syncs_before + 1);
}

TEST(Scheduler, UnsupportedNodeIsAnErrorNotAFallback) {
  class NoMatMul : public cpu::CpuBackend {
   public:
    NoMatMul() : CpuBackend(1) {}
    std::string unsupported_reason(const Graph& g, const Node& n) const override {
      if (n.op == Op::MatMul) return "no matmul here";
      return CpuBackend::unsupported_reason(g, n);
    }
  };
  NoMatMul b;
  Backend* bks[2] = {&b, nullptr};
  const Toy toy;
  NodeId x, y;
  try {
    PreparedGraph pg(toy.build(1, &x, &y), bks, no_kv(), PrepareOptions{});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no matmul here"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(MatMul)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace minfer::graph
