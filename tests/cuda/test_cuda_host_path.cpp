// The CUDA backend's host path of a decode step: small uploads gathered into one scatter kernel
// (stream order kept, overlapping and large uploads handled, a failed launch named), readbacks
// queued behind the work and finished by synchronize (page-locked memory by DMA, pageable
// through the staging buffer, dropped when the wait fails), page-locked alloc_host memory, and
// the engine's logits views bitwise equal to the copies of the old path.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "../gguf_test_util.h"
#include "../synth_model.h"
#include "../test_util.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "models/model.h"
#include "sampling/sampler.h"

namespace minfer {
namespace {

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 131 + seed * 977 + (i >> 7)) & 0xFF);
  return v;
}

std::vector<uint8_t> download(cuda::CudaBackend& b, const void* src, size_t n) {
  std::vector<uint8_t> out(n);
  b.download(out.data(), src, n);
  return out;
}

// Applies the same writes to a host mirror and to one device buffer, in order; the buffer must
// end equal to the mirror whatever path each upload took.
TEST(CudaHostPath, GatheredUploadsLandInStreamOrder) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaBackend b;
  const size_t n = 256 << 10;
  const int32_t id = b.alloc_buffer(n);
  auto* dev = static_cast<uint8_t*>(b.buffer_ptr(id));
  std::vector<uint8_t> mirror(n, 0);
  uint32_t seed = 1;
  const auto write = [&](size_t off, size_t len) {
    std::vector<uint8_t> src = pattern(len, seed++);
    b.upload(dev + off, src.data(), len);
    std::memcpy(mirror.data() + off, src.data(), len);
    std::fill(src.begin(), src.end(), uint8_t{0xEE});  // the caller reuses its memory at once
  };
  write(0, 1024);            // gathered
  write(512, 1024);          // overlaps a pending entry: the gather is flushed first
  write(4096 + 1, 7);        // odd address and length: the byte loop
  write(8192 + 2, 6);
  for (int i = 0; i < 40; ++i) write(16384 + 64 * static_cast<size_t>(i), 60);  // more entries than one launch takes
  write(10000, 100 << 10);   // above the gather limit: one DMA copy, after the pending scatter
  write(10000 + 50, 200);    // on top of the DMA-copied range: must land after it
  write(240 << 10, 16 << 10);
  write(131072 + 4, 64 << 10);  // the largest gathered entry, 4-byte aligned: 16 chunks of words
  write(200000, 4096 + 48);      // 16-byte aligned: two chunks of 16-byte loads, the second short
  EXPECT_TRUE(test::bytes_equal(download(b, dev, n), mirror, false));
  // A gathered upload followed by a synchronize (which flushes it) and a readback.
  write(3, 5);
  b.synchronize();
  EXPECT_TRUE(test::bytes_equal(download(b, dev, n), mirror, false));
}

// A gathered upload is flushed before a device-to-device copy and a KV row move that read it.
TEST(CudaHostPath, CopiesAndRowMovesSeeGatheredUploads) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaBackend b;
  const int32_t a = b.alloc_buffer(2048), c = b.alloc_buffer(2048);
  const auto src = pattern(2048, 4);
  b.upload(b.buffer_ptr(a), src.data(), 2048);
  b.copy(b.buffer_ptr(c), b.buffer_ptr(a), 2048);
  EXPECT_TRUE(test::bytes_equal(download(b, b.buffer_ptr(c), 2048), src, false)) << "copy";
  const auto src2 = pattern(2048, 6);  // new bytes, gathered: rows of 256 bytes, 0..3 move to 4..7
  b.upload(b.buffer_ptr(a), src2.data(), 2048);
  b.move_rows(b.buffer_ptr(a), 256, 0, 4, 4);
  std::vector<uint8_t> want = src2;
  std::memcpy(want.data() + 1024, src2.data(), 1024);
  EXPECT_TRUE(test::bytes_equal(download(b, b.buffer_ptr(a), 2048), want, false)) << "move_rows";
}

TEST(CudaHostPath, TheGatherSwitchGivesTheSameBytes) {
  MINFER_REQUIRE_CUDA();
  test::ScopedEnv env("MINFER_CUDA_NO_INPUT_GATHER", "1");
  cuda::CudaBackend b;
  const int32_t id = b.alloc_buffer(4096);
  const auto src = pattern(4096, 9);
  for (size_t off = 0; off < 4096; off += 512) b.upload(static_cast<uint8_t*>(b.buffer_ptr(id)) + off, src.data() + off, 512);
  EXPECT_TRUE(test::bytes_equal(download(b, b.buffer_ptr(id), 4096), src, false));
}

TEST(CudaHostPath, AFailedScatterLaunchIsReportedWithItsSite) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaBackend b;
  const int32_t id = b.alloc_buffer(256);
  const auto src = pattern(256, 3);
  {
    test::ScopedEnv fail_env("MINFER_CUDA_FAIL_LAUNCH", "scatter_inputs");
    b.upload(b.buffer_ptr(id), src.data(), 256);
    const std::string msg = test::error_of([&] { b.synchronize(); });
    EXPECT_CONTAINS(msg, "scatter_inputs");
    EXPECT_CONTAINS(msg, "gathered input copies");
    EXPECT_CONTAINS(msg, "cudaErrorLaunchFailure");
  }
  // The failed gather is gone; the backend works on.
  b.upload(b.buffer_ptr(id), src.data(), 256);
  EXPECT_TRUE(test::bytes_equal(download(b, b.buffer_ptr(id), 256), src, false));
}

