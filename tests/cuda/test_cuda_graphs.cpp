// CUDA Graph capture and replay: replays are bitwise equal to direct launches, a pool growth
// re-arms the capture, an error in a capture window aborts it and disables graphs, the env gates
// work, and two backends on two threads give bitwise what each gives alone.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "../gguf_test_util.h"
#include "cuda_test_util.h"

namespace minfer {
namespace {

using graph::InputKind;
using graph::NodeId;
using test::as_bytes;
using test::random_floats;

constexpr int64_t kEmbd = 256, kVocab = 64, kCtx = 256, kHd = 64;

/// A decoder-like chain: embedding gather, RMS norm, RoPE, KV store (f16), attention, residual,
/// RMS norm. Inputs change from run to run like a decode loop's (tokens, positions, cells, the
/// KV window tables); the KV regions persist across runs.
class Chain {
 public:
  Chain() {
    table_ = random_floats(static_cast<size_t>(kEmbd * kVocab), 301);
    norm_ = random_floats(kEmbd, 302, 0.1f, 1.0f);
    E_ = graph::WeightTensor{"test.chain.embd", TensorType::F32, {kEmbd, kVocab, 1, 1}, 2,
                             reinterpret_cast<const uint8_t*>(table_.data()), table_.size() * 4};
    W_ = graph::WeightTensor{"test.chain.norm", TensorType::F32, {kEmbd, 1, 1, 1}, 1,
                             reinterpret_cast<const uint8_t*>(norm_.data()), norm_.size() * 4};
  }

  /// One prepared chain of `nt` tokens on `dev`.
  class Session {
   public:
    Session(const Chain& c, cuda::CudaBackend& dev, int64_t nt) : dev_(dev), cpu_(1), nt_(nt) {
      dev.register_weight(c.E_);
      dev.register_weight(c.W_);
      const size_t region = static_cast<size_t>(kCtx * 128) * 2;  // f16 rows of 128
      for (int which = 0; which < 2; ++which) {
        graph::TensorRef r;
        r.buffer = dev.alloc_buffer(region);
        r.data = dev.buffer_ptr(r.buffer);
        r.nbytes = region;
        regions_[which] = r;
      }
      graph::Graph g;
      tokens_ = g.input(InputKind::TokenIds, TensorType::I32, {nt, 1, 1, 1}, "tokens");
      pos_ = g.input(InputKind::Positions, TensorType::I32, {nt, 1, 1, 1}, "pos");
      seq_ = g.input(InputKind::SeqIds, TensorType::I32, {nt, 1, 1, 1}, "seq");
      cells_ = g.input(InputKind::KvCells, TensorType::I32, {nt, 1, 1, 1}, "cells");
      kv_pos_ = g.input(InputKind::KvPos, TensorType::I32, {kCtx, 1, 1, 1}, "kv_pos");
      kv_seq_ = g.input(InputKind::KvSeq, TensorType::I32, {kCtx, 1, 1, 1}, "kv_seq");
      const NodeId x = g.get_rows(g.weight(c.E_), tokens_, "embd");
      const NodeId w = g.weight(c.W_);
      const NodeId h = g.rms_norm(x, w, 1e-6f, "norm");
      const NodeId q = g.rope(h, pos_, kHd, kHd, 1e4f, "rope_q");
      const NodeId k = g.rope(g.view(h, 0, {128, nt, 1, 1}, "k_in"), pos_, kHd, kHd, 1e4f, "rope_k");
      const NodeId v = g.view(h, static_cast<uint64_t>(128 * nt) * 4, {128, nt, 1, 1}, "v_in");
      const NodeId kr = g.kv_region(0, 0, TensorType::F16, 128, kCtx);
      const NodeId vr = g.kv_region(0, 1, TensorType::F16, 128, kCtx);
      const NodeId ks = g.kv_store(k, kr, cells_, "store_k");
      const NodeId vs = g.kv_store(v, vr, cells_, "store_v");
      const NodeId a = g.attn(q, ks, vs, pos_, seq_, kv_pos_, kv_seq_, 4, 2, kHd, kCtx, 0.125f, "attn");
      out_ = g.rms_norm(g.add(a, x, "resid"), w, 1e-6f, "out");
      g.mark_output(out_);
      graph::Backend* bks[2] = {&cpu_, &dev};
      graph::PrepareOptions opt;
      opt.preferred = graph::BackendKind::Cuda;
      const auto regions = regions_;
      pg_ = std::make_unique<graph::PreparedGraph>(
          std::move(g), bks, [regions](graph::BackendKind, int32_t, int32_t which) { return regions[which]; }, opt);
    }
    ~Session() {
      pg_.reset();
      for (const auto& r : regions_) dev_.release_buffer(r.buffer);
    }

