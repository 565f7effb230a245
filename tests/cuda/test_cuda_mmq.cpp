// The int8 tensor-core MMQ (mmq.cu) behind matmul() for n >= 9 token columns:
// - its arithmetic, run on the host by the emulation (mmq_emulate.cuh, the kernel's own decode
//   and per-output steps), agrees with the CPU reference within the f32 accumulation bound
//   (mmq_tolerance) for every quantized type, one block, partial stages and many stages; these
//   run without a device;
// - on a device the kernel is bit-identical to the emulation and within the bound of the CPU for
//   awkward shapes (m and n not multiples of the 128 x 64 tile, a partial last stage, the Qwen
//   row lengths k = 896 and 4864), writes
//   every output and nothing in the ldy padding, and serves real model shapes at n = 512;
// - the routing: MMQ for quantized weights at n >= 9, the GEMM under MINFER_NO_MMQ=1, an injected
//   launch failure names the mmq site.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/kernels/gemm.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.cuh"
#include "cuda/kernels/mmq.cuh"
#include "cuda/kernels/mmq_emulate.cuh"
#include "cuda/kernels/mmvq_emulate.cuh"
#include "cuda_matmul_util.h"
#include "cuda_test_util.h"
#include "quant/quant.h"

namespace minfer {
namespace {

using test::DeviceBuffer;

constexpr uint32_t kPoison = 0xFFFFFFFFu;  // a NaN no kernel produces from finite inputs
constexpr int64_t kPad = 3;                // ldy = m + kPad

/// |mmq - cpu| bound, u = 2^-24, T = blocks (super-blocks) per row:
///   the kernel adds T terms in k order (2T for Q4_1/Q5_1, whose min part is a second step):
///   at most T_gpu u sum|term|; the CPU adds ceil(T/32) terms per lane and folds 32 lanes in 5
///   steps: (ceil(T/32) + 5) u sum|term|; the terms themselves are formed with a few roundings
///   on each side (13 u covers both); and sum|term| <= sum over elements of the weight's part
///   magnitudes times |a| (`part_mag_sum`, cuda_matmul_util.h). 1.1x for second-order terms.
double mmq_tolerance(TensorType type, int64_t k, double part_mag_sum) {
  const double u = std::ldexp(1.0, -24);
  const int64_t terms = k / static_cast<int64_t>(type_traits(type).block_size);
  const bool two_steps = type == TensorType::Q4_1 || type == TensorType::Q5_1;
  const double units = static_cast<double>(two_steps ? 2 * terms : terms) +
                       static_cast<double>((terms + 31) / 32) + 5.0 + 13.0;
  return 1.1 * units * u * part_mag_sum + 1e-30;
}

const TensorType kMmqTypes[] = {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

/// k values: one block, a partial last stage (legacy stages hold 4 blocks), many stages.
std::vector<int64_t> mmq_ks(TensorType type) {
  if (type_traits(type).block_size == 256) return {256, 256 * 3, 256 * 37};
  return {32, 32 * 5, 32 * 100};
}

/// The Qwen2.5-0.5B row lengths: 896 (hidden; 28 blocks, 7 full legacy stages; not a multiple
/// of 256, so no K-quant tensor has it) and 4864 (ffn; 38 legacy stages, 19 super-blocks).
std::vector<int64_t> qwen_ks(TensorType type) {
  if (type_traits(type).block_size == 256) return {4864};
  return {896, 4864};
}

/// One problem on the host: weights (a 16-byte aligned copy), activations, the CPU reference,
/// the part magnitudes, and the emulated kernel result for n tokens.
struct HostCase {
  TensorType type;
  int64_t m, k, n;
  std::vector<uint8_t> w;       // as generated
  std::vector<uint8_t> w_store; // 16-byte aligned copy lives in here
  const uint8_t* w_aligned = nullptr;
  std::vector<float> x, y_ref, y_emu;
  std::vector<uint8_t> acts;    // the activations in the device layout (all n tokens)
  std::vector<double> mag;      // [t][j] sum of part magnitudes |w| |a|
};

HostCase make_case(ThreadPool& pool, TensorType type, int64_t m, int64_t k, int64_t n, uint32_t seed) {
  HostCase c;
  c.type = type;
  c.m = m;
  c.k = k;
  c.n = n;
  c.w = test::random_weights(type, m, k, seed);
  c.x = test::random_acts(k, n, seed + 1);
  std::vector<uint8_t> blocks;
  c.y_ref = test::cpu_matmul(pool, type, c.w, m, c.x, k, n, &blocks);
  c.w_store.assign(c.w.size() + 32, 0);
  auto* base = c.w_store.data() + (16 - reinterpret_cast<uintptr_t>(c.w_store.data()) % 16) % 16;
  std::memcpy(base, c.w.data(), c.w.size());
  c.w_aligned = base;

  EXPECT_TRUE(cuda::mm::host_activations_from_blocks(type, blocks.data(), k, n, &c.acts));
  c.y_emu.assign(static_cast<size_t>(m * n), 0.0f);
  EXPECT_TRUE(cuda::mm::emulate_mmq(type, c.w_aligned, k, m, c.acts.data(), n, c.y_emu.data(), m));

  const auto wm = test::weight_part_magnitudes(type, c.w, m, k);
  std::vector<uint8_t> buf;
  const cpu::QuantizedActs xq = cpu::quantize_activations(pool, buf, type, c.x.data(), k, n);
  const auto am = test::act_magnitudes(type, xq, c.x);
  c.mag.assign(static_cast<size_t>(m * n), 0.0);
  pool.parallel_for(n, 1, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0.0;
        const float* wr = wm.data() + j * k;
        const float* ar = am.data() + t * k;
        for (int64_t e = 0; e < k; ++e) s += static_cast<double>(wr[e]) * ar[e];
        c.mag[static_cast<size_t>(t * m + j)] = s;
      }
  });
  return c;
}

std::string describe(const HostCase& c) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "type %s m %lld k %lld n %lld", std::string(type_name(c.type)).c_str(),
                static_cast<long long>(c.m), static_cast<long long>(c.k), static_cast<long long>(c.n));
  return buf;
}