TEST(CudaHostPath, AllocHostIsPageLocked) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaBackend b;
  graph::HostBuffer h = b.alloc_host(1 << 20);
  ASSERT_NE(h.get(), nullptr);
  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, h.get()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  // An impossible size is an OutOfMemoryError naming it, and nothing stays latched.
  const uint64_t huge = uint64_t{1} << 52;
  try {
    b.alloc_host(huge);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_CONTAINS(std::string(e.what()), std::to_string(huge));
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Readbacks queued with download_at_sync into page-locked and pageable memory, both in one wait;
// with the staged switch the page-locked one takes the staging path too.
void readbacks_at_sync(bool staged) {
  test::ScopedEnv env("MINFER_CUDA_STAGED_READBACK", staged ? "1" : "0");
  cuda::CudaBackend b;
  const size_t n = 600 << 10;  // about a Qwen2.5 logits row (151936 floats = 594 KiB)
  const auto src = pattern(n, 5);
  const int32_t id = b.alloc_buffer(n);
  b.upload(b.buffer_ptr(id), src.data(), n);
  graph::HostBuffer pinned = b.alloc_host(n);
  std::vector<uint8_t> pageable(n, 0), pageable2(1000, 0);
  auto* p = static_cast<uint8_t*>(pinned.get());
  std::memset(p, 0, n);
  b.download_at_sync(p, b.buffer_ptr(id), n);
  b.download_at_sync(pageable.data(), b.buffer_ptr(id), n);
  b.download_at_sync(pageable2.data(), static_cast<uint8_t*>(b.buffer_ptr(id)) + 12345, 1000);
  b.synchronize();
  EXPECT_EQ(0, std::memcmp(p, src.data(), n));
  EXPECT_TRUE(test::bytes_equal(pageable, src, false));
  EXPECT_EQ(0, std::memcmp(pageable2.data(), src.data() + 12345, 1000));
}

TEST(CudaHostPath, ReadbacksAtSyncFillPageLockedAndPageableMemory) {
  MINFER_REQUIRE_CUDA();
  readbacks_at_sync(false);
}

TEST(CudaHostPath, ReadbacksAtSyncThroughTheStagingSwitch) {
  MINFER_REQUIRE_CUDA();
  readbacks_at_sync(true);
}

TEST(CudaHostPath, AFailedWaitDropsTheQueuedReadbacks) {
  MINFER_REQUIRE_CUDA();
  cuda::CudaBackend b;
  const auto src = pattern(4096, 8);
  const int32_t id = b.alloc_buffer(4096);
  b.upload(b.buffer_ptr(id), src.data(), 4096);
  std::vector<uint8_t> dst(4096, 0x5A);
  b.download_at_sync(dst.data(), b.buffer_ptr(id), 4096);  // pageable: copied out at the wait
  int* p = nullptr;
  ASSERT_NE(cudaMalloc(&p, uint64_t{1} << 52), cudaSuccess);  // latches an error
  EXPECT_CONTAINS(test::error_of([&] { b.synchronize(); }), "latched");
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t v) { return v == 0x5A; }))
      << "a readback of a failed wait was copied out";
  EXPECT_NO_THROW(b.synchronize());
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](uint8_t v) { return v == 0x5A; }))
      << "a dropped readback came back at a later wait";
  // The backend reads back normally afterwards.
  b.download_at_sync(dst.data(), b.buffer_ptr(id), 4096);
  b.synchronize();
  EXPECT_TRUE(test::bytes_equal(dst, src, false));
}

// Greedy decode through decode_view (gathered inputs, DMA into the engine's page-locked logits)
// against decode on an engine with both switches (one copy per input, staged readback): the
// logits of every step are bitwise equal.
TEST(CudaHostPath, DecodeViewsGiveTheBitsOfTheCopyingPath) {
  MINFER_REQUIRE_CUDA();
  test::SynthSpec spec;
  spec.arch = "qwen2";
  spec.type = TensorType::Q4_K;
  const auto model = Model::load(test::write_synth_model(spec, test::temp_dir()).string());
  EngineConfig cfg;
  cfg.device = graph::BackendKind::Cuda;
  cfg.n_ctx = 256;
  cfg.n_ubatch = 4;  // the prompt's all-logits batch runs in three ubatches
  const std::vector<int32_t> prompt = {11, 200, 37, 5, 480, 99, 123, 7, 310, 42};
  Engine fast(model, cfg);
  std::unique_ptr<Engine> old;
  {
    test::ScopedEnv g("MINFER_CUDA_NO_INPUT_GATHER", "1");
    test::ScopedEnv r("MINFER_CUDA_STAGED_READBACK", "1");
    old = std::make_unique<Engine>(model, cfg);
  }
  const size_t nv = static_cast<size_t>(fast.n_vocab());
  const std::span<const float> a = fast.decode_view(prompt, /*all_logits=*/true);
  const std::vector<float> b = old->decode(prompt, true);
  ASSERT_EQ(a.size(), prompt.size() * nv);
  ASSERT_EQ(b.size(), a.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), b.size() * 4)) << "prompt logits";
  int32_t next = argmax(std::span<const float>(b).last(nv));
  for (int step = 0; step < 12; ++step) {  // past the graphs' warm-up: captured and replayed steps
    const int32_t one[1] = {next};
    const std::span<const float> x = fast.decode_view(one);
    const std::vector<float> y = old->decode(one);
    ASSERT_EQ(x.size(), nv);
    ASSERT_EQ(0, std::memcmp(x.data(), y.data(), nv * 4)) << "decode step " << step;
    next = argmax(y);
  }
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