    /// Run `r` of a decode-like loop: tokens r*nt .. r*nt+nt-1 at those positions and cells.
    std::vector<uint8_t> run(int r) {
      std::vector<int32_t> tok, pos, seq, cells, kv_pos(kCtx, -1), kv_seq(kCtx, -1);
      for (int64_t i = 0; i < nt_; ++i) {
        const auto p = static_cast<int32_t>(r * nt_ + i);
        tok.push_back(static_cast<int32_t>((p * 37 + 11) % kVocab));
        pos.push_back(p);
        seq.push_back(0);
        cells.push_back(p % static_cast<int32_t>(kCtx));
      }
      for (int64_t cell = 0; cell < std::min<int64_t>(kCtx, (r + 1) * nt_); ++cell) {
        kv_pos[static_cast<size_t>(cell)] = static_cast<int32_t>(cell);
        kv_seq[static_cast<size_t>(cell)] = 0;
      }
      pg_->set_input(tokens_, tok.data(), tok.size() * 4);
      pg_->set_input(pos_, pos.data(), pos.size() * 4);
      pg_->set_input(seq_, seq.data(), seq.size() * 4);
      pg_->set_input(cells_, cells.data(), cells.size() * 4);
      pg_->set_input(kv_pos_, kv_pos.data(), kv_pos.size() * 4);
      pg_->set_input(kv_seq_, kv_seq.data(), kv_seq.size() * 4);
      pg_->execute();
      std::vector<uint8_t> out(pg_->graph().node(out_).nbytes());
      pg_->read_output(out_, out.data(), out.size());
      return out;
    }

    std::vector<uint8_t> region(int which) {
      std::vector<uint8_t> b(regions_[which].nbytes);
      dev_.download(b.data(), regions_[which].data, b.size());
      return b;
    }

   private:
    cuda::CudaBackend& dev_;
    cpu::CpuBackend cpu_;
    int64_t nt_;
    graph::TensorRef regions_[2];
    NodeId tokens_, pos_, seq_, cells_, kv_pos_, kv_seq_, out_;
    std::unique_ptr<graph::PreparedGraph> pg_;
  };