/// Every y[j + t * ldy] (t < n) within mmq_tolerance of the CPU; the failure names the first
/// offender, its bound, and the largest |d| relative to its bound.
::testing::AssertionResult within_bound(const HostCase& c, const float* y, int64_t ldy, int64_t n) {
  int64_t bad = 0, first_j = -1, first_t = -1;
  double worst_ratio = 0.0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < c.m; ++j) {
      const double got = y[j + t * ldy], want = c.y_ref[static_cast<size_t>(j + t * c.m)];
      const double tol = mmq_tolerance(c.type, c.k, c.mag[static_cast<size_t>(t * c.m + j)]);
      const double d = std::fabs(got - want);
      worst_ratio = std::max(worst_ratio, std::isnan(d) ? INFINITY : d / tol);
      if (!(d <= tol) && bad++ == 0) {
        first_j = j;
        first_t = t;
      }
    }
  if (bad == 0) return ::testing::AssertionSuccess() << "worst |d| / bound " << worst_ratio;
  const size_t i = static_cast<size_t>(first_j + first_t * c.m);
  return ::testing::AssertionFailure()
         << bad << " of " << c.m * n << " outputs outside the bound; first at row " << first_j << " token "
         << first_t << ": got " << y[first_j + first_t * ldy] << ", CPU " << c.y_ref[i] << ", bound "
         << mmq_tolerance(c.type, c.k, c.mag[static_cast<size_t>(first_t * c.m + first_j)])
         << "; worst |d| / bound " << worst_ratio;
}

// ---- host emulation (no device needed) ----------------------------------------------------------

class CudaMmqEmulated : public ::testing::TestWithParam<TensorType> {
 protected:
  ThreadPool pool_{4};
};

