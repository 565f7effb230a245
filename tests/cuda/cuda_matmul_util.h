// Helpers for the device matmul tests (test_cuda_matmul*.cpp): device detection, a device
// buffer, generated weights and activations, and the CPU reference (cpu::quantize_activations +
// cpu::matmul_quantized) plus the magnitudes the prefill tolerance is built from.
#pragma once

#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "core/thread_pool.h"
#include "cuda/kernels/matmul.cuh"
#include "cpu/kernels.h"
#include "quant/quant.h"

namespace minfer::test {

inline bool cuda_device_present() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();  // a missing driver leaves an error behind; do not leak it into a test
  return ok;
}

/// A parameterized test with a CUDA stream of its own (stream_), created in SetUp and destroyed
/// in TearDown; the test skips (GTEST_SKIP) when no CUDA device is present.
template <typename Param>
class CudaStreamTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (!cuda_device_present()) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

#define MINFER_REQUIRE_CUDA_DEVICE() \
  do {                               \
    if (!::minfer::test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";  \
  } while (0)

/// Clears this thread's L2 prefetch hint (cuda::set_l2_ahead_hint) when it goes out of scope, so
/// a failed assertion cannot leave a hint naming freed buffers to later launches.
struct ScopedL2Hint {
  ScopedL2Hint() = default;
  ScopedL2Hint(const ScopedL2Hint&) = delete;
  ScopedL2Hint& operator=(const ScopedL2Hint&) = delete;
  ~ScopedL2Hint() { cuda::set_l2_ahead_hint({}); }
};

/// cudaMalloc'ed bytes, freed on scope exit. `offset` shifts the pointer handed out (to test
/// misaligned tensors); the allocation is `offset` bytes larger.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes, size_t offset = 0) : bytes_(bytes), offset_(offset) {
    if (cudaMalloc(&base_, bytes + offset + 16) != cudaSuccess) {
      base_ = nullptr;
      ADD_FAILURE() << "cudaMalloc of " << bytes << " bytes failed";
    }
  }
  ~DeviceBuffer() {
    if (base_ != nullptr) cudaFree(base_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return static_cast<uint8_t*>(base_) + offset_; }
  template <typename T>
  T* as() const { return static_cast<T*>(get()); }
  size_t bytes() const { return bytes_; }

  void upload(const void* src, size_t n) const {
    EXPECT_EQ(cudaMemcpy(get(), src, n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  void download(void* dst, size_t n) const {
    EXPECT_EQ(cudaMemcpy(dst, get(), n, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  void fill(int byte) const { EXPECT_EQ(cudaMemset(get(), byte, bytes_), cudaSuccess); }

 private:
  void* base_ = nullptr;
  size_t bytes_;
  size_t offset_;
};

/// A random finite half: sign * 2^e, e uniform in [-14, -4], with a few subnormals and zeros.
inline uint16_t random_scale_half(std::mt19937& gen) {
  std::uniform_real_distribution<float> e(-14.0f, -4.0f);
  std::uniform_int_distribution<int> pick(0, 49);
  const int p = pick(gen);
  if (p == 0) return 0;                          // zero scale
  if (p == 1) return static_cast<uint16_t>(37);  // subnormal half (37 * 2^-24)
  const float v = std::exp2(e(gen)) * (pick(gen) < 25 ? 1.0f : -1.0f);
  return fp32_to_fp16(v);
}

/// Byte offsets of the half fields (scales, mins) of one block of `type`; every other byte may
/// hold any value.
inline std::vector<int> half_fields(TensorType type) {
  switch (type) {
    case TensorType::Q4_0:
    case TensorType::Q5_0:
    case TensorType::Q8_0: return {0};
    case TensorType::Q4_1:
    case TensorType::Q5_1:
    case TensorType::Q4_K:
    case TensorType::Q5_K: return {0, 2};
    case TensorType::Q6_K: return {208};
    default: return {};
  }
}

/// m rows of k weights of `type`: random bytes with finite half scales for the block types
/// (every bit pattern of q, scales and mins occurs), random normal values for F32/F16/BF16.
inline std::vector<uint8_t> random_weights(TensorType type, int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 gen(seed);
  const size_t rb = row_bytes(type, k);
  std::vector<uint8_t> w(rb * static_cast<size_t>(m));
  std::normal_distribution<float> normal(0.0f, 0.05f);
  if (type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16) {
    for (size_t i = 0; i < static_cast<size_t>(m * k); ++i) {
      const float v = normal(gen);
      if (type == TensorType::F32) {
        std::memcpy(w.data() + 4 * i, &v, 4);
      } else {
        const uint16_t h = type == TensorType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
        std::memcpy(w.data() + 2 * i, &h, 2);
      }
    }
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<uint8_t>(byte(gen));
  const TypeTraits& t = type_traits(type);
  const size_t blocks = w.size() / t.block_bytes;
  for (size_t b = 0; b < blocks; ++b)
    for (int off : half_fields(type)) {
      const uint16_t h = random_scale_half(gen);
      std::memcpy(w.data() + b * t.block_bytes + static_cast<size_t>(off), &h, 2);
    }
  return w;
}

/// x [k, n]: normal values whose scale changes per 32-element block (2^-6 .. 2^6), with an
/// all-zero block and a block of one repeated magnitude now and then.
inline std::vector<float> random_acts(int64_t k, int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> scale_e(-6, 6), pick(0, 29);
  std::vector<float> x(static_cast<size_t>(k * n));
  for (int64_t s = 0; s < k * n; s += 32) {
    const float scale = std::ldexp(1.0f, scale_e(gen));
    const int p = pick(gen);
    const int64_t end = std::min<int64_t>(s + 32, k * n);
    for (int64_t i = s; i < end; ++i) {
      float v = normal(gen) * scale;
      if (p == 0) v = 0.0f;
      if (p == 1) v = (i % 2 ? -1.5f : 1.5f) * scale;  // ties of magnitude, both signs
      x[static_cast<size_t>(i)] = v;
    }
  }
  return x;
}

/// The CPU reference: y[j + t * m] for x [k, n] (cpu::quantize_activations + matmul_quantized).
inline std::vector<float> cpu_matmul(ThreadPool& pool, TensorType type, const std::vector<uint8_t>& w,
                                     int64_t m, const std::vector<float>& x, int64_t k, int64_t n,
                                     std::vector<uint8_t>* act_buf) {
  const cpu::QuantizedActs xq = cpu::quantize_activations(pool, *act_buf, type, x.data(), k, n);
  std::vector<float> y(static_cast<size_t>(m * n));
  cpu::matmul_quantized(pool, type, w.data(), m, xq, y.data(), m);
  return y;
}

/// Per element of each row: the sum of the magnitudes of the parts the weight is computed from
/// (|d q| + |m| for Q4_1/Q5_1, |d sc q| + |dmin m| for Q4_K/Q5_K, |w| otherwise), via the
/// CPU's dequantizer on copies of the blocks with one part zeroed.
inline std::vector<float> weight_part_magnitudes(TensorType type, const std::vector<uint8_t>& w,
                                                 int64_t m, int64_t k) {
  const TypeTraits& t = type_traits(type);
  std::vector<float> out(static_cast<size_t>(m * k));
  const size_t rb = row_bytes(type, k);
  const bool two_parts = type == TensorType::Q4_1 || type == TensorType::Q5_1 ||
                         type == TensorType::Q4_K || type == TensorType::Q5_K;
  std::vector<uint8_t> a(rb), b(rb);
  std::vector<float> fa(static_cast<size_t>(k)), fb(static_cast<size_t>(k));
  for (int64_t j = 0; j < m; ++j) {
    const uint8_t* row = w.data() + static_cast<size_t>(j) * rb;
    std::memcpy(a.data(), row, rb);
    std::memcpy(b.data(), row, rb);
    if (two_parts)
      for (size_t blk = 0; blk < rb / t.block_bytes; ++blk) {
        std::memset(a.data() + blk * t.block_bytes + 2, 0, 2);  // no min: the d * q part
        std::memset(b.data() + blk * t.block_bytes, 0, 2);      // no d: the min part
      }
    t.dequantize_row(a.data(), fa.data(), k);
    if (two_parts) t.dequantize_row(b.data(), fb.data(), k);
    for (int64_t e = 0; e < k; ++e)
      out[static_cast<size_t>(j * k + e)] =
          std::fabs(fa[static_cast<size_t>(e)]) + (two_parts ? std::fabs(fb[static_cast<size_t>(e)]) : 0.0f);
  }
  return out;
}

/// |a| of each activation as the kernels see it: the dequantized CPU activations (x for F32).
inline std::vector<float> act_magnitudes(TensorType w_type, const cpu::QuantizedActs& xq,
                                         const std::vector<float>& x) {
  std::vector<float> out(static_cast<size_t>(xq.k * xq.n));
  if (xq.type == TensorType::F32) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = std::fabs(x[i]);
    return out;
  }
  (void)w_type;
  const TypeTraits& at = type_traits(xq.type);
  for (int64_t t = 0; t < xq.n; ++t) {
    at.dequantize_row(xq.data + static_cast<size_t>(t) * xq.row_bytes, out.data() + t * xq.k, xq.k);
    for (int64_t e = 0; e < xq.k; ++e) out[static_cast<size_t>(t * xq.k + e)] = std::fabs(out[static_cast<size_t>(t * xq.k + e)]);
  }
  return out;
}

/// Test-name suffix of a TensorType parameter ("q4_K").
inline std::string type_param_name(const ::testing::TestParamInfo<TensorType>& p) {
  return std::string(type_name(p.param));
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace minfer::test

#endif  // MINFER_HAS_CUDA
