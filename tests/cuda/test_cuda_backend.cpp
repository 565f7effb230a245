// The CUDA device layer and backend mechanics: pool reuse and out-of-memory errors, pinned
// transfers, overlapping row moves, the weight registry, latched-error reporting, the
// failure-injection switch and the disable gate.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "../gguf_test_util.h"
#include "cuda/kernels/launch.cuh"
#include "cuda_test_util.h"
#include "engine/engine.h"

namespace minfer {
namespace {

using test::as_bytes;
using test::random_floats;

std::vector<uint8_t> download(cuda::CudaBackend& b, const void* src, size_t n) {
  std::vector<uint8_t> out(n);
  b.download(out.data(), src, n);
  return out;
}

TEST(CudaBackend, PoolReusesExactByteLengthsAndCountsNewMemory) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaBackend b;
  const uint64_t g0 = b.pool_generation();
  const int32_t a = b.alloc_buffer(1000);
  EXPECT_EQ(b.pool_generation(), g0 + 1);
  void* pa = b.buffer_ptr(a);
  b.release_buffer(a);
  const int32_t a2 = b.alloc_buffer(1000);  // same length: the same buffer, no new memory
  EXPECT_EQ(a2, a);
  EXPECT_EQ(b.buffer_ptr(a2), pa);
  EXPECT_EQ(b.pool_generation(), g0 + 1);
  const int32_t c = b.alloc_buffer(1001);  // another length: new memory
  EXPECT_NE(c, a);
  EXPECT_EQ(b.pool_generation(), g0 + 2);
  // A new buffer reads as zeros.
  const auto z = download(b, b.buffer_ptr(c), 1001);
  EXPECT_TRUE(std::all_of(z.begin(), z.end(), [](uint8_t v) { return v == 0; }));
}

TEST(CudaBackend, OversizedAllocationIsAnOutOfMemoryErrorAndLeavesNoLatchedError) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaBackend b;
  const uint64_t huge = uint64_t{1} << 52;  // 4 PiB
  try {
    b.alloc_buffer(huge);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(huge)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MiB free"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // The backend still works.
  const int32_t id = b.alloc_buffer(64);
  const auto v = random_floats(16, 1);
  b.upload(b.buffer_ptr(id), v.data(), 64);
  EXPECT_TRUE(test::bytes_equal(download(b, b.buffer_ptr(id), 64), as_bytes(v)));
  EXPECT_NO_THROW(b.synchronize());
}

TEST(CudaBackend, UploadCopiesTheHostBytesBeforeReturning) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaBackend b;
  // More uploads than staging slots, several larger than a slot: the ring wraps and splits.
  std::vector<int32_t> ids;
  std::vector<std::vector<uint8_t>> want;
  std::vector<uint8_t> host;
  for (int i = 0; i < 20; ++i) {
    const size_t n = (i % 5 == 4) ? (size_t{3} << 20) + 12 : 4096 + 4 * static_cast<size_t>(i);
    host = as_bytes(random_floats(n / 4, 100 + static_cast<uint32_t>(i)));
    ids.push_back(b.alloc_buffer(n));
    b.upload(b.buffer_ptr(ids.back()), host.data(), n);
    want.push_back(host);
    std::fill(host.begin(), host.end(), uint8_t{0xAB});  // the caller reuses its buffer at once
  }
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_TRUE(test::bytes_equal(download(b, b.buffer_ptr(ids[i]), want[i].size()), want[i])) << "upload " << i;
}

TEST(CudaBackend, ReadbackLargerThanThePinnedBufferComesBackWhole) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaBackend b;
  const size_t n = (size_t{65} << 20) + 20;  // above the 64 MiB readback buffer
  const auto host = as_bytes(random_floats(n / 4, 7));
  const int32_t id = b.alloc_buffer(n);
  b.upload(b.buffer_ptr(id), host.data(), n);
  EXPECT_TRUE(test::bytes_equal(download(b, b.buffer_ptr(id), n), host));
}