TEST_P(CudaMmqEmulated, kernel_arithmetic_is_within_the_accumulation_bound_of_the_cpu) {
  const TensorType type = GetParam();
  uint32_t seed = 500 + static_cast<uint32_t>(type) * 31;
  std::vector<int64_t> ks = mmq_ks(type);
  for (const int64_t k : qwen_ks(type)) ks.push_back(k);
  for (const int64_t k : ks)
    for (const int64_t m : {int64_t{1}, int64_t{7}, int64_t{33}}) {
      const HostCase c = make_case(pool_, type, m, k, 19, seed++);
      SCOPED_TRACE(describe(c));
      const ::testing::AssertionResult r = within_bound(c, c.y_emu.data(), c.m, c.n);
      ASSERT_TRUE(r);
      if (m == 33) std::printf("[ mmq      ] emulated %s: %s\n", describe(c).c_str(), r.message());
    }
}

TEST_P(CudaMmqEmulated, bound_is_tight_enough_to_catch_a_wrong_scale) {
  // The tolerance must be able to fail: the same arithmetic with one block scale off by one
  // half ulp (a decode bug of the smallest kind) leaves the bound for some output.
  const TensorType type = GetParam();
  HostCase c = make_case(pool_, type, 16, mmq_ks(type)[1], 9, 77);
  std::vector<uint8_t> w2 = c.w;
  const size_t d_off = type == TensorType::Q6_K ? 208 : 0;  // the first block's half d
  uint16_t d;
  std::memcpy(&d, w2.data() + d_off, 2);
  d = static_cast<uint16_t>(d ^ 0x0400);  // flips the lowest exponent bit: a 2x or 0.5x scale
  std::memcpy(w2.data() + d_off, &d, 2);
  std::vector<uint8_t> store(w2.size() + 32);
  auto* base = store.data() + (16 - reinterpret_cast<uintptr_t>(store.data()) % 16) % 16;
  std::memcpy(base, w2.data(), w2.size());
  std::vector<uint8_t> blocks, acts;
  test::cpu_matmul(pool_, type, c.w, c.m, c.x, c.k, c.n, &blocks);
  ASSERT_TRUE(cuda::mm::host_activations_from_blocks(type, blocks.data(), c.k, c.n, &acts));
  std::vector<float> y(static_cast<size_t>(c.m * c.n));
  ASSERT_TRUE(cuda::mm::emulate_mmq(type, base, c.k, c.m, acts.data(), c.n, y.data(), c.m));
  EXPECT_FALSE(within_bound(c, y.data(), c.m, c.n));
}

INSTANTIATE_TEST_SUITE_P(QuantizedTypes, CudaMmqEmulated, ::testing::ValuesIn(kMmqTypes), test::type_param_name);

// ---- device ---------------------------------------------------------------------------------------

class CudaMmq : public test::CudaStreamTest<TensorType> {
 protected:

  /// Runs matmul() for the first n tokens of `c` (poisoned output with ldy = m + kPad) and
  /// returns the output.
  std::vector<float> run(const HostCase& c, int64_t n, bool* ok);
  /// Compares one device run with the emulation (bitwise) and the CPU (bound).
  void check(const HostCase& c, int64_t n);

  ThreadPool pool_{default_thread_count()};
};

