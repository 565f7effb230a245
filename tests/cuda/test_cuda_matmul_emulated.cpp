// The MMVQ kernels' arithmetic run on the host (mmvq_emulate.cuh: the kernels' own decode,
// partial-sum and term code in their lane order) is bit-identical to the CPU reference for every
// quantized type, n = 1..8, one and many blocks, 16-byte aligned and 2-byte aligned weights; for
// Q4_K/Q5_K at n >= 2 also the tensor-core kernel's fragments, mma sums and fold order.
// Needs a CUDA build but no device.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/kernels/mmvq_emulate.cuh"
#include "cuda_matmul_util.h"
#include "quant/quant.h"

namespace minfer {
namespace {

class CudaMmvqEmulated : public ::testing::TestWithParam<TensorType> {
 protected:
  ThreadPool pool_{4};
};

TEST_P(CudaMmvqEmulated, kernel_arithmetic_is_bit_identical_to_cpu_reference) {
  const TensorType type = GetParam();
  const int64_t bs = static_cast<int64_t>(type_traits(type).block_size);
  // one block; more than 32 blocks (lanes wrap) and more than one staged chunk; 14 super-blocks
  // (the direct K-quant kernel's two-half steps, 7B rows); 3 blocks (the lane kernel's 8 lanes per
  // row with 5 empty); 74 (a 7B ffn_down row: the lane kernel's three rounds, the last partial).
  for (const int64_t k : {bs, bs * (bs == 32 ? 100 : 37), bs * 14, bs * 3, bs * (bs == 32 ? 7 : 74)})
    for (const int64_t m : {int64_t{1}, int64_t{7}, int64_t{37}})  // 37: three 16-row tiles of the tensor-core kernel
      for (const size_t offset : {size_t{0}, size_t{2}, size_t{6}}) {
        SCOPED_TRACE("k " + std::to_string(k) + " m " + std::to_string(m) + " offset " +
                     std::to_string(offset));
        const auto w = test::random_weights(type, m, k, static_cast<uint32_t>(k + m));
        const auto x = test::random_acts(k, 8, 11);
        std::vector<uint8_t> blocks;
        const auto y_ref = test::cpu_matmul(pool_, type, w, m, x, k, 8, &blocks);
        std::vector<uint8_t> store(w.size() + 32);
        uint8_t* base = store.data() + (16 - reinterpret_cast<uintptr_t>(store.data()) % 16) % 16 + offset;
        std::memcpy(base, w.data(), w.size());
        for (int64_t n = 1; n <= 8; ++n) {
          std::vector<uint8_t> acts;
          ASSERT_TRUE(cuda::mm::host_activations_from_blocks(type, blocks.data(), k, n, &acts));
          std::vector<float> y(static_cast<size_t>(m * n), -1.0f);
          ASSERT_TRUE(cuda::mm::emulate_mmvq(type, base, k, m, acts.data(), n, y.data(), m));
          for (int64_t t = 0; t < n; ++t)
            for (int64_t j = 0; j < m; ++j) {
              const float got = y[static_cast<size_t>(j + t * m)], want = y_ref[static_cast<size_t>(j + t * m)];
              ASSERT_EQ(test::f32_bits(got), test::f32_bits(want))
                  << "n " << n << " row " << j << " token " << t << ": emulated " << got << " CPU " << want;
            }
        }
      }
}

INSTANTIATE_TEST_SUITE_P(QuantizedTypes, CudaMmvqEmulated,
                         ::testing::Values(TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                                           TensorType::Q5_1, TensorType::Q8_0, TensorType::Q4_K,
                                           TensorType::Q5_K, TensorType::Q6_K),
                         test::type_param_name);

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
