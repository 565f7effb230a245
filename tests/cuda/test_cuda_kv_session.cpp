// KV sessions and sequence shifts on the CUDA backend: a bitwise round trip for f32/f16/q8_0 KV
// (greedy-64 after a restore equals the uninterrupted run), files that move between the CUDA and
// CPU backends byte for byte, and seq_add's re-rotation on the device within the rounding bound of
// tests/kv_shift_bound.h. Skips without a device.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cstring>

#include "../kv_shift_bound.h"
#include "../synth_model.h"
#include "../test_util.h"
#include "core/error.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "models/model.h"
#include "quant/quant.h"
#include "sampling/sampler.h"

namespace minfer {
namespace {

EngineConfig config(graph::BackendKind device, TensorType kv) {
  EngineConfig c;
  c.device = device;
  c.n_threads = 2;
  c.n_ctx = 256;
  c.kv_type = kv;
  return c;
}

std::vector<int32_t> greedy(Engine& e, std::vector<float> logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(argmax(logits));
    const int32_t one[1] = {out.back()};
    logits = e.decode(one);
  }
  return out;
}

const std::vector<int32_t> kPrompt = {11, 200, 37, 5, 480, 99, 123, 7, 310, 42, 1, 77, 256, 8, 9, 300, 17};
const std::vector<int32_t> kHead(kPrompt.begin(), kPrompt.end() - 1);

class CudaSession : public ::testing::TestWithParam<TensorType> {};

TEST_P(CudaSession, Greedy64AfterRestoreEqualsUninterruptedRunBitwise) {
  MINFER_REQUIRE_CUDA();
  auto model = Model::load(test::write_synth_model(test::SynthSpec{}, test::temp_dir()).string());
  Engine a(model, config(graph::BackendKind::Cuda, GetParam()));
  a.decode(kHead);
  const std::vector<uint8_t> bytes = a.save_sequence(0, kHead);
  const int32_t last[1] = {kPrompt.back()};
  const std::vector<float> la = a.decode(last);
  const auto ga = greedy(a, la, 64);
  Engine b(model, config(graph::BackendKind::Cuda, GetParam()));
  b.restore_sequence(bytes, "mem", 0);
  EXPECT_EQ(b.save_sequence(0, kHead), bytes);
  const std::vector<float> lb = b.decode(last);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4));
  EXPECT_EQ(greedy(b, lb, 64), ga);
}

TEST_P(CudaSession, FilesMoveBetweenCudaAndCpuByteForByteWithTheSameGreedyTokens) {
  MINFER_REQUIRE_CUDA();
  auto model = Model::load(test::write_synth_model(test::SynthSpec{}, test::temp_dir()).string());
  Engine gpu(model, config(graph::BackendKind::Cuda, GetParam()));
  Engine cpu(model, config(graph::BackendKind::Cpu, GetParam()));
  gpu.decode(kHead);
  cpu.decode(kHead);
  const std::vector<uint8_t> from_gpu = gpu.save_sequence(0, kHead);
  const std::vector<uint8_t> from_cpu = cpu.save_sequence(0, kHead);
  Engine cpu2(model, config(graph::BackendKind::Cpu, GetParam()));
  Engine gpu2(model, config(graph::BackendKind::Cuda, GetParam()));
  cpu2.restore_sequence(from_gpu, "from_gpu", 0);
  gpu2.restore_sequence(from_cpu, "from_cpu", 0);
  EXPECT_EQ(cpu2.save_sequence(0, kHead), from_gpu);
  EXPECT_EQ(gpu2.save_sequence(0, kHead), from_cpu);
  // The CPU goes on from the device's cache as the device does (greedy; these synthetic models
  // spread their logits, so the two backends' rounding does not flip an argmax here).
  const int32_t last[1] = {kPrompt.back()};
  EXPECT_EQ(greedy(cpu2, cpu2.decode(last), 32), greedy(gpu, gpu.decode(last), 32));
  EXPECT_EQ(greedy(gpu2, gpu2.decode(last), 32), greedy(cpu, cpu.decode(last), 32));
}

TEST_P(CudaSession, SeqAddRotatesDeviceKeysWithinTheRoundingBound) {
  MINFER_REQUIRE_CUDA();
  const TensorType type = GetParam();
  auto model = Model::load(test::write_synth_model(test::SynthSpec{}, test::temp_dir()).string());
  const HParams& h = model->hparams();
  Engine shifted(model, config(graph::BackendKind::Cuda, type));
  Engine fresh(model, config(graph::BackendKind::Cuda, type));
  const int32_t start = 300, delta = -250;
  shifted.forward(Batch::sequence(kPrompt, start, 0, false));
  shifted.seq_add(0, 0, -1, delta);
  fresh.forward(Batch::sequence(kPrompt, start + delta, 0, false));
  const auto cells = shifted.kv().seq_cells(0);
  ASSERT_EQ(cells, fresh.kv().seq_cells(0));
  const int64_t kv_dim = h.kv_dim();
  const test::ShiftBound sb{type, h.head_dim, h.n_rot, h.rope_theta};
  std::vector<uint8_t> rs(row_bytes(type, kv_dim)), rf(rs.size());
  std::vector<float> fs(static_cast<size_t>(kv_dim)), ff(fs.size());
  for (size_t c = 0; c < cells.size(); ++c) {
    const int32_t cell[1] = {cells[c]};
    shifted.kv().read_rows(0, 1, cell, rs.data());
    fresh.kv().read_rows(0, 1, cell, rf.data());
    ASSERT_EQ(rs, rf) << "V row of cell " << c;
    shifted.kv().read_rows(0, 0, cell, rs.data());
    fresh.kv().read_rows(0, 0, cell, rf.data());
    type_traits(type).dequantize_row(rs.data(), fs.data(), kv_dim);
    type_traits(type).dequantize_row(rf.data(), ff.data(), kv_dim);
    for (int64_t j = 0; j < kv_dim; ++j)
      ASSERT_LE(std::fabs(static_cast<double>(fs[static_cast<size_t>(j)]) - ff[static_cast<size_t>(j)]),
                sb.bound(ff, j, start + static_cast<int32_t>(c), delta))
          << "cell " << c << " element " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(KvTypes, CudaSession, ::testing::Values(TensorType::F32, TensorType::F16, TensorType::Q8_0));

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