std::vector<float> CudaMmq::run(const HostCase& c, int64_t n, bool* ok) {
  *ok = false;
  const int64_t ldy = c.m + kPad;
  DeviceBuffer dw(c.w.size()), dx(static_cast<size_t>(c.k * n) * 4), dy(static_cast<size_t>(ldy * n) * 4);
  dw.upload(c.w.data(), c.w.size());
  dx.upload(c.x.data(), static_cast<size_t>(c.k * n) * 4);
  dy.fill(0xFF);
  DeviceBuffer dq(std::max<size_t>(cuda::quantized_activation_bytes(c.type, c.k, n), 16));
  cuda::clear_launch_failure();
  std::vector<float> y(static_cast<size_t>(ldy * n));
  if (!cuda::quantize_activations(c.type, dx.as<float>(), c.k, n, dq.get(), stream_) ||
      !cuda::matmul(c.type, dw.get(), c.k, c.m, dx.as<float>(), dq.get(), n, dy.as<float>(), ldy, stream_)) {
    const cuda::LaunchFailure* f = cuda::launch_failure();
    ADD_FAILURE() << "launch failed at " << (f != nullptr ? f->site : "?") << ": "
                  << (f != nullptr ? cudaGetErrorString(f->err) : "");
    return y;
  }
  const cudaError_t e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) {
    ADD_FAILURE() << "kernel failed: " << cudaGetErrorString(e);
    return y;
  }
  dy.download(y.data(), y.size() * 4);
  *ok = true;
  return y;
}

/// The emulation of the first n tokens of `c` with `splits` k splits (the activations of n tokens
/// are a prefix of those of all of c's tokens in the device layout's per-plane order, so they are
/// rebuilt for n).
std::vector<float> emulate_split(const HostCase& c, int64_t n, int splits) {
  std::vector<float> y(static_cast<size_t>(c.m * n), 0.0f);
  if (splits == 1) {
    std::copy(c.y_emu.begin(), c.y_emu.begin() + c.m * n, y.begin());
    return y;
  }
  ThreadPool pool(2);
  std::vector<uint8_t> blocks, acts;
  (void)test::cpu_matmul(pool, c.type, c.w, 1, c.x, c.k, n, &blocks);
  EXPECT_TRUE(cuda::mm::host_activations_from_blocks(c.type, blocks.data(), c.k, n, &acts));
  EXPECT_TRUE(cuda::mm::emulate_mmq(c.type, c.w_aligned, c.k, c.m, acts.data(), n, y.data(), c.m, splits));
  return y;
}

void CudaMmq::check(const HostCase& c, int64_t n) {
  // The kernel splits k for grids that leave SMs idle (mmq_split_count): emulate the same split.
  const int splits = cuda::mm::mmq_split_count(c.type, c.m, n, c.k, cuda::context_sm_count(),
                                               cuda::context_compute_capability());
  SCOPED_TRACE(describe(c) + " run with n " + std::to_string(n) + ", " + std::to_string(splits) + " k splits");
  bool ok = false;
  const std::vector<float> y = run(c, n, &ok);
  if (!ok) return;
  const std::vector<float> emu_n = emulate_split(c, n, splits);
  const int64_t ldy = c.m + kPad;
  int64_t unwritten = 0, pad_written = 0, differ = 0, first = -1;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = c.m; j < ldy; ++j) pad_written += test::f32_bits(y[static_cast<size_t>(j + t * ldy)]) != kPoison;
    for (int64_t j = 0; j < c.m; ++j) {
      const float got = y[static_cast<size_t>(j + t * ldy)], emu = emu_n[static_cast<size_t>(j + t * c.m)];
      if (test::f32_bits(got) == kPoison) ++unwritten;
      if (test::f32_bits(got) != test::f32_bits(emu) && differ++ == 0) first = j + t * c.m;
    }
  }
  EXPECT_EQ(unwritten, 0) << "outputs never written";
  EXPECT_EQ(pad_written, 0) << "rows of the ldy padding written";
  if (differ != 0) {
    const int64_t j = first % c.m, t = first / c.m;
    ADD_FAILURE() << differ << " of " << c.m * n << " outputs differ from the emulation; first at row " << j
                  << " token " << t << " (tile row " << j % cuda::mm::kMmqBM << ", tile token "
                  << t % cuda::mm::kMmqBN << "): device " << y[static_cast<size_t>(j + t * ldy)] << " emulation "
                  << emu_n[static_cast<size_t>(first)] << " CPU " << c.y_ref[static_cast<size_t>(first)];
  }
  EXPECT_TRUE(within_bound(c, y.data(), ldy, n));
}

