// The CPU attention op (src/cpu/kernels_attn.cpp) with KV cells that no token of the op can see
// (empty, another sequence's, later positions) holding NaN bytes: they must never reach the output,
// which equals the output with those cells zeroed, bit for bit. Runs on the CPU backend alone (it
// lives beside the attention device tests to share their graph helpers; no GPU needed).
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attn_test_util.h"
#include "cuda_test_util.h"

namespace minfer {
namespace {

using test::AttnCase;
using test::AttnData;

/// Output of the CPU op on case c, with the unseen cells' K/V rows set to `fill` bytes.
std::vector<uint8_t> cpu_output(const AttnCase& c, TensorType type, int n_seq, uint8_t fill) {
  const AttnData d = test::attn_data(c, n_seq);
  const auto q = test::random_floats(static_cast<size_t>(c.hd * c.n_head * c.nt), 401);
  auto kb = test::region_bytes(type, c.n_head_kv * c.hd, c.n_ctx, 402);
  auto vb = test::region_bytes(type, c.n_head_kv * c.hd, c.n_ctx, 403);
  const size_t rb = row_bytes(type, c.n_head_kv * c.hd);
  for (int64_t cell = 0; cell < c.n_ctx; ++cell) {
    bool seen = false;
    for (int64_t t = 0; t < c.nt && cell < c.n_kv; ++t) {
      const auto ti = static_cast<size_t>(t), ci = static_cast<size_t>(cell);
      seen = seen || (d.kv_pos[ci] >= 0 && d.kv_seq[ci] == d.seq[ti] && d.kv_pos[ci] <= d.pos[ti]);
    }
    if (seen) continue;
    std::memset(kb.data() + static_cast<size_t>(cell) * rb, fill, rb);
    std::memset(vb.data() + static_cast<size_t>(cell) * rb, fill, rb);
  }
  cpu::CpuBackend cpu(2);
  const auto r = test::run_graph([&] { return test::attn_graph(c, type, d, q, kb, vb); }, graph::BackendKind::Cpu,
                                 cpu, nullptr);
  return r.outputs[0];
}

TEST(CpuAttn, UnseenCellsHoldingNanBytesNeverReachTheOutput) {
  const AttnCase cases[] = {{"decode, two seqs", 1, 12, 2, 128, 256, 256},
                            {"prefill block, two seqs", 40, 14, 2, 64, 512, 300},
                            {"three seqs, one without cells", 3, 14, 2, 64, 512, 300}};
  const int n_seqs[] = {2, 2, 3};
  for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::Q8_0})
    for (size_t i = 0; i < std::size(cases); ++i) {
      SCOPED_TRACE(std::string(cases[i].name) + " " + std::string(type_name(type)));
      const auto poisoned = cpu_output(cases[i], type, n_seqs[i], 0xFF);
      const auto zeroed = cpu_output(cases[i], type, n_seqs[i], 0x00);
      const auto f = test::as_floats(poisoned);
      for (size_t j = 0; j < f.size(); ++j) ASSERT_TRUE(std::isfinite(f[j])) << "output " << j << " is " << f[j];
      EXPECT_TRUE(test::bytes_equal(poisoned, zeroed));
    }
}

// Per-token bounds only narrow the cells the CPU op multiplies: with the sequences in ranges of
// their own and with interleaved cells, a decode step of several sequences and a
// prefill block give the bytes of the op without bounds.
TEST(CpuAttn, PerTokenBoundsGiveTheBytesOfTheWholeWindow) {
  for (const bool slots : {true, false}) {
    const AttnCase c{slots ? "slots" : "interleaved", 6, 8, 2, 64, 512, 384};
    const int n_seq = 3;
    AttnData d;
    std::vector<int32_t> next(n_seq, 0);
    for (int64_t cell = 0; cell < c.n_kv; ++cell) {
      // slots: sequence s owns cells [100 s, 100 s + 90) (starts that are not multiples of 32, the
      // products' lane count); interleaved: cell % 3.
      const int s = slots ? static_cast<int>(cell / 100) : static_cast<int>(cell % n_seq);
      const bool used = slots ? cell < 300 && cell % 100 < 90 : true;
      d.kv_seq.push_back(used ? s : -1);
      d.kv_pos.push_back(used ? next[static_cast<size_t>(s)]++ : -1);
    }
    for (int64_t t = 0; t < c.nt; ++t) {  // two tokens of each sequence: its last two positions
      const int s = static_cast<int>(t / 2);
      d.seq.push_back(s);
      d.pos.push_back(next[static_cast<size_t>(s)] - 2 + static_cast<int32_t>(t % 2));
    }
    std::vector<int32_t> bounds;
    int64_t widest = 0;
    for (int64_t t = 0; t < c.nt; ++t) {
      int32_t lo = static_cast<int32_t>(c.n_kv), hi = 0;
      for (int64_t cell = 0; cell < c.n_kv; ++cell)
        if (d.kv_seq[static_cast<size_t>(cell)] == d.seq[static_cast<size_t>(t)]) {
          lo = std::min(lo, static_cast<int32_t>(cell));
          hi = static_cast<int32_t>(cell + 1);
        }
      bounds.push_back(lo);
      bounds.push_back(hi);
      widest = std::max<int64_t>(widest, hi - lo);
    }
    for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(type_name(type)));
      const auto q = test::random_floats(static_cast<size_t>(c.hd * c.n_head * c.nt), 411);
      const auto kb = test::region_bytes(type, c.n_head_kv * c.hd, c.n_ctx, 412);
      const auto vb = test::region_bytes(type, c.n_head_kv * c.hd, c.n_ctx, 413);
      cpu::CpuBackend cpu(2);
      const auto whole = test::run_graph([&] { return test::attn_graph(c, type, d, q, kb, vb); },
                                         graph::BackendKind::Cpu, cpu, nullptr);
      const auto bounded = test::run_graph([&] { return test::attn_graph(c, type, d, q, kb, vb, &bounds, 2, widest); },
                                           graph::BackendKind::Cpu, cpu, nullptr);
      EXPECT_TRUE(test::bytes_equal(whole.outputs[0], bounded.outputs[0]));
    }
  }
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
