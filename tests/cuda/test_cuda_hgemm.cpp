// The f16 tensor-core prefill GEMM (hgemm.cu) and matmul_f16 (matmul.cuh), for every quantized
// weight type and awkward shapes (m and n not multiples of the 128 x 128 tile, one k stage, many):
// - within the f16 rounding bound of the exact product of the CPU's dequantized weights and
//   activations (computed in double), with the bias and residual epilogue;
// - the bound can fail: a block scale off by 2x leaves it;
// - chunking the weight rows through a small scratch gives the same bytes as one chunk;
// - matmul() at n > 8 with F16/BF16 weights (the hgemm path) is within the same kind of bound;
// - the routing switch MINFER_CUDA_PREFILL_MATMUL and MINFER_NO_MMQ; bad arguments are refused.
// Skips without a CUDA device.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/fp16.h"
#include "cuda/kernels/fault.h"
#include "cuda/kernels/hgemm.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.cuh"
#include "cuda/kernels/mmq.cuh"
#include "cuda_matmul_util.h"
#include "cuda_test_util.h"
#include "quant/quant.h"

namespace minfer {
namespace {

using test::DeviceBuffer;

constexpr uint32_t kPoison = 0xFFFFFFFFu;
constexpr int64_t kPad = 5;  // ldy = m + kPad

/// The recorded launch failure, for a message.
std::string failure_text() {
  const cuda::LaunchFailure* f = cuda::launch_failure();
  return f == nullptr ? std::string("no launch failure recorded")
                      : std::string("launch failed at ") + (f->site != nullptr ? f->site : "?") + ": " +
                            cudaGetErrorString(f->err);
}

std::vector<uint8_t> as_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

const TensorType kQuantTypes[] = {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                  TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K};

/// Bound of |gpu - exact| for one output, exact = sum_e w_e a_e in double over the CPU's
/// dequantized weights and activations:
///   - each operand rounded to nearest f16: relative 2^-11, or 2^-25 absolute below the normal
///     range, so per product 2 * 2^-11 |w a| (+ 2^-22 for the product of the two) plus
///     2^-25 (|w| + |a|);
///   - the tensor cores' f32 accumulation, one k16 product group at a time: (k / 16 + 2) steps,
///     given 2 u each (u = 2^-24) to cover an accumulator that truncates;
///   - the bias and residual adds: one rounding each of the running value.
/// `wa` = sum |w a|, `w_plus_a` = sum (|w| + |a|), `adds` = |bias| + |residual| + |exact|.
double f16_tolerance(int64_t k, double wa, double w_plus_a, double adds) {
  const double u = std::ldexp(1.0, -24);
  const double round = (2.0 * std::ldexp(1.0, -11) + std::ldexp(1.0, -22)) * wa + std::ldexp(1.0, -25) * w_plus_a;
  const double accum = 2.0 * u * (static_cast<double>(k) / 16.0 + 2.0) * wa;
  return 1.25 * (round + accum + 2.0 * u * adds) + 1e-30;
}

struct F16Case {
  TensorType type;
  int64_t m, k, n;
  std::vector<uint8_t> w;
  std::vector<float> x, bias, res;
  std::vector<float> wd, ad;  // the CPU's dequantized weights [m][k] and activations [n][k]
};

F16Case make_case(ThreadPool& pool, TensorType type, int64_t m, int64_t k, int64_t n, uint32_t seed) {
  F16Case c{type, m, k, n, {}, {}, {}, {}, {}, {}};
  c.w = test::random_weights(type, m, k, seed);
  c.x = test::random_acts(k, n, seed + 1);
  c.bias = test::random_floats(static_cast<size_t>(m), seed + 2);
  c.res = test::random_floats(static_cast<size_t>(m * n), seed + 3);
  const TypeTraits& tt = type_traits(type);
  c.wd.resize(static_cast<size_t>(m * k));
  for (int64_t j = 0; j < m; ++j)
    tt.dequantize_row(c.w.data() + static_cast<size_t>(j) * row_bytes(type, k), c.wd.data() + j * k, k);
  std::vector<uint8_t> buf;
  const cpu::QuantizedActs xq = cpu::quantize_activations(pool, buf, type, c.x.data(), k, n);
  c.ad.resize(static_cast<size_t>(n * k));
  for (int64_t t = 0; t < n; ++t)
    type_traits(xq.type).dequantize_row(xq.data + static_cast<size_t>(t) * xq.row_bytes, c.ad.data() + t * k, k);
  return c;
}

/// Every y[j + t * ldy] within f16_tolerance of the exact product (+ bias, + residual when
/// used); the ldy padding untouched.
::testing::AssertionResult within_bound(const F16Case& c, const std::vector<float>& y, int64_t ldy, bool adds) {
  int64_t bad = 0, pad = 0;
  std::string first;
  for (int64_t t = 0; t < c.n; ++t) {
    for (int64_t j = c.m; j < ldy; ++j) pad += test::f32_bits(y[static_cast<size_t>(j + t * ldy)]) != kPoison;
    for (int64_t j = 0; j < c.m; ++j) {
      double exact = 0.0, wa = 0.0, wpa = 0.0;
      const float* wr = c.wd.data() + j * c.k;
      const float* ar = c.ad.data() + t * c.k;
      for (int64_t e = 0; e < c.k; ++e) {
        exact += static_cast<double>(wr[e]) * ar[e];
        wa += std::fabs(static_cast<double>(wr[e]) * ar[e]);
        wpa += std::fabs(wr[e]) + std::fabs(ar[e]);
      }
      double add_mag = std::fabs(exact);
      if (adds) {
        const double b = c.bias[static_cast<size_t>(j)], r = c.res[static_cast<size_t>(j + t * c.m)];
        exact += b + r;
        add_mag += std::fabs(b) + std::fabs(r);
      }
      const double got = y[static_cast<size_t>(j + t * ldy)];
      const double tol = f16_tolerance(c.k, wa, wpa, add_mag);
      if (!(std::fabs(got - exact) <= tol) && bad++ == 0)
        first = "row " + std::to_string(j) + " token " + std::to_string(t) + ": got " + std::to_string(got) +
                ", exact " + std::to_string(exact) + ", bound " + std::to_string(tol);
    }
  }
  if (bad == 0 && pad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " outputs outside the bound (first: " << first << "), " << pad
                                       << " padding values written";
}

class CudaF16Gemm : public test::CudaStreamTest<TensorType> {
 protected:
  /// Runs matmul_f16 for `c` with `scratch_bytes` of scratch (0: f16_gemm_scratch_bytes) and
  /// returns y (ldy = m + kPad, poisoned first).
  std::vector<float> run(const F16Case& c, bool adds, size_t scratch_bytes, bool* ok) {
    *ok = false;
    const int64_t ldy = c.m + kPad;
    DeviceBuffer dw(c.w.size()), dx(c.x.size() * 4), dy(static_cast<size_t>(ldy * c.n) * 4);
    DeviceBuffer db(c.bias.size() * 4), dr(c.res.size() * 4);
    dw.upload(c.w.data(), c.w.size());
    dx.upload(c.x.data(), c.x.size() * 4);
    db.upload(c.bias.data(), c.bias.size() * 4);
    dr.upload(c.res.data(), c.res.size() * 4);
    dy.fill(0xFF);
    DeviceBuffer dq(std::max<size_t>(cuda::quantized_activation_bytes(c.type, c.k, c.n), 16));
    const size_t sb = scratch_bytes != 0 ? scratch_bytes : cuda::f16_gemm_scratch_bytes(c.type, c.k, c.m, c.n);
    DeviceBuffer ds(sb);
    cuda::clear_launch_failure();
    if (!cuda::quantize_activations(c.type, dx.as<float>(), c.k, c.n, dq.get(), stream_)) return {};
    cuda::MatmulOut o;
    o.w = dw.get();
    o.m = c.m;
    o.y = dy.as<float>();
    o.ldy = ldy;
    if (adds) {
      o.bias = db.as<float>();
      o.residual = dr.as<float>();
      o.ldr = c.m;
    }
    if (!cuda::matmul_f16(c.type, c.k, &o, 1, dq.get(), c.n, ds.get(), sb, stream_)) return {};
    if (cudaStreamSynchronize(stream_) != cudaSuccess) return {};
    std::vector<float> y(static_cast<size_t>(ldy * c.n));
    dy.download(y.data(), y.size() * 4);
    *ok = true;
    return y;
  }

  ThreadPool pool_{default_thread_count()};
};

std::vector<int64_t> ks_for(TensorType type) {
  if (type_traits(type).block_size == 256) return {256, 256 * 3, 256 * 19};
  return {32, 32 * 3, 32 * 140};
}

TEST_P(CudaF16Gemm, is_within_the_f16_rounding_bound_of_the_exact_product_for_awkward_shapes) {
  const TensorType type = GetParam();
  uint32_t seed = 900 + static_cast<uint32_t>(type) * 17;
  const int64_t shapes[][2] = {{1, 9}, {77, 130}, {300, 257}};  // m, n
  for (const int64_t k : ks_for(type))
    for (const auto& mn : shapes) {
      const F16Case c = make_case(pool_, type, mn[0], k, mn[1], seed++);
      for (const bool adds : {false, true}) {
        SCOPED_TRACE(std::string(type_name(type)) + " m " + std::to_string(c.m) + " k " + std::to_string(k) +
                     " n " + std::to_string(c.n) + (adds ? " with bias and residual" : ""));
        bool ok = false;
        const auto y = run(c, adds, 0, &ok);
        ASSERT_TRUE(ok) << failure_text();
        EXPECT_TRUE(within_bound(c, y, c.m + kPad, adds));
      }
    }
}

TEST_P(CudaF16Gemm, bound_is_tight_enough_to_catch_a_wrong_scale) {
  const TensorType type = GetParam();
  F16Case c = make_case(pool_, type, 16, ks_for(type)[1], 24, 4242);
  const size_t d_off = type == TensorType::Q6_K ? 208 : 0;  // the first block's half d
  uint16_t d;
  std::memcpy(&d, c.w.data() + d_off, 2);
  d = static_cast<uint16_t>(d ^ 0x0400);  // a 2x or 0.5x scale
  F16Case wrong = c;
  std::memcpy(wrong.w.data() + d_off, &d, 2);
  bool ok = false;
  const auto y = run(wrong, false, 0, &ok);
  ASSERT_TRUE(ok);
  EXPECT_FALSE(within_bound(c, y, c.m + kPad, false));
}

TEST_P(CudaF16Gemm, chunks_of_rows_give_the_same_bytes_as_one_chunk) {
  const TensorType type = GetParam();
  const int64_t k = ks_for(type)[1];
  const F16Case c = make_case(pool_, type, 333, k, 140, 77);
  test::ScopedEnv one_split("MINFER_CUDA_HGEMM_SPLIT", "1");  // the chunked run has no room for splits
  bool ok1 = false, ok2 = false;
  const auto whole = run(c, true, 0, &ok1);
  // The activations and 64 rows: six chunks (five of 64 rows, one of 13) and the 64-row tile.
  const size_t small = (static_cast<size_t>(c.n * k) * 2 + 255) / 256 * 256 + static_cast<size_t>(64 * k) * 2;
  const auto chunked = run(c, true, small, &ok2);
  ASSERT_TRUE(ok1 && ok2) << failure_text();
  EXPECT_TRUE(test::bytes_equal(as_bytes(chunked), as_bytes(whole)));
  EXPECT_TRUE(within_bound(c, whole, c.m + kPad, true));
}

TEST_P(CudaF16Gemm, every_tile_and_stage_length_gives_the_same_bytes) {
  // Without k splits every output is summed in the same k16 order whatever the tile (64 or 128
  // weight rows) or the stage length (32 or 64 elements of k): within the mma.sync build, and
  // within the sm_90a wgmma build (64 or 128 rows per m64nN product).
  const TensorType type = GetParam();
  const F16Case c = make_case(pool_, type, 300, ks_for(type)[1], 140, 5150);
  test::ScopedEnv one_split("MINFER_CUDA_HGEMM_SPLIT", "1");
  bool ok = false;
  {
    test::ScopedEnv mma("MINFER_CUDA_HGEMM_WGMMA", "0");
    const auto want = run(c, true, 0, &ok);
    ASSERT_TRUE(ok) << failure_text();
    for (const char* tile : {"64", "128"})
      for (const char* bk : {"32", "64"}) {
        SCOPED_TRACE(std::string("mma.sync tile ") + tile + " bk " + bk);
        test::ScopedEnv t("MINFER_CUDA_HGEMM_TILE", tile), b("MINFER_CUDA_HGEMM_BK", bk);
        const auto got = run(c, true, 0, &ok);
        ASSERT_TRUE(ok) << failure_text();
        EXPECT_TRUE(test::bytes_equal(as_bytes(got), as_bytes(want)));
      }
  }
  if (!cuda::mm::hgemm_wgmma_supported()) return;  // no sm_90a GPU or build: nothing more to compare
  std::vector<float> want;
  for (const char* tile : {"128", "64"}) {
    SCOPED_TRACE(std::string("wgmma tile ") + tile);
    test::ScopedEnv t("MINFER_CUDA_HGEMM_TILE", tile);
    const auto got = run(c, true, 0, &ok);
    ASSERT_TRUE(ok) << failure_text();
    EXPECT_TRUE(within_bound(c, got, c.m + kPad, true));
    if (want.empty())
      want = got;
    else
      EXPECT_TRUE(test::bytes_equal(as_bytes(got), as_bytes(want)));
  }
}

TEST(CudaF16GemmApi, the_default_route_on_sm90a_is_the_wgmma_build) {
  // With every wgmma launch site failing, a default matmul_f16 run reports a wgmma site on an
  // H100/H200 with the sm_90a build, and none with MINFER_CUDA_HGEMM_WGMMA=0.
  MINFER_REQUIRE_CUDA_DEVICE();
  if (!cuda::mm::hgemm_wgmma_supported()) GTEST_SKIP() << "needs compute capability 9.0 and an sm_90a build";
  const int64_t m = 200, k = 1024, n = 64;
  const auto w = test::random_weights(TensorType::F16, m, k, 7);
  const auto x = test::random_acts(k, n, 8);
  DeviceBuffer dw(w.size()), dx(x.size() * 4), dy(static_cast<size_t>(m * n) * 4);
  DeviceBuffer dq(cuda::quantized_activation_bytes(TensorType::F16, k, n));
  dw.upload(w.data(), w.size());
  dx.upload(x.data(), x.size() * 4);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  ASSERT_TRUE(cuda::quantize_activations(TensorType::F16, dx.as<float>(), k, n, dq.get(), stream));
  test::ScopedEnv fail("MINFER_CUDA_FAIL_LAUNCH", "hgemm_f16_wgmma,hgemm_f16_w64_wgmma");
  for (const char* on : {"1", "0"}) {
    test::ScopedEnv e("MINFER_CUDA_HGEMM_WGMMA", on);
    cuda::clear_launch_failure();
    const bool ran = cuda::matmul(TensorType::F16, dw.get(), k, m, dx.as<float>(), dq.get(), n, dy.as<float>(), m, stream);
    const cuda::LaunchFailure* f = cuda::launch_failure();
    if (std::string(on) == "1") {
      EXPECT_FALSE(ran);
      ASSERT_NE(f, nullptr);
      EXPECT_NE(std::string(f->site).find("_wgmma"), std::string::npos) << f->site;
    } else {
      EXPECT_TRUE(ran) << failure_text();
      EXPECT_EQ(f, nullptr) << f->site;
    }
  }
  cuda::clear_launch_failure();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
}

TEST_P(CudaF16Gemm, k_splits_stay_within_the_bound) {
  // Long rows cut into 2 and 3 splits (partial sums added in split order by hgemm_reduce) with
  // the bias and residual epilogue after the reduction.
  const TensorType type = GetParam();
  const int64_t k = type_traits(type).block_size == 256 ? 256 * 19 : 32 * 140;
  const F16Case c = make_case(pool_, type, 200, k, 100, 4711);
  for (const char* splits : {"2", "3"}) {
    SCOPED_TRACE(std::string("splits ") + splits);
    test::ScopedEnv e("MINFER_CUDA_HGEMM_SPLIT", splits);
    bool ok = false;
    const auto y = run(c, true, 0, &ok);
    ASSERT_TRUE(ok) << failure_text();
    EXPECT_TRUE(within_bound(c, y, c.m + kPad, true));
  }
}

INSTANTIATE_TEST_SUITE_P(QuantizedTypes, CudaF16Gemm, ::testing::ValuesIn(kQuantTypes), test::type_param_name);

// ---- the f16 FFN (gate/up interleaved with SwiGLU in the epilogue, then down) ------------------

struct FfnTypes {
  TensorType gu, down;
};

class CudaFfnF16 : public test::CudaStreamTest<FfnTypes> {};

float silu_host(float x) {
  const float e = static_cast<float>(std::exp(-static_cast<double>(x)));
  return x / (1.0f + e);
}

TEST_P(CudaFfnF16, is_the_f16_products_then_swiglu_then_the_down_product) {
  // Gate and up through matmul_f16 (one split, so their sums are the bits the interleaved GEMM
  // forms), h = f16(silu(g) * u) on the host; the down product of the f16-rounded dequantized
  // down weights and h (exact operands) is then within the f32 accumulation bound of y.
  const FfnTypes ty = GetParam();
  test::ScopedEnv one_split("MINFER_CUDA_HGEMM_SPLIT", "1");
  const int64_t k = 768, ff = 512, m = 130, n = 100;
  const auto wg = test::random_weights(ty.gu, ff, k, 11), wu = test::random_weights(ty.gu, ff, k, 12);
  const auto wd = test::random_weights(ty.down, m, ff, 13);
  // x scaled by 2^-10 keeps g, u and h = silu(g) u well inside the f16 range (|h| <= 65504: f16
  // activations beyond it become inf, as documented).
  auto x = test::random_acts(k, n, 14);
  for (float& v : x) v = std::ldexp(v, -10);
  const auto res = test::random_floats(static_cast<size_t>(m * n), 15);
  DeviceBuffer dwg(wg.size()), dwu(wu.size()), dwd(wd.size()), dx(x.size() * 4), dr(res.size() * 4);
  DeviceBuffer dg(static_cast<size_t>(ff * n) * 4), du(static_cast<size_t>(ff * n) * 4), dy(static_cast<size_t>(m * n) * 4);
  dwg.upload(wg.data(), wg.size());
  dwu.upload(wu.data(), wu.size());
  dwd.upload(wd.data(), wd.size());
  dx.upload(x.data(), x.size() * 4);
  dr.upload(res.data(), res.size() * 4);
  DeviceBuffer dq(cuda::quantized_activation_bytes(ty.gu, k, n));
  cuda::clear_launch_failure();
  ASSERT_TRUE(cuda::quantize_activations(ty.gu, dx.as<float>(), k, n, dq.get(), stream_));
  cuda::MatmulOut gu[2];
  gu[0].w = dwg.get();
  gu[1].w = dwu.get();
  gu[0].y = dg.as<float>();
  gu[1].y = du.as<float>();
  for (auto& o : gu) o.m = o.ldy = ff;
  const size_t sb = cuda::f16_gemm_scratch_bytes(ty.gu, k, ff, n);
  DeviceBuffer ds(sb);
  ASSERT_TRUE(cuda::matmul_f16(ty.gu, k, gu, 2, dq.get(), n, ds.get(), sb, stream_)) << failure_text();

  auto run_ffn = [&](std::vector<float>* y) {
    const size_t fb = cuda::ffn_f16_scratch_bytes(ty.gu, ty.down, k, ff, m, n);
    DeviceBuffer df(fb);
    dy.fill(0xFF);
    ASSERT_TRUE(cuda::ffn_f16(ty.gu, ty.down, k, ff, m, dwg.get(), dwu.get(), dwd.get(), dq.get(), n, dy.as<float>(),
                              dr.as<float>(), df.get(), fb, stream_))
        << failure_text();
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    y->resize(static_cast<size_t>(m * n));
    dy.download(y->data(), y->size() * 4);
  };
  std::vector<float> y, y_chunked;
  run_ffn(&y);
  {
    test::ScopedEnv small("MINFER_CUDA_F16_CHUNK_MB", "1");  // gate/up in two chunks of pairs
    run_ffn(&y_chunked);
  }
  EXPECT_TRUE(test::bytes_equal(as_bytes(y_chunked), as_bytes(y))) << "chunked gate/up rows";

  std::vector<float> g(static_cast<size_t>(ff * n)), u(g.size());
  dg.download(g.data(), g.size() * 4);
  du.download(u.data(), u.size() * 4);
  std::vector<double> h(g.size());
  for (size_t i = 0; i < g.size(); ++i) h[i] = fp16_to_fp32(fp32_to_fp16(silu_host(g[i]) * u[i]));
  std::vector<double> wdq(static_cast<size_t>(m * ff));
  std::vector<float> row(static_cast<size_t>(ff));
  for (int64_t j = 0; j < m; ++j) {
    type_traits(ty.down).dequantize_row(wd.data() + static_cast<size_t>(j) * row_bytes(ty.down, ff), row.data(), ff);
    for (int64_t i = 0; i < ff; ++i) wdq[static_cast<size_t>(j * ff + i)] = fp16_to_fp32(fp32_to_fp16(row[static_cast<size_t>(i)]));
  }
  // Outputs of `got` outside the bound of res + sum wdq h: the f32 accumulation of the down
  // product, the residual add, and `h_slack` sum |w h| for h values that may differ by a rounding.
  const double u24 = std::ldexp(1.0, -24);
  auto outside = [&](const std::vector<float>& got, double h_slack, std::string* first) {
    int64_t bad = 0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < m; ++j) {
        double exact = 0.0, wa = 0.0;
        for (int64_t i = 0; i < ff; ++i) {
          const double p = wdq[static_cast<size_t>(j * ff + i)] * h[static_cast<size_t>(t * ff + i)];
          exact += p;
          wa += std::fabs(p);
        }
        const double r = res[static_cast<size_t>(j + t * m)];
        const double tol = 1.25 * ((2.0 * u24 * (static_cast<double>(ff) / 16.0 + 2.0) + h_slack) * wa +
                                   2.0 * u24 * (std::fabs(exact) + std::fabs(r))) + 1e-30;
        const double v = got[static_cast<size_t>(j + t * m)];
        if (!(std::fabs(v - (exact + r)) <= tol) && bad++ == 0 && first != nullptr)
          *first = "row " + std::to_string(j) + " token " + std::to_string(t) + ": got " + std::to_string(v) +
                   ", want " + std::to_string(exact + r) + ", bound " + std::to_string(tol);
      }
    return bad;
  };
  std::string first;
  EXPECT_EQ(outside(y, 0.0, &first), 0) << first;

  // With 2 k splits the gate/up sums come from hgemm_reduce (glu mode) in another order: h may
  // move by one f16 rounding (2^-10 relative), so the bound widens by 2^-10 sum |w h|.
  std::vector<float> y2;
  {
    test::ScopedEnv two("MINFER_CUDA_HGEMM_SPLIT", "2");
    run_ffn(&y2);
  }
  EXPECT_EQ(outside(y2, std::ldexp(1.0, -10), nullptr), 0) << "two k splits (the glu reduction)";
  EXPECT_FALSE(test::bytes_equal(as_bytes(y2), as_bytes(y))) << "the split run was expected to sum in another order";
}

INSTANTIATE_TEST_SUITE_P(TypePairs, CudaFfnF16,
                         ::testing::Values(FfnTypes{TensorType::Q4_K, TensorType::Q6_K},
                                           FfnTypes{TensorType::Q4_K, TensorType::Q4_K},
                                           FfnTypes{TensorType::Q5_K, TensorType::Q6_K},
                                           FfnTypes{TensorType::Q4_0, TensorType::Q4_0},
                                           FfnTypes{TensorType::Q8_0, TensorType::Q8_0},
                                           FfnTypes{TensorType::Q5_0, TensorType::Q8_0}),
                         [](const ::testing::TestParamInfo<FfnTypes>& p) {
                           return std::string(type_name(p.param.gu)) + "_" + std::string(type_name(p.param.down));
                         });

TEST(CudaF16GemmApi, an_ffn_h_beyond_the_f16_range_is_reported_as_a_fault) {
  // x = 2000 (inside the f16 range) makes gate and up sums of ~1600 and h = silu(g) u of ~1e6:
  // beyond f16. The fault words get kFaultF16Range and a magnitude above 65504; with x = 1 they
  // stay clear.
  MINFER_REQUIRE_CUDA_DEVICE();
  const TensorType t = TensorType::Q8_0;
  const int64_t k = 256, ff = 256, m = 64, n = 16;
  const auto wg = test::random_weights(t, ff, k, 21), wu = test::random_weights(t, ff, k, 22);
  const auto wd = test::random_weights(t, m, ff, 23);
  DeviceBuffer dwg(wg.size()), dwu(wu.size()), dwd(wd.size()), dx(static_cast<size_t>(k * n) * 4);
  DeviceBuffer dy(static_cast<size_t>(m * n) * 4), dq(cuda::quantized_activation_bytes(t, k, n)), dfault(8);
  dwg.upload(wg.data(), wg.size());
  dwu.upload(wu.data(), wu.size());
  dwd.upload(wd.data(), wd.size());
  const size_t fb = cuda::ffn_f16_scratch_bytes(t, t, k, ff, m, n);
  DeviceBuffer ds(fb);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (const float xv : {1.0f, 2000.0f}) {
    SCOPED_TRACE("x = " + std::to_string(xv));
    const std::vector<float> x(static_cast<size_t>(k * n), xv);
    dx.upload(x.data(), x.size() * 4);
    dfault.fill(0);
    cuda::clear_launch_failure();
    ASSERT_TRUE(cuda::quantize_activations(t, dx.as<float>(), k, n, dq.get(), stream));
    ASSERT_TRUE(cuda::ffn_f16(t, t, k, ff, m, dwg.get(), dwu.get(), dwd.get(), dq.get(), n, dy.as<float>(), nullptr,
                              ds.get(), fb, stream, dfault.as<uint32_t>()))
        << failure_text();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    uint32_t words[2];
    dfault.download(words, sizeof words);
    if (xv == 1.0f) {
      EXPECT_EQ(words[0], 0u);
    } else {
      EXPECT_EQ(words[0], static_cast<uint32_t>(cuda::kFaultF16Range));
      EXPECT_GT(words[1], 65504u);
    }
  }
  cudaStreamDestroy(stream);
}

TEST(CudaHgemmPlan, splits_only_long_rows_and_fills_the_gpu) {
  // Pure host function: the 7B shapes at 512 tokens on 132 SMs.
  for (const int64_t k : {int64_t{896}, int64_t{1536}, int64_t{1920}})
    EXPECT_EQ(cuda::mm::hgemm_plan(512, 3584, k, 132, cuda::mm::kHgemmMaxSplits).splits, 1) << "k " << k;
  EXPECT_EQ(cuda::mm::hgemm_plan(512, 3584, 18944, 132, 1).splits, 1) << "max_splits 1";
  const cuda::mm::HgemmPlan down = cuda::mm::hgemm_plan(512, 3584, 18944, 132, cuda::mm::kHgemmMaxSplits);
  EXPECT_GT(down.splits, 1) << "112 tiles of 18944-element rows on 132 SMs";
  EXPECT_LE(down.splits, cuda::mm::kHgemmMaxSplits);
  EXPECT_GE(cuda::mm::hgemm_split_length(18944, down.splits), cuda::mm::kHgemmMinSplitK);
  const cuda::mm::HgemmPlan big = cuda::mm::hgemm_plan(4096, 18944, 3584, 132, cuda::mm::kHgemmMaxSplits);
  EXPECT_EQ(big.bw, 128);
  EXPECT_EQ(big.splits, 1) << "4736 tiles fill the GPU";
  for (const int s : {1, 2, 3, 5, 8}) {
    const int64_t len = cuda::mm::hgemm_split_length(18944, s);
    EXPECT_EQ(len % cuda::mm::kHgemmBK, 0);
    EXPECT_GE(len * s, 18944);
    EXPECT_LT(len * (s - 1), 18944) << "no empty split";
  }
}

TEST(CudaF16GemmApi, routing_follows_the_prefill_matmul_switch) {
  MINFER_REQUIRE_CUDA_DEVICE();  // f16_gemm_serves asks the context which GEMM builds can launch
  const TensorType t = TensorType::Q4_K;
  {
    test::ScopedEnv e("MINFER_CUDA_PREFILL_MATMUL", "f16");
    EXPECT_TRUE(cuda::f16_gemm_serves(t, 4096, 9));
    EXPECT_FALSE(cuda::f16_gemm_serves(t, 4096, 8)) << "decode shapes stay on the MMVQ kernels";
    EXPECT_FALSE(cuda::f16_gemm_serves(TensorType::F16, 4096, 512)) << "float weights use matmul()";
    EXPECT_FALSE(cuda::f16_gemm_serves(t, 100, 512)) << "a k the type cannot have";
    test::ScopedEnv no("MINFER_NO_MMQ", "1");
    EXPECT_FALSE(cuda::f16_gemm_serves(t, 4096, 512)) << "MINFER_NO_MMQ=1 is the f32 GEMM";
  }
  {
    test::ScopedEnv e("MINFER_CUDA_PREFILL_MATMUL", "mmq");
    EXPECT_FALSE(cuda::f16_gemm_serves(t, 4096, 512));
  }
  {
    test::ScopedEnv e("MINFER_CUDA_PREFILL_MATMUL", "");
    EXPECT_EQ(cuda::f16_gemm_serves(t, 4096, cuda::mm::kF16GemmMinTokens - 1), false);
    // sm_90: decode-sized batches stay on MMQ (split k for small grids), up to kMmqDecodeMaxTokens.
    const bool sm90 = cuda::context_compute_capability() >= 90;
    EXPECT_EQ(cuda::f16_gemm_serves(t, 4096, cuda::mm::kF16GemmMinTokens), !sm90);
    EXPECT_EQ(cuda::f16_gemm_serves(t, 4096, cuda::mm::kMmqDecodeMaxTokens), !sm90);
    EXPECT_EQ(cuda::f16_gemm_serves(t, 4096, cuda::mm::kMmqDecodeMaxTokens + 1), true);
  }
  EXPECT_EQ(cuda::f16_gemm_scratch_bytes(TensorType::F16, 4096, 100, 512), 0u);
  // 100 rows of 4096 at 512 tokens: one chunk; the f16 activations, the rows, and the partial
  // sums of at most kHgemmMaxSplits splits.
  const size_t base = size_t{512} * 4096 * 2 + size_t{100} * 4096 * 2;
  const size_t got = cuda::f16_gemm_scratch_bytes(t, 4096, 100, 512);
  EXPECT_GE(got, base);
  EXPECT_LE(got, base + 256 + cuda::mm::hgemm_partial_bytes(512, 100, cuda::mm::kHgemmMaxSplits));
  {
    test::ScopedEnv e("MINFER_CUDA_HGEMM_SPLIT", "1");
    EXPECT_EQ(cuda::f16_gemm_scratch_bytes(t, 4096, 100, 512), base) << "no splits: no partial sums";
  }
}

TEST(CudaF16GemmApi, bad_arguments_are_refused_and_launch_nothing) {
  MINFER_REQUIRE_CUDA_DEVICE();
  DeviceBuffer w(1 << 16), q(1 << 20), s(1 << 20), y(1 << 16);
  cuda::MatmulOut o;
  o.w = w.get();
  o.m = 8;
  o.y = y.as<float>();
  o.ldy = 8;
  auto refused = [&](TensorType t, int64_t k, const cuda::MatmulOut* outs, int n_outs, int64_t n, size_t sb) {
    cuda::clear_launch_failure();
    const bool r = cuda::matmul_f16(t, k, outs, n_outs, q.get(), n, s.get(), sb, nullptr);
    const cuda::LaunchFailure* f = cuda::launch_failure();
    return !r && f != nullptr && std::string(f->site) == "matmul_f16_bad_args";
  };
  EXPECT_TRUE(refused(TensorType::F16, 256, &o, 1, 16, 1 << 20)) << "float weights";
  EXPECT_TRUE(refused(TensorType::Q4_K, 100, &o, 1, 16, 1 << 20)) << "k not a multiple of 256";
  EXPECT_TRUE(refused(TensorType::Q4_K, 256, &o, 1, 0, 1 << 20)) << "no tokens";
  EXPECT_TRUE(refused(TensorType::Q4_K, 256, &o, 0, 16, 1 << 20)) << "no outputs";
  EXPECT_TRUE(refused(TensorType::Q4_K, 256, &o, 1, 16, 16 * 256 * 2)) << "scratch without room for rows";
  cuda::MatmulOut bad = o;
  bad.ldy = 7;
  EXPECT_TRUE(refused(TensorType::Q4_K, 256, &bad, 1, 16, 1 << 20)) << "ldy < m";
  cuda::clear_launch_failure();
}

// ---- F16 / BF16 weights through matmul() (n > 8: the hgemm path) --------------------------------

class CudaHgemmFloat : public test::CudaStreamTest<TensorType> {};

TEST_P(CudaHgemmFloat, matmul_of_16_bit_weights_is_within_the_accumulation_bound) {
  const TensorType type = GetParam();
  const bool bf = type == TensorType::BF16;
  for (const auto& shape : {std::vector<int64_t>{130, 1024, 300}, std::vector<int64_t>{7, 64, 9}}) {
    const int64_t m = shape[0], k = shape[1], n = shape[2];
    SCOPED_TRACE(std::string(type_name(type)) + " m " + std::to_string(m) + " k " + std::to_string(k) + " n " +
                 std::to_string(n));
    const auto w = test::random_weights(type, m, k, 31);
    const auto x = test::random_acts(k, n, 32);
    // The operands the tensor cores multiply: the weights as stored, x rounded to the weight type.
    std::vector<double> wd(static_cast<size_t>(m * k)), ad(static_cast<size_t>(n * k));
    const auto* wh = reinterpret_cast<const uint16_t*>(w.data());
    for (size_t i = 0; i < wd.size(); ++i) wd[i] = bf ? bf16_to_fp32(wh[i]) : fp16_to_fp32(wh[i]);
    for (size_t i = 0; i < ad.size(); ++i) ad[i] = bf ? bf16_to_fp32(fp32_to_bf16(x[i])) : fp16_to_fp32(fp32_to_fp16(x[i]));
    const int64_t ldy = m + kPad;
    DeviceBuffer dw(w.size()), dx(x.size() * 4), dy(static_cast<size_t>(ldy * n) * 4);
    DeviceBuffer dq(cuda::quantized_activation_bytes(type, k, n));
    dw.upload(w.data(), w.size());
    dx.upload(x.data(), x.size() * 4);
    dy.fill(0xFF);
    cuda::clear_launch_failure();
    ASSERT_TRUE(cuda::quantize_activations(type, dx.as<float>(), k, n, dq.get(), stream_));
    ASSERT_TRUE(cuda::matmul(type, dw.get(), k, m, dx.as<float>(), dq.get(), n, dy.as<float>(), ldy, stream_))
        << failure_text();
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<float> y(static_cast<size_t>(ldy * n));
    dy.download(y.data(), y.size() * 4);
    const double u = std::ldexp(1.0, -24);
    int64_t bad = 0, pad = 0;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = m; j < ldy; ++j) pad += test::f32_bits(y[static_cast<size_t>(j + t * ldy)]) != kPoison;
      for (int64_t j = 0; j < m; ++j) {
        double exact = 0.0, wa = 0.0;
        for (int64_t e = 0; e < k; ++e) {
          exact += wd[static_cast<size_t>(j * k + e)] * ad[static_cast<size_t>(t * k + e)];
          wa += std::fabs(wd[static_cast<size_t>(j * k + e)] * ad[static_cast<size_t>(t * k + e)]);
        }
        const double tol = 1.25 * 2.0 * u * (static_cast<double>(k) / 16.0 + 2.0) * wa + 1e-30;
        bad += !(std::fabs(y[static_cast<size_t>(j + t * ldy)] - exact) <= tol);
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(pad, 0);
    // The route: with every hgemm launch site failing, matmul() reports one of them.
    test::ScopedEnv fail("MINFER_CUDA_FAIL_LAUNCH",
                         bf ? "hgemm_bf16,hgemm_bf16_w64,hgemm_bf16_k64,hgemm_bf16_w64_k64,hgemm_bf16_wgmma,"
                              "hgemm_bf16_w64_wgmma"
                            : "hgemm_f16,hgemm_f16_w64,hgemm_f16_k64,hgemm_f16_w64_k64,hgemm_f16_wgmma,"
                              "hgemm_f16_w64_wgmma");
    cuda::clear_launch_failure();
    EXPECT_FALSE(cuda::matmul(type, dw.get(), k, m, dx.as<float>(), dq.get(), n, dy.as<float>(), ldy, stream_));
    const cuda::LaunchFailure* f = cuda::launch_failure();
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(std::string(f->site).rfind(bf ? "hgemm_bf16" : "hgemm_f16", 0), 0u) << f->site;
    cuda::clear_launch_failure();
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  }
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, CudaHgemmFloat, ::testing::Values(TensorType::F16, TensorType::BF16),
                         test::type_param_name);

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