TEST_P(CudaMmq, is_bitwise_the_emulation_and_within_the_bound_of_the_cpu_for_awkward_shapes) {
  const TensorType type = GetParam();
  uint32_t seed = 900 + static_cast<uint32_t>(type) * 13;
  const int64_t kNs[] = {9, 17, 63, 64, 65, 130};
  for (const int64_t k : mmq_ks(type))
    for (const int64_t m : {int64_t{1}, int64_t{7}, int64_t{127}, int64_t{128}, int64_t{129}, int64_t{300}}) {
      const HostCase c = make_case(pool_, type, m, k, 130, seed++);
      for (const int64_t n : kNs) {
        check(c, n);
        if (HasFailure()) return;
      }
    }
}

TEST_P(CudaMmq, is_bitwise_the_emulation_and_within_the_bound_of_the_cpu_at_qwen_row_lengths) {
  // k = 896 and 4864 (the 0.5B hidden and ffn sizes) with an odd row count that leaves a partial
  // row tile and token counts that leave partial token tiles.
  const TensorType type = GetParam();
  uint32_t seed = 1300 + static_cast<uint32_t>(type) * 7;
  for (const int64_t k : qwen_ks(type)) {
    const HostCase c = make_case(pool_, type, 131, k, 200, seed++);
    for (const int64_t n : {int64_t{9}, int64_t{77}, int64_t{200}}) {
      check(c, n);
      if (HasFailure()) return;
    }
  }
}

TEST_P(CudaMmq, serves_model_shapes_at_512_tokens) {
  // 0.5B ffn_gate/up [896 x 4864] (K-quants: [2048 x 1024]) and a long row (18944, ffn_down).
  const TensorType type = GetParam();
  const bool kq = type_traits(type).block_size == 256;
  const HostCase a = make_case(pool_, type, kq ? 1024 : 4864, kq ? 2048 : 896, 512, 42);
  check(a, 512);
  if (HasFailure()) return;
  const HostCase b = make_case(pool_, type, 200, 18944, 80, 43);
  check(b, 80);
}

TEST_P(CudaMmq, no_mmq_gate_routes_to_the_gemm_and_mmq_is_the_default) {
  const TensorType type = GetParam();
  const int64_t m = 70, k = mmq_ks(type)[1], n = 20;
  const auto w = test::random_weights(type, m, k, 5);
  const auto x = test::random_acts(k, n, 6);
  DeviceBuffer dw(w.size()), dx(x.size() * 4), dy(static_cast<size_t>(m * n) * 4), dy2(static_cast<size_t>(m * n) * 4);
  DeviceBuffer dq(cuda::quantized_activation_bytes(type, k, n));
  dw.upload(w.data(), w.size());
  dx.upload(x.data(), x.size() * 4);
  ASSERT_TRUE(cuda::quantize_activations(type, dx.as<float>(), k, n, dq.get(), stream_));
  const cuda::mm::ActLayout L = cuda::mm::act_layout(
      type_traits(type).block_size == 256 ? cuda::mm::ActKind::Q8K : cuda::mm::ActKind::Q8, k, n);
  const int64_t rb = static_cast<int64_t>(row_bytes(type, k));
  auto download = [&](const DeviceBuffer& b) {
    std::vector<uint8_t> v(static_cast<size_t>(m * n) * 4);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    b.download(v.data(), v.size());
    return v;
  };
  ASSERT_TRUE(cuda::matmul(type, dw.get(), k, m, dx.as<float>(), dq.get(), n, dy.as<float>(), m, stream_));
  ASSERT_TRUE(cuda::mm::launch_mmq(type, dw.get(), m, rb, L, dq.get(), dy2.as<float>(), m, stream_));
  EXPECT_TRUE(test::bytes_equal(download(dy), download(dy2))) << "default: matmul() is MMQ";
  {
    test::ScopedEnv gate("MINFER_NO_MMQ", "1");
    ASSERT_TRUE(cuda::matmul(type, dw.get(), k, m, dx.as<float>(), dq.get(), n, dy.as<float>(), m, stream_));
    ASSERT_TRUE(cuda::mm::launch_gemm(type, dw.get(), m, rb, L, dq.get(), dy2.as<float>(), m, stream_));
    EXPECT_TRUE(test::bytes_equal(download(dy), download(dy2))) << "MINFER_NO_MMQ=1: matmul() is the GEMM";
  }
}

