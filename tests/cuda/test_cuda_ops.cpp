// Per-op parity of the CUDA backend against the CPU backend on fresh random data, each op in a
// one-node graph run through PreparedGraph. Tolerance classes (docs/cuda.md): "exact" (same
// rounded operations: bitwise), "rms_norm" (<= 2 ulp), "transcendental" (exp in double then
// rounded: <= 4 ulp), "rope" and "attention" (absolute bounds named below).
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../gguf_test_util.h"
#include "core/error.h"
#include "cuda_test_util.h"
#include "quant/quant.h"

namespace minfer {
namespace {

using graph::InputKind;
using graph::NodeId;
using test::as_bytes;
using test::as_floats;
using test::random_floats;
using test::TestGraph;

constexpr int64_t kRmsNormUlp = 2;
constexpr int64_t kTranscendentalUlp = 4;

graph::NodeId f32_input(TestGraph& t, graph::Shape ne, const char* name, uint32_t seed, float sigma = 1.0f) {
  const NodeId id = t.g.input(InputKind::Other, TensorType::F32, ne, name);
  t.inputs.emplace_back(id, as_bytes(random_floats(static_cast<size_t>(ne[0] * ne[1] * ne[2] * ne[3]), seed, sigma)));
  return id;
}

graph::NodeId i32_input(TestGraph& t, const std::vector<int32_t>& v, const char* name,
                        InputKind kind = InputKind::Other) {
  const NodeId id = t.g.input(kind, TensorType::I32, {static_cast<int64_t>(v.size()), 1, 1, 1}, name);
  t.inputs.emplace_back(id, as_bytes(v));
  return id;
}

TEST(CudaOps, AddAndMulBroadcastAreBitwiseEqualToTheCpu) {
  MINFER_REQUIRE_CUDA();
  const graph::Shape a_shape{64, 7, 3, 1};
  const graph::Shape b_shapes[] = {{64, 7, 3, 1}, {64, 1, 1, 1}, {1, 7, 1, 1}, {64, 1, 3, 1}, {1, 1, 1, 1}};
  for (const auto& bs : b_shapes) {
    for (int op = 0; op < 2; ++op) {
      const auto make = [&] {
        TestGraph t;
        const NodeId a = f32_input(t, a_shape, "a", 11);
        const NodeId b = f32_input(t, bs, "b", 12);
        const NodeId y = op == 0 ? t.g.add(a, b, "y") : t.g.mul(a, b, "y");
        t.g.mark_output(y);
        t.outputs.push_back(y);
        return t;
      };
      const auto r = test::run_both(make);
      EXPECT_TRUE(test::bytes_equal(r.cuda.outputs[0], r.cpu.outputs[0]))
          << (op == 0 ? "add" : "mul") << " b shape [" << bs[0] << "," << bs[1] << "," << bs[2] << "]";
    }
  }
}

TEST(CudaOps, SiluAndSwigluAreWithinTheTranscendentalClass) {
  MINFER_REQUIRE_CUDA();
  const auto make = [&] {
    TestGraph t;
    const NodeId a = f32_input(t, {1000, 6, 1, 1}, "a", 31, 3.0f);
    const NodeId b = f32_input(t, {1000, 6, 1, 1}, "b", 32);
    const NodeId s = t.g.silu(a, "silu");
    const NodeId w = t.g.swiglu(a, b, "swiglu");
    for (NodeId id : {s, w}) {
      t.g.mark_output(id);
      t.outputs.push_back(id);
    }
    return t;
  };
  const auto r = test::run_both(make);
  const char* names[] = {"silu", "swiglu"};
  for (size_t k = 0; k < 2; ++k)
    EXPECT_TRUE(test::floats_within_ulp(as_floats(r.cuda.outputs[k]), as_floats(r.cpu.outputs[k]), kTranscendentalUlp))
        << names[k];
}

TEST(CudaOps, RmsNormAndQkNormAreWithinTwoUlp) {
  MINFER_REQUIRE_CUDA();
  std::vector<float> w1 = random_floats(896, 41, 0.1f, 1.0f), w2 = random_floats(64, 42, 0.1f, 1.0f);
  graph::WeightTensor W1{"norm.weight", TensorType::F32, {896, 1, 1, 1}, 1,
                         reinterpret_cast<const uint8_t*>(w1.data()), w1.size() * 4};
  graph::WeightTensor W2{"q_norm.weight", TensorType::F32, {64, 1, 1, 1}, 1,
                         reinterpret_cast<const uint8_t*>(w2.data()), w2.size() * 4};
  const auto make = [&] {
    TestGraph t;
    const NodeId x = f32_input(t, {896, 5, 1, 1}, "x", 43, 2.0f);
    const NodeId q = f32_input(t, {64 * 14, 3, 1, 1}, "q", 44, 0.5f);
    const NodeId n1 = t.g.rms_norm(x, t.g.weight(W1), 1e-6f, "rms_norm");
    const NodeId n2 = t.g.qk_norm(q, t.g.weight(W2), 64, 1e-6f, "qk_norm");
    t.weights = {&W1, &W2};
    for (NodeId id : {n1, n2}) {
      t.g.mark_output(id);
      t.outputs.push_back(id);
    }
    return t;
  };
  const auto r = test::run_both(make);
  EXPECT_TRUE(test::floats_within_ulp(as_floats(r.cuda.outputs[0]), as_floats(r.cpu.outputs[0]), kRmsNormUlp)) << "rms_norm";
  EXPECT_TRUE(test::floats_within_ulp(as_floats(r.cuda.outputs[1]), as_floats(r.cpu.outputs[1]), kRmsNormUlp)) << "qk_norm";
}

TEST(CudaOps, RopeMatchesTheCpuWithinTheRopeClass) {
  MINFER_REQUIRE_CUDA();
  struct Case {
    int64_t hd, n_rot;
    float theta;
  };
  const std::vector<int32_t> pos = {0, 1, 17, 255, 4095, 30000, 131071};
  for (const Case c : {Case{64, 64, 1e6f}, Case{128, 128, 1e4f}, Case{64, 32, 1e4f}}) {
    const auto make = [&] {
      TestGraph t;
      const NodeId x = f32_input(t, {c.hd * 3, static_cast<int64_t>(pos.size()), 1, 1}, "x", 51);
      const NodeId p = i32_input(t, pos, "pos");
      const NodeId y = t.g.rope(x, p, static_cast<int32_t>(c.hd), static_cast<int32_t>(c.n_rot), c.theta, "rope");
      t.g.mark_output(y);
      t.outputs.push_back(y);
      return t;
    };
    const auto r = test::run_both(make);
    // Rope class: cos/sin may differ from glibc's by 1 ulp (|d| <= 6e-8 each), so a rotated
    // value may differ by about 1.2e-7 * (|x0| + |x1|); 4e-7 leaves room for the roundings.
    const auto got = as_floats(r.cuda.outputs[0]), want = as_floats(r.cpu.outputs[0]);
    const auto x = random_floats(got.size(), 51);
    size_t bad = 0, exact = 0;
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      const int64_t row = static_cast<int64_t>(i) / c.hd, dim = static_cast<int64_t>(i) % c.hd;
      const int64_t half = c.n_rot / 2;
      const int64_t pair = dim < half ? dim + half : dim - half;
      const double bound = dim < c.n_rot ? 4e-7 * (std::abs(x[i]) + std::abs(x[static_cast<size_t>(row * c.hd + pair)])) : 0.0;
      const double d = std::abs(static_cast<double>(got[i]) - want[i]);
      worst = std::max(worst, d);
      exact += got[i] == want[i];
      if (d > bound) {
        if (bad++ == 0)
          ADD_FAILURE() << "hd " << c.hd << " n_rot " << c.n_rot << ": first mismatch at " << i << ": got "
                        << got[i] << ", want " << want[i] << " (bound " << bound << ")";
      }
    }
    EXPECT_EQ(bad, 0u) << "max |d| " << worst;
    std::printf("[ rope ] hd %lld n_rot %lld: %zu of %zu bit-exact, max |d| %.3g\n",
                static_cast<long long>(c.hd), static_cast<long long>(c.n_rot), exact, got.size(), worst);
  }
}

class CudaGetRows : public ::testing::TestWithParam<TensorType> {};

TEST_P(CudaGetRows, GatherDequantizesBitExactlyLikeTheCpu) {
  MINFER_REQUIRE_CUDA();
  const TensorType type = GetParam();
  const int64_t d = 512, rows = 37;
  const auto values = random_floats(static_cast<size_t>(d * rows), 71, 0.7f);
  const size_t rb = row_bytes(type, d);
  std::vector<uint8_t> table(rb * rows);
  for (int64_t r = 0; r < rows; ++r)
    type_traits(type).quantize_row(values.data() + r * d, table.data() + static_cast<size_t>(r) * rb, d);
  const graph::WeightTensor W{"token_embd.weight", type, {d, rows, 1, 1}, 2, table.data(), table.size()};
  const std::vector<int32_t> ids = {0, 36, 5, 5, 17, 1, 35, 2, 30};
  const auto make = [&] {
    TestGraph t;
    const NodeId i = i32_input(t, ids, "ids", InputKind::TokenIds);
    const NodeId y = t.g.get_rows(t.g.weight(W), i, "embd");
    t.weights = {&W};
    t.g.mark_output(y);
    t.outputs.push_back(y);
    return t;
  };
  const auto r = test::run_both(make);
  EXPECT_TRUE(test::bytes_equal(r.cuda.outputs[0], r.cpu.outputs[0])) << type_name(type);
}

INSTANTIATE_TEST_SUITE_P(EveryWeightType, CudaGetRows,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q4_0,
                                           TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
                                           TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         [](const auto& param_info) { return std::string(type_name(param_info.param)); });

TEST(CudaOps, GetRowsOfAnActivationTableIsACopy) {
  MINFER_REQUIRE_CUDA();
  const auto make = [&] {
    TestGraph t;
    const NodeId a = f32_input(t, {96, 11, 1, 1}, "a", 81);
    const NodeId i = i32_input(t, {10, 0, 3}, "rows");
    const NodeId y = t.g.get_rows(a, i, "rows_of_a");
    t.g.mark_output(y);
    t.outputs.push_back(y);
    return t;
  };
  const auto r = test::run_both(make);
  EXPECT_TRUE(test::bytes_equal(r.cuda.outputs[0], r.cpu.outputs[0]));
}

TEST(CudaOps, OutOfRangeRowIdIsAnErrorAtSynchronize) {
  MINFER_REQUIRE_CUDA();
  const auto make = [&] {
    TestGraph t;
    const NodeId a = f32_input(t, {32, 4, 1, 1}, "a", 82);
    const NodeId i = i32_input(t, {1, 4}, "rows");  // 4 is outside [0, 4)
    const NodeId y = t.g.get_rows(a, i, "rows_of_a");
    t.g.mark_output(y);
    t.outputs.push_back(y);
    return t;
  };
  cpu::CpuBackend cpu(1);
  cuda::CudaBackend dev;
  try {
    test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row id 4"), std::string::npos) << e.what();
  }
  // The fault was consumed: the next execution is clean.
  EXPECT_NO_THROW(dev.synchronize());
}

TEST(CudaOps, APrefillActivationBeyondTheF16RangeIsAnErrorAtSynchronize) {
  // An 80-token product with Q8_0 weights takes the f16 tensor-core GEMM by default (above
  // kMmqDecodeMaxTokens, which stay on MMQ on sm_90; from kF16GemmMinTokens elsewhere); one
  // activation of 1e5 (finite in f32 and in the Q8 plane, infinite in f16) must not pass on as
  // infinity unseen. With MINFER_CUDA_PREFILL_MATMUL=mmq (int8 products) the same graph runs.
  MINFER_REQUIRE_CUDA();
  const int64_t k = 256, m = 64, nt = 80;
  const auto wv = random_floats(static_cast<size_t>(k * m), 91, 0.05f);
  const size_t rb = row_bytes(TensorType::Q8_0, k);
  std::vector<uint8_t> wq(rb * m);
  for (int64_t r = 0; r < m; ++r)
    type_traits(TensorType::Q8_0).quantize_row(wv.data() + r * k, wq.data() + static_cast<size_t>(r) * rb, k);
  const graph::WeightTensor W{"blk.0.attn_q.weight", TensorType::Q8_0, {k, m, 1, 1}, 2, wq.data(), wq.size()};
  auto x = random_floats(static_cast<size_t>(k * nt), 92, 1.0f);
  x[static_cast<size_t>(3 * k + 17)] = 1.0e5f;
  const auto make = [&] {
    TestGraph t;
    const NodeId xi = t.g.input(InputKind::Other, TensorType::F32, {k, nt, 1, 1}, "x");
    t.inputs.emplace_back(xi, as_bytes(x));
    const NodeId y = t.g.matmul(t.g.weight(W), xi, "q");
    t.weights = {&W};
    t.g.mark_output(y);
    t.outputs.push_back(y);
    return t;
  };
  cpu::CpuBackend cpu(1);
  {
    cuda::CudaBackend dev;
    const std::string what = test::error_of([&] { test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev); });
    EXPECT_NE(what.find("beyond the f16 range"), std::string::npos) << what;
    EXPECT_NE(what.find("MINFER_CUDA_PREFILL_MATMUL=mmq"), std::string::npos) << what;
    const size_t at = what.find("magnitude ");
    ASSERT_NE(at, std::string::npos) << what;
    const double mag = std::stod(what.substr(at + 10));
    EXPECT_NEAR(mag, 1.0e5, 1.0e3) << what;  // 1e5 through the Q8 plane (8-bit block values)
    EXPECT_NO_THROW(dev.synchronize());
  }
  test::ScopedEnv mmq("MINFER_CUDA_PREFILL_MATMUL", "mmq");
  cuda::CudaBackend dev;
  const auto got = test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev);
  ASSERT_EQ(got.outputs.size(), 1u);
  const auto* yv = reinterpret_cast<const float*>(got.outputs[0].data());
  for (size_t i = 0; i < got.outputs[0].size() / 4; ++i) ASSERT_TRUE(std::isfinite(yv[i])) << "output " << i;
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