// The bytes a copy through a temporary produces.
std::vector<uint8_t> moved(std::vector<uint8_t> v, size_t rb, int64_t src, int64_t dst, int64_t count) {
  std::memmove(v.data() + static_cast<size_t>(dst) * rb, v.data() + static_cast<size_t>(src) * rb,
               static_cast<size_t>(count) * rb);
  return v;
}

TEST(CudaBackend, MoveRowsHandlesOverlapInBothDirections) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaBackend b;
  struct Case {
    size_t row_bytes;
    int64_t rows, src, dst, count;
  };
  const Case cases[] = {
      {136, 8, 1, 0, 3},    {136, 8, 0, 1, 3},     // q8_0 rows (8-byte units), overlap down / up
      {512, 8, 2, 0, 5},    {512, 8, 0, 2, 5},     // 16-byte units
      {6, 9, 3, 1, 6},      {6, 9, 1, 3, 6},       // 2-byte units
      {3, 9, 0, 5, 4},      {3, 9, 5, 0, 4},       // bytes, no overlap
      {256, 2100, 1, 0, 2099}, {256, 2100, 0, 1, 2099},  // long runs sliding by one row
      {1024, 64, 10, 40, 20}, {1024, 64, 40, 10, 20},    // far apart: the parallel kernel
  };
  for (const Case& c : cases) {
    const size_t n = c.row_bytes * static_cast<size_t>(c.rows);
    std::vector<uint8_t> init(n);
    for (size_t i = 0; i < n; ++i) init[i] = static_cast<uint8_t>(i * 131 + (i >> 8) * 7 + 1);
    const int32_t id = b.alloc_buffer(n);
    b.upload(b.buffer_ptr(id), init.data(), n);
    b.move_rows(b.buffer_ptr(id), c.row_bytes, c.src, c.dst, c.count);
    EXPECT_TRUE(test::bytes_equal(download(b, b.buffer_ptr(id), n), moved(init, c.row_bytes, c.src, c.dst, c.count), false))
        << "rows of " << c.row_bytes << " bytes, [" << c.src << ", " << c.src + c.count << ") -> " << c.dst;
    b.release_buffer(id);
  }
}

graph::WeightTensor weight(const std::string& name, const std::vector<float>& data) {
  graph::WeightTensor w;
  w.name = name;
  w.type = TensorType::F32;
  w.ne = {static_cast<int64_t>(data.size()), 1, 1, 1};
  w.data = reinterpret_cast<const uint8_t*>(data.data());
  w.nbytes = data.size() * 4;
  return w;
}

TEST(CudaBackend, RegistryUploadsOnceAndReplacesChangedWeightsWithoutPullingThemFromUnderAnotherBackend) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaContext& ctx = cuda::CudaContext::instance();
  const auto v1 = random_floats(256, 201), v2 = random_floats(256, 202);
  const graph::WeightTensor w1 = weight("test.registry.norm", v1), w2 = weight("test.registry.norm", v2);
  cuda::CudaBackend a, b, c;
  const uint64_t u0 = ctx.upload_count();
  a.register_weight(w1);
  b.register_weight(w1);  // same name, size and content: no upload
  EXPECT_EQ(ctx.upload_count(), u0 + 1);
  EXPECT_EQ(a.weight_data(w1), b.weight_data(w1));
  c.register_weight(w2);  // same name and size, other content: a new copy replaces the entry
  EXPECT_EQ(ctx.upload_count(), u0 + 2);
  EXPECT_NE(c.weight_data(w2), a.weight_data(w1));
  // Each backend still reads the bytes it registered.
  EXPECT_TRUE(test::bytes_equal(download(a, a.weight_data(w1), 1024), as_bytes(v1)));
  EXPECT_TRUE(test::bytes_equal(download(c, c.weight_data(w2), 1024), as_bytes(v2)));
}