TEST_P(CudaMmq, the_three_token_tiles_give_the_same_bytes) {
  // Ragged shapes for every tile (n not a multiple of 32, 64 or 128, m not of 128, a partial
  // last stage), one with more tokens than the wide tile; the 64-token tile is checked against
  // the emulation by the tests above, so equality makes the other tiles right as well.
  const TensorType type = GetParam();
  const bool kq = type_traits(type).block_size == 256;
  struct Shape {
    int64_t m, k, n;
  };
  const Shape shapes[] = {{300, kq ? 256 * 3 : 32 * 5, 200}, {129, kq ? 256 * 37 : 32 * 100, 130}, {33, kq ? 512 : 96, 300}};
  uint64_t seed = 90;
  for (const Shape& sh : shapes) {
    const auto w = test::random_weights(type, sh.m, sh.k, seed++);
    const auto x = test::random_acts(sh.k, sh.n, seed++);
    const size_t out_bytes = static_cast<size_t>(sh.m * sh.n) * 4;
    DeviceBuffer dw(w.size()), dx(x.size() * 4), dy(out_bytes), dy2(out_bytes);
    DeviceBuffer dq(cuda::quantized_activation_bytes(type, sh.k, sh.n));
    dw.upload(w.data(), w.size());
    dx.upload(x.data(), x.size() * 4);
    ASSERT_TRUE(cuda::quantize_activations(type, dx.as<float>(), sh.k, sh.n, dq.get(), stream_));
    const cuda::mm::ActLayout L =
        cuda::mm::act_layout(kq ? cuda::mm::ActKind::Q8K : cuda::mm::ActKind::Q8, sh.k, sh.n);
    const int64_t rb = static_cast<int64_t>(row_bytes(type, sh.k));
    dy.fill(0xFF);
    ASSERT_TRUE(cuda::mm::launch_mmq(type, dw.get(), sh.m, rb, L, dq.get(), dy.as<float>(), sh.m, stream_, cuda::mm::kMmqBN));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<float> a(static_cast<size_t>(sh.m * sh.n)), b(a.size());
    dy.download(a.data(), out_bytes);
    for (const int tile : {cuda::mm::kMmqWideBN, cuda::mm::kMmqThinBN}) {
      dy2.fill(0x00);
      ASSERT_TRUE(cuda::mm::launch_mmq(type, dw.get(), sh.m, rb, L, dq.get(), dy2.as<float>(), sh.m, stream_, tile));
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      dy2.download(b.data(), out_bytes);
      size_t differ = 0, first = 0;
      for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], 4) != 0 && differ++ == 0) first = i;
      EXPECT_EQ(differ, 0u) << "tile " << tile << ", m " << sh.m << " k " << sh.k << " n " << sh.n << ": first at row "
                            << first % sh.m << " token " << first / sh.m << ": 64-token tile " << a[first] << ", this tile "
                            << b[first];
    }
  }
  cuda::clear_launch_failure();
  EXPECT_FALSE(cuda::mm::launch_mmq(type, nullptr, 1, 1, cuda::mm::ActLayout{}, nullptr, nullptr, 1, stream_, 96));
  ASSERT_NE(cuda::launch_failure(), nullptr);
  EXPECT_EQ(std::string(cuda::launch_failure()->site), "matmul_bad_args");
  cuda::clear_launch_failure();
}