 private:
  std::vector<float> table_, norm_;
  graph::WeightTensor E_, W_;
};

/// Outputs of `runs` runs on a backend with graphs disabled (direct launches only).
std::vector<std::vector<uint8_t>> direct_reference(const Chain& chain, int64_t nt, int runs,
                                                   std::vector<uint8_t>* k_region = nullptr) {
  test::ScopedEnv env("MINFER_NO_CUDA_GRAPH", "1");
  cuda::CudaBackend dev;
  EXPECT_FALSE(dev.graph_stats().enabled);
  Chain::Session s(chain, dev, nt);
  std::vector<std::vector<uint8_t>> out;
  for (int r = 0; r < runs; ++r) out.push_back(s.run(r));
  const cuda::GraphStats st = dev.graph_stats();
  EXPECT_EQ(st.captures, 0u);
  EXPECT_EQ(st.replays, 0u);
  if (k_region) *k_region = s.region(0);
  return out;
}

TEST(CudaGraphs, ReplayIsBitwiseEqualToDirectLaunch) {
  MINFER_REQUIRE_CUDA();
  const Chain chain;
  std::vector<uint8_t> k_ref;
  const auto ref = direct_reference(chain, 1, 8, &k_ref);
  cuda::CudaBackend dev;
  Chain::Session s(chain, dev, 1);
  for (int r = 0; r < 8; ++r) EXPECT_TRUE(test::bytes_equal(s.run(r), ref[static_cast<size_t>(r)])) << "run " << r;
  EXPECT_TRUE(test::bytes_equal(s.region(0), k_ref, false)) << "K region after the runs";
  const cuda::GraphStats st = dev.graph_stats();
  EXPECT_EQ(st.direct, 2u) << "two warm-up runs";
  EXPECT_EQ(st.captures, 1u) << "the third run captures";
  EXPECT_EQ(st.replays, 5u) << "runs four to eight replay";
  EXPECT_EQ(st.stored, 1u);
  EXPECT_TRUE(st.enabled);
}

TEST(CudaGraphs, PrefillShapedGraphsCaptureByDefaultAndReplayBitwise) {
  MINFER_REQUIRE_CUDA();
  const Chain chain;
  const auto ref = direct_reference(chain, 4, 6);
  cuda::CudaBackend dev;
  Chain::Session s(chain, dev, 4);
  for (int r = 0; r < 6; ++r) EXPECT_TRUE(test::bytes_equal(s.run(r), ref[static_cast<size_t>(r)])) << "run " << r;
  EXPECT_EQ(dev.graph_stats().captures, 1u);
  EXPECT_EQ(dev.graph_stats().replays, 3u);
}

TEST(CudaGraphs, NoPrefillCaptureGateKeepsMultiTokenGraphsDirect) {
  MINFER_REQUIRE_CUDA();
  const Chain chain;
  test::ScopedEnv env("MINFER_NO_PREFILL_CAPTURE", "1");
  cuda::CudaBackend dev;
  {
    Chain::Session s(chain, dev, 4);
    for (int r = 0; r < 5; ++r) s.run(r);
  }
  EXPECT_EQ(dev.graph_stats().captures, 0u);
  {
    Chain::Session s(chain, dev, 1);  // decode-shaped: still captured
    for (int r = 0; r < 5; ++r) s.run(r);
  }
  EXPECT_EQ(dev.graph_stats().captures, 1u);
}

TEST(CudaGraphs, PoolGrowthRearmsTheCaptureAndResultsStayBitwise) {
  MINFER_REQUIRE_CUDA();
  const Chain chain;
  const auto ref = direct_reference(chain, 1, 8);
  cuda::CudaBackend dev;
  Chain::Session s(chain, dev, 1);
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(test::bytes_equal(s.run(r), ref[static_cast<size_t>(r)])) << "run " << r;
  EXPECT_EQ(dev.graph_stats().captures, 1u);
  EXPECT_EQ(dev.graph_stats().replays, 1u);
  const uint64_t gen = dev.pool_generation();
  const int32_t extra = dev.alloc_buffer(12345);  // a new length: the pool obtains memory
  EXPECT_GT(dev.pool_generation(), gen);
  for (int r = 4; r < 8; ++r) EXPECT_TRUE(test::bytes_equal(s.run(r), ref[static_cast<size_t>(r)])) << "run " << r;
  const cuda::GraphStats st = dev.graph_stats();
  EXPECT_EQ(st.direct, 4u) << "two warm-ups before each capture";
  EXPECT_EQ(st.captures, 2u) << "captured again after the pool grew";
  EXPECT_EQ(st.replays, 2u);
  dev.release_buffer(extra);
}

TEST(CudaGraphs, AnErrorInsideACaptureWindowAbortsItAndDisablesGraphs) {
  MINFER_REQUIRE_CUDA();
  const Chain chain;
  const auto ref = direct_reference(chain, 1, 5);
  cuda::CudaBackend dev;
  Chain::Session s(chain, dev, 1);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(test::bytes_equal(s.run(r), ref[static_cast<size_t>(r)]));
  {
    test::ScopedEnv fail_env("MINFER_CUDA_FAIL_LAUNCH", "attn_decode_f16");  // nt = 1: the decode kernel
    const std::string msg = test::error_of([&] { s.run(2); });  // the capture run
    EXPECT_CONTAINS(msg, "attn_decode_f16");
    EXPECT_CONTAINS(msg, "node attn");
  }
  cuda::GraphStats st = dev.graph_stats();
  EXPECT_EQ(st.aborted, 1u);
  EXPECT_FALSE(st.enabled);
  EXPECT_EQ(st.captures, 0u);
  EXPECT_EQ(st.stored, 0u);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the abort left an error latched";
  // Nothing recorded in the aborted window ran; the step runs again with direct launches.
  for (int r = 2; r < 5; ++r) EXPECT_TRUE(test::bytes_equal(s.run(r), ref[static_cast<size_t>(r)])) << "run " << r;
  st = dev.graph_stats();
  EXPECT_EQ(st.captures, 0u);
  EXPECT_EQ(st.replays, 0u);
}

TEST(CudaGraphs, TwoBackendsOnTwoThreadsAreBitwiseEqualToEachAlone) {
  MINFER_REQUIRE_CUDA();
  const Chain chain;
  constexpr int kRuns = 12;
  std::vector<std::vector<uint8_t>> alone;
  {
    cuda::CudaBackend dev;
    Chain::Session s(chain, dev, 1);
    for (int r = 0; r < kRuns; ++r) alone.push_back(s.run(r));
  }
  std::vector<std::vector<uint8_t>> got[2];
  std::string errors[2];
  const auto worker = [&](int w) {
    try {
      cuda::CudaBackend dev;
      Chain::Session s(chain, dev, 1);
      for (int r = 0; r < kRuns; ++r) got[w].push_back(s.run(r));
      if (dev.graph_stats().replays == 0) errors[w] = "no replay happened";
    } catch (const std::exception& e) {
      errors[w] = e.what();
    }
  };
  std::thread t0(worker, 0), t1(worker, 1);
  t0.join();
  t1.join();
  for (int w = 0; w < 2; ++w) {
    EXPECT_TRUE(errors[w].empty()) << "thread " << w << ": " << errors[w];
    ASSERT_EQ(got[w].size(), alone.size()) << "thread " << w;
    for (int r = 0; r < kRuns; ++r)
      EXPECT_TRUE(test::bytes_equal(got[w][static_cast<size_t>(r)], alone[static_cast<size_t>(r)]))
          << "thread " << w << " run " << r;
  }
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