TEST(CudaBackend, UnregisteredOrRefusedWeightsAreErrorsNamingTheTensor) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaBackend b;
  const auto v = random_floats(64, 3);
  const graph::WeightTensor w = weight("test.never.registered", v);
  EXPECT_CONTAINS(test::error_of([&] { b.weight_data(w); }), "test.never.registered");
  graph::WeightTensor half = w;
  half.name = "blk.0.attn_norm.weight";
  half.type = TensorType::F16;
  half.nbytes = 128;
  const std::string msg = test::error_of([&] { b.register_weight(half); });
  EXPECT_CONTAINS(msg, "blk.0.attn_norm.weight");
  EXPECT_CONTAINS(msg, "f16");
}

TEST(CudaBackend, ALatchedErrorIsReportedAsLatchedNotBlamedOnAKernel) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaBackend b;
  // An API call that fails latches its error for the next cudaGetLastError.
  int* p = nullptr;
  ASSERT_NE(cudaMalloc(&p, uint64_t{1} << 52), cudaSuccess);
  try {
    b.synchronize();
    FAIL() << "expected the latched error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("latched"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cudaErrorMemoryAllocation"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("node"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(b.synchronize());  // reported once, then clear
}

TEST(CudaBackend, InjectedLaunchFailureIsReportedWithItsSiteAndNode) {
  MINFER_REQUIRE_CUDA();
  std::vector<float> wv = random_floats(128, 5, 0.1f, 1.0f);
  const graph::WeightTensor W = weight("test.inject.norm", wv);
  const auto make = [&] {
    test::TestGraph t;
    const graph::NodeId x = t.g.input(graph::InputKind::Other, TensorType::F32, {128, 2, 1, 1}, "x");
    t.inputs.emplace_back(x, as_bytes(random_floats(256, 6)));
    const graph::NodeId y = t.g.rms_norm(x, t.g.weight(W), 1e-6f, "blk.0.attn_norm");
    t.weights = {&W};
    t.g.mark_output(y);
    t.outputs.push_back(y);
    return t;
  };
  cpu::CpuBackend cpu(1);
  cuda::CudaBackend dev;
  {
    test::ScopedEnv fail_env("MINFER_CUDA_FAIL_LAUNCH", "silu,rms_norm");
    const std::string msg = test::error_of([&] { test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev); });
    EXPECT_CONTAINS(msg, "rms_norm");
    EXPECT_CONTAINS(msg, "blk.0.attn_norm");
    EXPECT_CONTAINS(msg, "cudaErrorLaunchFailure");
  }
  // Without the switch the same graph runs.
  EXPECT_NO_THROW(test::run_graph(make, graph::BackendKind::Cuda, cpu, &dev));
}

TEST(CudaBackend, FailureInjectionMatchesWholeSiteNamesOnly) {
  // launch.cuh's matcher; runs without a device.
  test::ScopedEnv env("MINFER_CUDA_FAIL_LAUNCH", "kv_store_q8_0,attn_combine");
  EXPECT_TRUE(cuda::launch_fault_injected("kv_store_q8_0"));
  EXPECT_TRUE(cuda::launch_fault_injected("attn_combine"));
  EXPECT_FALSE(cuda::launch_fault_injected("kv_store"));
  EXPECT_FALSE(cuda::launch_fault_injected("kv_store_q8_0_x"));
  EXPECT_FALSE(cuda::launch_fault_injected("rms_norm"));
}

TEST(CudaBackend, DisableGateMakesDeviceCudaAOneLineError) {
  // Runs without a device: the gate is checked before any device query.
  test::ScopedEnv env("MINFER_DISABLE_CUDA", "1");
  const std::string msg = test::error_of([] { create_backend(graph::BackendKind::Cuda, 1); });
  EXPECT_CONTAINS(msg, "MINFER_DISABLE_CUDA");
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