TEST_P(CudaMmq, an_injected_launch_failure_names_the_mmq_site) {
  const TensorType type = GetParam();
  const std::string site = "mmq_" + std::string(type_name(type));
  test::ScopedEnv inject("MINFER_CUDA_FAIL_LAUNCH", site.c_str());
  const int64_t m = 8, k = mmq_ks(type)[0], n = 16;
  DeviceBuffer dw(row_bytes(type, k) * m), dx(static_cast<size_t>(k * n) * 4), dy(static_cast<size_t>(m * n) * 4);
  DeviceBuffer dq(cuda::quantized_activation_bytes(type, k, n));
  dw.fill(0);
  dx.fill(0);
  ASSERT_TRUE(cuda::quantize_activations(type, dx.as<float>(), k, n, dq.get(), stream_));
  cuda::clear_launch_failure();
  EXPECT_FALSE(cuda::matmul(type, dw.get(), k, m, dx.as<float>(), dq.get(), n, dy.as<float>(), m, stream_));
  ASSERT_NE(cuda::launch_failure(), nullptr);
  EXPECT_EQ(std::string(cuda::launch_failure()->site), site);
  cuda::clear_launch_failure();
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
}

// Every forced split count (MINFER_CUDA_MMQ_SPLIT = 2..8; each split at least two k stages) gives
// the emulation of that split bit for bit and stays within the CPU bound, also for a row tile
// cut short and a token tile cut short.
TEST_P(CudaMmq, split_k_is_bitwise_the_emulation_of_the_same_split) {
  const TensorType type = GetParam();
  if (cuda::context_compute_capability() < 90) GTEST_SKIP() << "split-k MMQ needs thread-block clusters (sm_90)";
  const bool kq = type_traits(type).block_size == 256;
  const HostCase c = make_case(pool_, type, 131, kq ? 256 * 20 : 32 * 70, 40, 2024 + static_cast<uint32_t>(type));
  for (int splits = 2; splits <= cuda::mm::kMmqMaxSplits; ++splits) {
    test::ScopedEnv force("MINFER_CUDA_MMQ_SPLIT", std::to_string(splits).c_str());
    ASSERT_EQ(cuda::mm::mmq_split_count(type, c.m, 40, c.k, cuda::context_sm_count(), 90), splits);
    check(c, 40);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(QuantizedTypes, CudaMmq, ::testing::ValuesIn(kMmqTypes), test::type_param_name);

// The split emulation (the kernel's arithmetic with k in ranges) stays within the CPU bound.
TEST_P(CudaMmqEmulated, split_k_arithmetic_is_within_the_accumulation_bound_of_the_cpu) {
  const TensorType type = GetParam();
  const HostCase c = make_case(pool_, type, 33, mmq_ks(type)[2], 5, 4242);
  for (const int splits : {2, 3, 8}) {
    std::vector<float> y(static_cast<size_t>(c.m * c.n));
    ASSERT_TRUE(cuda::mm::emulate_mmq(type, c.w_aligned, c.k, c.m, c.acts.data(), c.n, y.data(), c.m, splits));
    EXPECT_TRUE(within_bound(c, y.data(), c.m, c.n)) << splits << " splits";
    EXPECT_NE(y, c.y_emu) << "a split sums in another order: some bits differ";
  }
  std::vector<float> y(4);
  EXPECT_FALSE(cuda::mm::emulate_mmq(type, c.w_aligned, c.k, 1, c.acts.data(), 1, y.data(), 1, 9));
}

// The split plan: small grids on sm_90 split k up to about one block per SM; wide grids, other
// token tiles and older devices never do.
TEST(CudaMmqApi, split_count_fills_the_sms_for_small_grids_only) {
  constexpr TensorType K = TensorType::Q4_K, Q6 = TensorType::Q6_K, L = TensorType::Q4_0;
  EXPECT_EQ(cuda::mm::mmq_split_count(K, 3584, 32, 3584, 132, 90), 5);    // 7B attn_output, 32 sequences: 28 blocks
  EXPECT_EQ(cuda::mm::mmq_split_count(Q6, 3584, 32, 18944, 132, 90), 5);  // 7B ffn_down
  EXPECT_EQ(cuda::mm::mmq_split_count(K, 3584, 64, 3584, 132, 90), 3);    // 56 blocks
  EXPECT_EQ(cuda::mm::mmq_split_count(K, 18944, 32, 3584, 132, 90), 1);   // ffn_gate: 148 blocks
  EXPECT_EQ(cuda::mm::mmq_split_count(K, 3584, 32, 3584, 132, 89), 1);    // no clusters before sm_90
  EXPECT_EQ(cuda::mm::mmq_split_count(K, 3584, 512, 3584, 132, 90), 1);   // prefill: the wide tile
  EXPECT_EQ(cuda::mm::mmq_split_count(K, 128, 9, 1024, 132, 90), 2);      // 4 stages: at most 2 splits
  EXPECT_EQ(cuda::mm::mmq_split_count(K, 128, 9, 512, 132, 90), 1);       // 2 stages: no split
  EXPECT_EQ(cuda::mm::mmq_split_count(L, 128, 9, 32 * 100, 132, 90), 8);  // 25 stages, 1 block: the most
  {
    test::ScopedEnv off("MINFER_CUDA_MMQ_SPLIT", "1");
    EXPECT_EQ(cuda::mm::mmq_split_count(K, 3584, 32, 3584, 132, 90), 1);
  }
  {
    test::ScopedEnv three("MINFER_CUDA_MMQ_SPLIT", "3");
    EXPECT_EQ(cuda::mm::mmq_split_count(K, 18944, 32, 3584, 132, 90), 3);  // forced even for a wide grid
  }
}

TEST(CudaMmqApi, accepts_only_quantized_types_with_16_byte_aligned_weights) {
  alignas(16) static uint8_t w[64];
  for (const TensorType t : kMmqTypes) {
    EXPECT_TRUE(cuda::mm::mmq_accepts(t, w, 100, 9)) << type_name(t);
    EXPECT_FALSE(cuda::mm::mmq_accepts(t, w + 2, 100, 9)) << type_name(t);
    EXPECT_GT(cuda::mm::mmq_smem_bytes(t), size_t{48} << 10) << type_name(t);
    EXPECT_LE(cuda::mm::mmq_smem_bytes(t), size_t{227} << 10) << type_name(t);
  }
  for (const TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16}) EXPECT_FALSE(cuda::mm::mmq_accepts(t, w, 100, 9));
  EXPECT_FALSE(cuda::mm::mmq_accepts(TensorType::Q4_0, w, int64_t{65536} * 128, 9));
  EXPECT_EQ(cuda::mm::mmq_smem_optins().size(), 3 * std::size(kMmqTypes));  // three token tiles
}

TEST(CudaMmqApi, token_tile_follows_the_grid_size_and_type) {
  constexpr TensorType K = TensorType::Q4_K, L = TensorType::Q4_0;
  EXPECT_EQ(cuda::mm::mmq_tile_tokens(K, 18944, 512), 128);  // 7B ffn_gate at pp512: 148 x 4 blocks
  EXPECT_EQ(cuda::mm::mmq_tile_tokens(K, 3584, 512), 128);   // 7B attn_q: 28 x 4 blocks
  EXPECT_EQ(cuda::mm::mmq_tile_tokens(L, 18944, 512), 64);   // legacy types: never the wide tile
  EXPECT_EQ(cuda::mm::mmq_tile_tokens(K, 1536, 512), 64);    // 1.5B attn_q: 12 x 4 too few, 12 x 8 enough
  EXPECT_EQ(cuda::mm::mmq_tile_tokens(L, 896, 512), 32);     // 0.5B attn_q: 7 x 8 too few
  EXPECT_EQ(cuda::mm::mmq_tile_tokens(K, 18944, 127), 64);   // fewer tokens than the wide tile
  EXPECT_EQ(cuda::mm::mmq_tile_tokens(K, 18944, 32), 32);    // one thin tile holds every token
  EXPECT_EQ(cuda::mm::mmq_tile_tokens(L, 100, 9), 32);
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
