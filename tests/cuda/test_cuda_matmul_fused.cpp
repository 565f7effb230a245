// The fused matrix-vector launches (matmul.cuh matmul_fused, matmul_swiglu) for every quantized
// weight type and n in 1..8: several outputs in one launch, with bias and residual epilogues,
// bit-identical to the CPU reference product followed by the same adds; gate/up/SwiGLU in one
// launch bit-identical to the device's unfused chain (two matmul() calls and the swiglu kernel)
// and within the "transcendental" class of the CPU's silu. Outputs are poisoned first: every
// output must be written and the ldy padding must not be. Skips without a CUDA device.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda/kernels/elementwise.cuh"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.cuh"
#include "cuda_matmul_util.h"
#include "cuda_test_util.h"
#include "quant/quant.h"

namespace minfer {
namespace {

using test::DeviceBuffer;
using test::f32_bits;

constexpr uint32_t kPoison = 0xFFFFFFFFu;
constexpr int64_t kPad = 3;                // ldy = m + kPad
constexpr int64_t kSiluUlp = 4;            // "transcendental" class (docs/cuda.md)

int64_t k_for(TensorType type) {
  const bool kq = type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K;
  return kq ? 256 * 5 : 32 * 40;
}

class CudaMatmulFused : public test::CudaStreamTest<TensorType> {
 protected:
  ThreadPool pool_{default_thread_count()};
};

/// Compares a [m, n] output stored with ldy = m + kPad against want [m, n] (ldy m) bit for bit;
/// reports the first difference, unwritten outputs and written padding.
::testing::AssertionResult outputs_equal(const std::vector<float>& got, const std::vector<float>& want, int64_t m,
                                         int64_t n) {
  const int64_t ldy = m + kPad;
  int64_t bad = 0, unwritten = 0, pad = 0, first = -1;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = m; j < ldy; ++j) pad += f32_bits(got[static_cast<size_t>(j + t * ldy)]) != kPoison;
    for (int64_t j = 0; j < m; ++j) {
      const float g = got[static_cast<size_t>(j + t * ldy)], w = want[static_cast<size_t>(j + t * m)];
      if (f32_bits(g) == kPoison) ++unwritten;
      else if (f32_bits(g) != f32_bits(w) && bad++ == 0) first = j + t * m;
    }
  }
  if (bad == 0 && unwritten == 0 && pad == 0) return ::testing::AssertionSuccess();
  auto r = ::testing::AssertionFailure() << bad << " outputs differ, " << unwritten << " unwritten, " << pad
                                         << " padding outputs written";
  if (first >= 0) {
    const int64_t j = first % m, t = first / m;
    r << "; first at row " << j << " token " << t << ": got " << got[static_cast<size_t>(j + t * ldy)] << ", want "
      << want[static_cast<size_t>(first)];
  }
  return r;
}

TEST_P(CudaMatmulFused, three_outputs_in_one_launch_equal_the_cpu_products_plus_bias_and_residual) {
  const TensorType type = GetParam();
  const int64_t k = k_for(type);
  // Odd row counts: a block of 4 warps straddles the segment boundaries.
  const int64_t ms[3] = {37, 64, 9};
  for (int64_t n : {1, 2, 5, 8}) {
    SCOPED_TRACE(std::string(type_name(type)) + " n " + std::to_string(n));
    const auto x = test::random_acts(k, n, 300 + static_cast<uint32_t>(n));
    DeviceBuffer dx(x.size() * 4);
    dx.upload(x.data(), x.size() * 4);
    DeviceBuffer dq(std::max<size_t>(cuda::quantized_activation_bytes(type, k, n), 16));
    ASSERT_TRUE(cuda::quantize_activations(type, dx.as<float>(), k, n, dq.get(), stream_));

    std::vector<std::vector<float>> want(3);
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    cuda::MatmulOut outs[3];
    std::vector<uint8_t> act_buf;
    for (int s = 0; s < 3; ++s) {
      const int64_t m = ms[s];
      const auto w = test::random_weights(type, m, k, 310 + static_cast<uint32_t>(s));
      want[static_cast<size_t>(s)] = test::cpu_matmul(pool_, type, w, m, x, k, n, &act_buf);
      const auto bias = test::random_acts(m, 1, 320 + static_cast<uint32_t>(s));
      const auto res = test::random_acts(m, n, 330 + static_cast<uint32_t>(s));
      const bool with_bias = s != 1, with_res = s != 0;  // 0: bias, 1: residual, 2: both
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < m; ++j) {
          float& v = want[static_cast<size_t>(s)][static_cast<size_t>(j + t * m)];
          if (with_bias) v = v + bias[static_cast<size_t>(j)];
          if (with_res) v = res[static_cast<size_t>(j + t * m)] + v;
        }
      // Raw pointers to the owned buffers: a reference to the vector's element would dangle as
      // soon as the next emplace_back reallocates (that was a host SIGSEGV on the device).
      DeviceBuffer* dw = bufs.emplace_back(std::make_unique<DeviceBuffer>(w.size())).get();
      dw->upload(w.data(), w.size());
      DeviceBuffer* dy =
          bufs.emplace_back(std::make_unique<DeviceBuffer>(static_cast<size_t>((m + kPad) * n) * 4)).get();
      dy->fill(0xFF);
      DeviceBuffer* db = bufs.emplace_back(std::make_unique<DeviceBuffer>(bias.size() * 4)).get();
      db->upload(bias.data(), bias.size() * 4);
      DeviceBuffer* dr = bufs.emplace_back(std::make_unique<DeviceBuffer>(res.size() * 4)).get();
      dr->upload(res.data(), res.size() * 4);
      outs[s].w = dw->get();
      outs[s].m = m;
      outs[s].y = dy->as<float>();
      outs[s].ldy = m + kPad;
      outs[s].bias = with_bias ? db->as<float>() : nullptr;
      outs[s].residual = with_res ? dr->as<float>() : nullptr;
      outs[s].ldr = m;
    }
    cuda::clear_launch_failure();
    ASSERT_TRUE(cuda::matmul_fused_supported(type, k, n));
    ASSERT_TRUE(cuda::matmul_fused(type, k, outs, 3, dq.get(), n, stream_));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    for (int s = 0; s < 3; ++s) {
      std::vector<float> got(static_cast<size_t>((ms[s] + kPad) * n));
      ASSERT_EQ(cudaMemcpy(got.data(), outs[s].y, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_TRUE(outputs_equal(got, want[static_cast<size_t>(s)], ms[s], n)) << "output " << s;
    }
    // One output alone (the decode kernels stream two rows per warp then; its 9 rows end with
    // an odd one), with both the bias and the residual.
    ASSERT_EQ(cudaMemset(outs[2].y, 0xFF, static_cast<size_t>((ms[2] + kPad) * n) * 4), cudaSuccess);
    ASSERT_TRUE(cuda::matmul_fused(type, k, &outs[2], 1, dq.get(), n, stream_));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<float> got(static_cast<size_t>((ms[2] + kPad) * n));
    ASSERT_EQ(cudaMemcpy(got.data(), outs[2].y, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_TRUE(outputs_equal(got, want[2], ms[2], n)) << "output 2 alone";
  }
}

TEST_P(CudaMatmulFused, gate_up_swiglu_in_one_launch_equals_the_unfused_device_chain) {
  const TensorType type = GetParam();
  const int64_t k = k_for(type), m = 4 * 97 + 2;  // the last block holds 2 rows
  for (int64_t n : {1, 3, 8}) {
    SCOPED_TRACE(std::string(type_name(type)) + " n " + std::to_string(n));
    const auto x = test::random_acts(k, n, 400 + static_cast<uint32_t>(n));
    const auto wg = test::random_weights(type, m, k, 401), wu = test::random_weights(type, m, k, 402);
    const auto res = test::random_acts(m, n, 403);
    DeviceBuffer dx(x.size() * 4), dwg(wg.size()), dwu(wu.size()), dr(res.size() * 4);
    dx.upload(x.data(), x.size() * 4);
    dwg.upload(wg.data(), wg.size());
    dwu.upload(wu.data(), wu.size());
    dr.upload(res.data(), res.size() * 4);
    DeviceBuffer dq(std::max<size_t>(cuda::quantized_activation_bytes(type, k, n), 16));
    ASSERT_TRUE(cuda::quantize_activations(type, dx.as<float>(), k, n, dq.get(), stream_));
    // The unfused chain on the device: gate, up, swiglu (then r + h on the host: one rounding).
    DeviceBuffer dg(static_cast<size_t>(m * n) * 4), du(static_cast<size_t>(m * n) * 4);
    ASSERT_TRUE(cuda::matmul(type, dwg.get(), k, m, dx.as<float>(), dq.get(), n, dg.as<float>(), m, stream_));
    ASSERT_TRUE(cuda::matmul(type, dwu.get(), k, m, dx.as<float>(), dq.get(), n, du.as<float>(), m, stream_));
    ASSERT_TRUE(cuda::swiglu(dg.as<float>(), du.as<float>(), dg.as<float>(), m * n, stream_));
    // Fused, without and with the residual.
    DeviceBuffer dy(static_cast<size_t>((m + kPad) * n) * 4), dyr(static_cast<size_t>((m + kPad) * n) * 4);
    dy.fill(0xFF);
    dyr.fill(0xFF);
    cuda::clear_launch_failure();
    ASSERT_TRUE(cuda::matmul_swiglu(type, k, m, dwg.get(), dwu.get(), dq.get(), n, dy.as<float>(), m + kPad,
                                    nullptr, 0, stream_));
    ASSERT_TRUE(cuda::matmul_swiglu(type, k, m, dwg.get(), dwu.get(), dq.get(), n, dyr.as<float>(), m + kPad,
                                    dr.as<float>(), m, stream_));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<float> h(static_cast<size_t>(m * n)), got(static_cast<size_t>((m + kPad) * n)), got_r(got.size());
    dg.download(h.data(), h.size() * 4);
    dy.download(got.data(), got.size() * 4);
    dyr.download(got_r.data(), got_r.size() * 4);
    EXPECT_TRUE(outputs_equal(got, h, m, n)) << "no residual";
    std::vector<float> hr(h.size());
    for (size_t i = 0; i < h.size(); ++i) hr[i] = res[i] + h[i];
    EXPECT_TRUE(outputs_equal(got_r, hr, m, n)) << "with residual";
    // Against the CPU: the products are bit-identical, silu within a few ulp.
    std::vector<uint8_t> act_buf;
    const auto g = test::cpu_matmul(pool_, type, wg, m, x, k, n, &act_buf);
    const auto u = test::cpu_matmul(pool_, type, wu, m, x, k, n, &act_buf);
    int64_t worst = 0;
    for (int64_t t = 0; t < n; ++t)
      for (int64_t j = 0; j < m; ++j) {
        const size_t i = static_cast<size_t>(j + t * m);
        const float want = g[i] / (1.0f + std::exp(-g[i])) * u[i];
        const float gv = got[static_cast<size_t>(j + t * (m + kPad))];
        int32_t a, b;
        std::memcpy(&a, &gv, 4);
        std::memcpy(&b, &want, 4);
        if ((a < 0) != (b < 0)) {
          EXPECT_EQ(gv, want) << "sign differs at row " << j << " token " << t;
          continue;
        }
        worst = std::max<int64_t>(worst, std::abs(static_cast<int64_t>(a) - b));
      }
    EXPECT_LE(worst, kSiluUlp) << "largest ulp distance from the CPU's silu(g) * u";
  }
}

// The decode kernels built for more warps per SM (mmvq.cuh kMmvqHighOccBlocks, taken for short
// rows at n = 1) differ from the default build only in register allocation: the plain product
// and the SwiGLU launch give the same bits under MINFER_CUDA_MMVQ_OCC=1 (never), =2 (always) and
// the per-shape default, for a short and a long row length.
TEST_P(CudaMatmulFused, both_occupancy_builds_give_the_same_bits) {
  const TensorType type = GetParam();
  const int64_t m = 4 * 33 + 1;
  for (const int64_t k : {k_for(type), k_for(type) * 4}) {  // <= and > kMmvqHighOccMaxK
    SCOPED_TRACE(std::string(type_name(type)) + " k " + std::to_string(k));
    const auto x = test::random_acts(k, 1, 500);
    const auto wg = test::random_weights(type, m, k, 501), wu = test::random_weights(type, m, k, 502);
    DeviceBuffer dx(x.size() * 4), dwg(wg.size()), dwu(wu.size());
    dx.upload(x.data(), x.size() * 4);
    dwg.upload(wg.data(), wg.size());
    dwu.upload(wu.data(), wu.size());
    DeviceBuffer dq(std::max<size_t>(cuda::quantized_activation_bytes(type, k, 1), 16));
    ASSERT_TRUE(cuda::quantize_activations(type, dx.as<float>(), k, 1, dq.get(), stream_));
    std::vector<float> want_mm, want_glu;
    for (const char* mode : {"0", "1", "2"}) {
      SCOPED_TRACE(std::string("MINFER_CUDA_MMVQ_OCC=") + mode);
      test::ScopedEnv gate("MINFER_CUDA_MMVQ_OCC", mode);
      DeviceBuffer dy(static_cast<size_t>(m + kPad) * 4), dh(static_cast<size_t>(m + kPad) * 4);
      dy.fill(0xFF);
      dh.fill(0xFF);
      cuda::clear_launch_failure();
      ASSERT_TRUE(cuda::matmul(type, dwg.get(), k, m, dx.as<float>(), dq.get(), 1, dy.as<float>(), m + kPad, stream_));
      ASSERT_TRUE(cuda::matmul_swiglu(type, k, m, dwg.get(), dwu.get(), dq.get(), 1, dh.as<float>(), m + kPad,
                                      nullptr, 0, stream_));
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      std::vector<float> y(static_cast<size_t>(m + kPad)), h(y.size());
      dy.download(y.data(), y.size() * 4);
      dh.download(h.data(), h.size() * 4);
      if (want_mm.empty()) {  // mode 0 is the reference (checked against the CPU by CudaMatmul)
        want_mm.assign(y.begin(), y.begin() + m);
        want_glu.assign(h.begin(), h.begin() + m);
        continue;
      }
      EXPECT_TRUE(outputs_equal(y, want_mm, m, 1)) << "matmul";
      EXPECT_TRUE(outputs_equal(h, want_glu, m, 1)) << "SwiGLU";
    }
  }
}

TEST_P(CudaMatmulFused, refuses_malformed_outputs_without_launching) {
  const TensorType type = GetParam();
  const int64_t k = k_for(type);
  DeviceBuffer dq(std::max<size_t>(cuda::quantized_activation_bytes(type, k, 1), 16)), dw(row_bytes(type, k) * 4),
      dy(64);
  cuda::MatmulOut o;
  o.w = dw.get();
  o.m = 4;
  o.y = dy.as<float>();
  o.ldy = 3;  // < m
  cuda::clear_launch_failure();
  EXPECT_FALSE(cuda::matmul_fused(type, k, &o, 1, dq.get(), 1, stream_));
  ASSERT_NE(cuda::launch_failure(), nullptr);
  EXPECT_STREQ(cuda::launch_failure()->site, "matmul_fused_bad_args");
  cuda::clear_launch_failure();
  o.ldy = 4;
  {
    test::ScopedEnv gate("MINFER_NO_MMQ", "1");
    EXPECT_FALSE(cuda::matmul_fused(type, k, &o, 1, dq.get(), 9, stream_)) << "n > 8 without MMQ has no fused kernel";
  }
  cuda::clear_launch_failure();
  const cuda::MatmulOut four[4] = {o, o, o, o};
  EXPECT_FALSE(cuda::matmul_fused(type, k, four, 4, dq.get(), 1, stream_)) << "more than 3 outputs";
  cuda::clear_launch_failure();
}

// The decode kernel with one super-block per lane (mmvq_lane.cu, the default for K-quants at n = 1)
// gives the bits of the direct-load kernels (MINFER_CUDA_MMVQ_LANE=0 against =1),
// themselves checked against the CPU by CudaMatmul: for 8, 16 and 32 lanes per row (3, 14, 37 and
// 74 super-blocks: one and several rounds), a row count that leaves the last row group partial,
// three segments of one launch with a bias on the first and a residual on the second, the SwiGLU
// launch with a residual, ring depths 2, 3 and 4, grids of 1, 3 and 5 warps
// (MINFER_CUDA_MMVQ_LANE_WARPS), where every warp walks many row groups: the ring wraps and the
// SwiGLU rows waiting for silu are flushed every 32 rows, blocks of 1, 4, 8 and 16 warps, the
// round-robin deal of row groups (MINFER_CUDA_MMVQ_LANE_SPLIT=1) and the L2 prefetch of a hinted
// next product (MINFER_CUDA_L2_AHEAD_MB; cuda::set_l2_ahead_hint); the
// three segments also straight from f32 x (matmul_fused_from_f32: the kernel quantizes x). That the
// lane kernel really ran is checked too (the f32 entry reports it; the SwiGLU launch by its site).
class CudaMmvqLane : public test::CudaStreamTest<TensorType> {};

TEST_P(CudaMmvqLane, one_super_block_per_lane_gives_the_bits_of_the_direct_kernels) {
  const TensorType type = GetParam();
  const int64_t m0 = 4 * 33 + 1, m1 = 20, m2 = 7;
  for (const int64_t nb : {3, 14, 37, 74}) {
    const int64_t k = 256 * nb;
    SCOPED_TRACE(std::string(type_name(type)) + " k " + std::to_string(k));
    const auto x = test::random_acts(k, 1, 600);
    const auto w0 = test::random_weights(type, m0, k, 601), w1 = test::random_weights(type, m1, k, 602),
               w2 = test::random_weights(type, m2, k, 603), wu = test::random_weights(type, m0, k, 604);
    std::vector<float> bias(static_cast<size_t>(m0)), res(static_cast<size_t>(m0));
    for (int64_t j = 0; j < m0; ++j) {
      bias[static_cast<size_t>(j)] = 0.25f * static_cast<float>(j % 7) - 0.5f;
      res[static_cast<size_t>(j)] = 1.5f - 0.125f * static_cast<float>(j % 11);
    }
    DeviceBuffer dx(x.size() * 4), dw0(w0.size()), dw1(w1.size()), dw2(w2.size()), dwu(wu.size()),
        dbias(bias.size() * 4), dres(res.size() * 4);
    dx.upload(x.data(), x.size() * 4);
    dw0.upload(w0.data(), w0.size());
    dw1.upload(w1.data(), w1.size());
    dw2.upload(w2.data(), w2.size());
    dwu.upload(wu.data(), wu.size());
    dbias.upload(bias.data(), bias.size() * 4);
    dres.upload(res.data(), res.size() * 4);
    DeviceBuffer dq(std::max<size_t>(cuda::quantized_activation_bytes(type, k, 1), 16));
    ASSERT_TRUE(cuda::quantize_activations(type, dx.as<float>(), k, 1, dq.get(), stream_));
    std::vector<std::vector<float>> want;
    // {MINFER_CUDA_MMVQ_LANE, _STAGES, _WARPS, _BLOCK_WARPS, _SPLIT, MINFER_CUDA_L2_AHEAD_MB}: the
    // direct kernels, then the lane kernel at every ring depth, with grids of 1, 3 and 5 warps
    // (rings wrap, SwiGLU batches flush), blocks of 1, 4 and 16 warps (warps without a row group
    // still copy activations), the round-robin deal of row groups (with grids of 3 and 5 warps
    // every warp strides through the rows; a full grid deals one group per warp), and the L2
    // prefetch of a hinted next product (here the test's own weights; a hint must not change a
    // bit; it implies the round-robin deal, so the last mode is round robin on a 3-warp grid).
    const char* const modes[][6] = {
        {"0", "0", "0", "0", "0", "0"}, {"1", "2", "0", "0", "0", "0"}, {"1", "3", "0", "0", "0", "0"},
        {"1", "4", "0", "0", "0", "0"}, {"1", "3", "1", "0", "0", "0"}, {"1", "2", "3", "0", "0", "0"},
        {"1", "3", "0", "4", "0", "0"}, {"1", "2", "0", "16", "0", "0"}, {"1", "3", "5", "1", "0", "0"},
        {"1", "2", "3", "16", "0", "0"}, {"1", "2", "0", "0", "1", "0"}, {"1", "2", "3", "0", "1", "0"},
        {"1", "3", "5", "4", "1", "0"}, {"1", "2", "0", "0", "1", "16"}, {"1", "2", "3", "0", "0", "1"}};
    for (const auto& mode : modes) {
      SCOPED_TRACE(std::string("MINFER_CUDA_MMVQ_LANE=") + mode[0] + " STAGES=" + mode[1] + " WARPS=" + mode[2] +
                   " BLOCK_WARPS=" + mode[3] + " SPLIT=" + mode[4] + " L2_AHEAD_MB=" + mode[5]);
      test::ScopedEnv gate("MINFER_CUDA_MMVQ_LANE", mode[0]);
      test::ScopedEnv depth("MINFER_CUDA_MMVQ_LANE_STAGES", mode[1]);
      test::ScopedEnv grid("MINFER_CUDA_MMVQ_LANE_WARPS", mode[2]);
      test::ScopedEnv block("MINFER_CUDA_MMVQ_LANE_BLOCK_WARPS", mode[3]);
      test::ScopedEnv split("MINFER_CUDA_MMVQ_LANE_SPLIT", mode[4]);
      test::ScopedEnv ahead("MINFER_CUDA_L2_AHEAD_MB", mode[5]);
      cuda::L2AheadHint hint;  // "the next product": w1 and w2 in order (the prefix budget cuts it)
      if (std::string(mode[5]) != "0") {
        hint.w[0] = dw1.get();
        hint.bytes[0] = w1.size();
        hint.w[1] = dw2.get();
        hint.bytes[1] = w2.size();
        hint.n = 2;
      }
      cuda::set_l2_ahead_hint(hint);
      const test::ScopedL2Hint clear_hint;  // cleared on every exit of this mode
      const int64_t ms[4] = {m0, m1, m2, m0};
      auto out = [](int64_t m) { return DeviceBuffer(static_cast<size_t>(m + kPad) * 4); };
      DeviceBuffer dy[4] = {out(m0), out(m1), out(m2), out(m0)};
      for (auto& d : dy) d.fill(0xFF);
      cuda::MatmulOut o[3];
      const void* ws[3] = {dw0.get(), dw1.get(), dw2.get()};
      for (int i = 0; i < 3; ++i) {
        o[i].w = ws[i];
        o[i].m = ms[i];
        o[i].y = dy[i].as<float>();
        o[i].ldy = ms[i] + kPad;
      }
      o[0].bias = dbias.as<float>();
      o[1].residual = dres.as<float>();
      o[1].ldr = m1;
      cuda::clear_launch_failure();
      ASSERT_TRUE(cuda::matmul_fused(type, k, o, 3, dq.get(), 1, stream_));
      ASSERT_TRUE(cuda::matmul_swiglu(type, k, m0, dw0.get(), dwu.get(), dq.get(), 1, dy[3].as<float>(), m0 + kPad,
                                      dres.as<float>(), m0, stream_));
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      std::vector<std::vector<float>> got(4);
      for (int i = 0; i < 4; ++i) {
        got[static_cast<size_t>(i)].resize(static_cast<size_t>(ms[i] + kPad));
        dy[i].download(got[static_cast<size_t>(i)].data(), got[static_cast<size_t>(i)].size() * 4);
      }
      if (want.empty()) {  // the direct kernels are the reference
        bool ran = true;  // and with MINFER_CUDA_MMVQ_LANE=0 the f32 entry declines, launching nothing
        ASSERT_TRUE(cuda::matmul_fused_from_f32(type, k, o, 3, dx.as<float>(), stream_, &ran));
        EXPECT_FALSE(ran);
        for (int i = 0; i < 4; ++i)
          want.emplace_back(got[static_cast<size_t>(i)].begin(), got[static_cast<size_t>(i)].begin() + ms[i]);
        continue;
      }
      const char* what[4] = {"segment 0 (bias)", "segment 1 (residual)", "segment 2", "SwiGLU + residual"};
      for (int i = 0; i < 4; ++i)
        EXPECT_TRUE(outputs_equal(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)], ms[i], 1)) << what[i];
      if (nb <= 16) {
        // The SwiGLU launch ran on the lane kernel, not on a silent fallback: injecting a failure at
        // the lane kernel's SwiGLU launch site makes the same call fail there.
        const std::string site = std::string("mmvq_lane_glu_") + std::string(type_name(type));
        test::ScopedEnv inject("MINFER_CUDA_FAIL_LAUNCH", site.c_str());
        cuda::clear_launch_failure();
        EXPECT_FALSE(cuda::matmul_swiglu(type, k, m0, dw0.get(), dwu.get(), dq.get(), 1, dy[3].as<float>(),
                                         m0 + kPad, dres.as<float>(), m0, stream_));
        const cuda::LaunchFailure* f = cuda::launch_failure();
        ASSERT_NE(f, nullptr) << "no launch failure recorded: the SwiGLU launch was not " << site;
        EXPECT_EQ(std::string(f->site), site);
        cuda::clear_launch_failure();
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      }
      // The three segments again straight from the f32 x: each block quantizes x itself.
      for (int i = 0; i < 3; ++i) dy[i].fill(0xFF);
      bool ran = false;
      ASSERT_TRUE(cuda::matmul_fused_from_f32(type, k, o, 3, dx.as<float>(), stream_, &ran));
      EXPECT_TRUE(ran) << "the lane kernel did not take the f32 activations";
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      for (int i = 0; i < 3; ++i) {
        dy[i].download(got[static_cast<size_t>(i)].data(), got[static_cast<size_t>(i)].size() * 4);
        EXPECT_TRUE(outputs_equal(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)], ms[i], 1))
            << what[i] << ", from f32 x";
      }
    }
  }
}

// q/k/v of two K-quant types in ONE lane-kernel grid (matmul_fused_mixed,
// MINFER_CUDA_MMVQ_LANE_MIXED=1) gives every output the bits of one matmul_fused launch per type:
// two segments of the first type (bias on the first) and one of the second (with a bias), and
// one of the first with two of the second; row counts that leave the last row group of each
// type partial; 8, 16 and 32 lanes per row; the round-robin deal with the L2 prefetch; grids of 3
// warps, contiguous (a warp's run crosses from one type to the other) and round robin. The
// launch must really be the mixed one.
struct MixedPair {
  TensorType a, b;
};
class CudaMmvqLaneMixed : public test::CudaStreamTest<MixedPair> {};

TEST_P(CudaMmvqLaneMixed, two_types_in_one_grid_give_the_bits_of_one_launch_per_type) {
  const TensorType ta = GetParam().a, tb = GetParam().b;
  ASSERT_TRUE(cuda::matmul_mixed_pair(ta, tb));
  for (const int64_t nb : {3, 14, 37}) {
    const int64_t k = 256 * nb;
    for (const int n_a : {2, 1}) {
      SCOPED_TRACE(std::string(type_name(ta)) + "+" + std::string(type_name(tb)) + " k " + std::to_string(k) +
                   " outputs of the first type " + std::to_string(n_a));
      const int64_t ms[3] = {4 * 9 + 3, 2 * 5 + 1, 17};
      const TensorType ts[3] = {ta, n_a == 2 ? ta : tb, tb};
      const auto x = test::random_acts(k, 1, 700);
      std::vector<std::vector<uint8_t>> w(3);
      std::vector<std::unique_ptr<DeviceBuffer>> dw;
      for (int i = 0; i < 3; ++i) {
        w[static_cast<size_t>(i)] = test::random_weights(ts[i], ms[i], k, 701 + static_cast<uint32_t>(i));
        dw.push_back(std::make_unique<DeviceBuffer>(w[static_cast<size_t>(i)].size()));
        dw.back()->upload(w[static_cast<size_t>(i)].data(), w[static_cast<size_t>(i)].size());
      }
      std::vector<float> bias(64);
      for (size_t j = 0; j < bias.size(); ++j) bias[j] = 0.125f * static_cast<float>(j % 9) - 0.5f;
      DeviceBuffer dx(x.size() * 4), dbias(bias.size() * 4);
      dx.upload(x.data(), x.size() * 4);
      dbias.upload(bias.data(), bias.size() * 4);
      DeviceBuffer dq(cuda::quantized_activation_bytes(ta, k, 1));
      ASSERT_TRUE(cuda::quantize_activations(ta, dx.as<float>(), k, 1, dq.get(), stream_));
      auto outs_for = [&](std::vector<std::unique_ptr<DeviceBuffer>>& dy, cuda::MatmulOut (&o)[3]) {
        for (int i = 0; i < 3; ++i) {
          dy.push_back(std::make_unique<DeviceBuffer>(static_cast<size_t>(ms[i] + kPad) * 4));
          dy.back()->fill(0xFF);
        }
        for (int i = 0; i < 3; ++i) {
          o[i] = {};
          o[i].w = dw[static_cast<size_t>(i)]->get();
          o[i].m = ms[i];
          o[i].y = dy[static_cast<size_t>(i)]->as<float>();
          o[i].ldy = ms[i] + kPad;
        }
        o[0].bias = dbias.as<float>();
        o[2].bias = dbias.as<float>();
      };
      // The reference: one matmul_fused launch per type.
      std::vector<std::unique_ptr<DeviceBuffer>> ref_y;
      cuda::MatmulOut ref[3];
      outs_for(ref_y, ref);
      ASSERT_TRUE(cuda::matmul_fused(ta, k, ref, n_a, dq.get(), 1, stream_));
      ASSERT_TRUE(cuda::matmul_fused(tb, k, ref + n_a, 3 - n_a, dq.get(), 1, stream_));
      ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      std::vector<std::vector<float>> want(3);
      for (int i = 0; i < 3; ++i) {
        std::vector<float> all(static_cast<size_t>(ms[i] + kPad));
        ref_y[static_cast<size_t>(i)]->download(all.data(), all.size() * 4);
        want[static_cast<size_t>(i)].assign(all.begin(), all.begin() + ms[i]);
      }
      // {_SPLIT, MINFER_CUDA_L2_AHEAD_MB, _WARPS}
      const char* const modes[][3] = {{"0", "0", "0"}, {"1", "16", "0"}, {"0", "0", "3"}, {"1", "0", "3"}};
      for (const auto& mode : modes) {
        SCOPED_TRACE(std::string("SPLIT=") + mode[0] + " L2_AHEAD_MB=" + mode[1] + " WARPS=" + mode[2]);
        test::ScopedEnv mixed("MINFER_CUDA_MMVQ_LANE_MIXED", "1");
        test::ScopedEnv split("MINFER_CUDA_MMVQ_LANE_SPLIT", mode[0]);
        test::ScopedEnv ahead("MINFER_CUDA_L2_AHEAD_MB", mode[1]);
        test::ScopedEnv grid("MINFER_CUDA_MMVQ_LANE_WARPS", mode[2]);
        cuda::L2AheadHint hint;
        hint.w[0] = dw[0]->get();
        hint.bytes[0] = w[0].size();
        hint.n = 1;
        cuda::set_l2_ahead_hint(hint);
        const test::ScopedL2Hint clear_hint;
        std::vector<std::unique_ptr<DeviceBuffer>> dy;
        cuda::MatmulOut o[3];
        outs_for(dy, o);
        bool ran = false;
        ASSERT_TRUE(cuda::matmul_fused_mixed(ta, tb, k, o, n_a, 3, dq.get(), stream_, &ran));
        ASSERT_TRUE(ran) << "the mixed launch declined";
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        for (int i = 0; i < 3; ++i) {
          std::vector<float> got(static_cast<size_t>(ms[i] + kPad));
          dy[static_cast<size_t>(i)]->download(got.data(), got.size() * 4);
          EXPECT_TRUE(outputs_equal(got, want[static_cast<size_t>(i)], ms[i], 1)) << "output " << i;
        }
      }
      // Declined under MINFER_CUDA_MMVQ_LANE_MIXED=0, and never for a pair the kernel does not take.
      bool ran = true;
      cuda::MatmulOut o[3];
      std::vector<std::unique_ptr<DeviceBuffer>> dy;
      outs_for(dy, o);
      {
        test::ScopedEnv off("MINFER_CUDA_MMVQ_LANE_MIXED", "0");
        ASSERT_TRUE(cuda::matmul_fused_mixed(ta, tb, k, o, n_a, 3, dq.get(), stream_, &ran));
        EXPECT_FALSE(ran);
      }
      ASSERT_TRUE(cuda::matmul_fused_mixed(tb, ta, k, o, n_a, 3, dq.get(), stream_, &ran));
      EXPECT_FALSE(ran) << "the swapped pair must decline";
    }
  }
}

// The tensor-core MMVQ for 3..8 columns (mmvq_mma.cu, MINFER_CUDA_MMVQ_MMA=1 (default) and 2)
// gives the bits of the dp4a kernels (=0), themselves checked against the CPU by CudaMatmul: 3,
// 14, 37 and 74 super-blocks (lanes that wrap), three segments of one launch whose rows do not
// fill the last 16-row tile (bias on the first, residual on the second), the SwiGLU launch with a
// residual, n = 3, 5 and 8, and for Q6_K weights that are only 2-byte aligned. That the
// tensor-core kernel really ran is checked by failing its SwiGLU launch site; at n = 2 it must not.
class CudaMmvqMma : public test::CudaStreamTest<TensorType> {};

TEST_P(CudaMmvqMma, tensor_cores_give_the_bits_of_the_dp4a_kernels) {
  const TensorType type = GetParam();
  const int64_t m0 = 16 * 5 + 3, m1 = 20, m2 = 7;
  const size_t w_off = type == TensorType::Q6_K ? 2 : 0;
  for (const int64_t nb : {3, 14, 37, 74})
    for (const int64_t n : {2, 3, 5, 8}) {
      const bool tensor_cores = n >= 3;
      const int64_t k = 256 * nb;
      SCOPED_TRACE(std::string(type_name(type)) + " k " + std::to_string(k) + " n " + std::to_string(n));
      const auto x = test::random_acts(k, n, 700 + static_cast<uint32_t>(n));
      const auto w0 = test::random_weights(type, m0, k, 701), w1 = test::random_weights(type, m1, k, 702),
                 w2 = test::random_weights(type, m2, k, 703), wu = test::random_weights(type, m0, k, 704);
      std::vector<float> bias(static_cast<size_t>(m0)), res(static_cast<size_t>(m0 * n));
      for (int64_t j = 0; j < m0; ++j) bias[static_cast<size_t>(j)] = 0.25f * static_cast<float>(j % 7) - 0.5f;
      for (size_t j = 0; j < res.size(); ++j) res[j] = 1.5f - 0.125f * static_cast<float>(j % 11);
      DeviceBuffer dx(x.size() * 4), dw0(w0.size(), w_off), dw1(w1.size(), w_off), dw2(w2.size(), w_off),
          dwu(wu.size(), w_off), dbias(bias.size() * 4), dres(res.size() * 4);
      dx.upload(x.data(), x.size() * 4);
      dw0.upload(w0.data(), w0.size());
      dw1.upload(w1.data(), w1.size());
      dw2.upload(w2.data(), w2.size());
      dwu.upload(wu.data(), wu.size());
      dbias.upload(bias.data(), bias.size() * 4);
      dres.upload(res.data(), res.size() * 4);
      DeviceBuffer dq(std::max<size_t>(cuda::quantized_activation_bytes(type, k, n), 16));
      ASSERT_TRUE(cuda::quantize_activations(type, dx.as<float>(), k, n, dq.get(), stream_));
      const int64_t ms[4] = {m0, m1, m2, m0};
      std::vector<std::vector<float>> want;
      for (const char* mode : {"0", "1", "2"}) {
        SCOPED_TRACE(std::string("MINFER_CUDA_MMVQ_MMA=") + mode);
        test::ScopedEnv gate("MINFER_CUDA_MMVQ_MMA", mode);
        auto out = [n](int64_t m) { return DeviceBuffer(static_cast<size_t>((m + kPad) * n) * 4); };
        DeviceBuffer dy[4] = {out(m0), out(m1), out(m2), out(m0)};
        for (auto& d : dy) d.fill(0xFF);
        cuda::MatmulOut o[3];
        const void* ws[3] = {dw0.get(), dw1.get(), dw2.get()};
        for (int i = 0; i < 3; ++i) {
          o[i].w = ws[i];
          o[i].m = ms[i];
          o[i].y = dy[i].as<float>();
          o[i].ldy = ms[i] + kPad;
        }
        o[0].bias = dbias.as<float>();
        o[1].residual = dres.as<float>();
        o[1].ldr = m1;
        cuda::clear_launch_failure();
        ASSERT_TRUE(cuda::matmul_fused(type, k, o, 3, dq.get(), static_cast<int>(n), stream_));
        ASSERT_TRUE(cuda::matmul_swiglu(type, k, m0, dw0.get(), dwu.get(), dq.get(), static_cast<int>(n),
                                        dy[3].as<float>(), m0 + kPad, dres.as<float>(), m0, stream_));
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
        std::vector<std::vector<float>> got(4);
        for (int i = 0; i < 4; ++i) {
          got[static_cast<size_t>(i)].resize(static_cast<size_t>((ms[i] + kPad) * n));
          dy[i].download(got[static_cast<size_t>(i)].data(), got[static_cast<size_t>(i)].size() * 4);
        }
        if (want.empty()) {  // the dp4a kernels are the reference
          for (int i = 0; i < 4; ++i) {
            std::vector<float>& wv = want.emplace_back(static_cast<size_t>(ms[i] * n));
            for (int64_t t = 0; t < n; ++t)
              for (int64_t j = 0; j < ms[i]; ++j)
                wv[static_cast<size_t>(j + t * ms[i])] = got[static_cast<size_t>(i)][static_cast<size_t>(j + t * (ms[i] + kPad))];
          }
          continue;
        }
        const char* what[4] = {"segment 0 (bias)", "segment 1 (residual)", "segment 2", "SwiGLU + residual"};
        for (int i = 0; i < 4; ++i)
          EXPECT_TRUE(outputs_equal(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)], ms[i], n)) << what[i];
        // The SwiGLU launch ran on the tensor-core kernel (n >= 3; at 2 on the dp4a one): failing
        // its launch site fails the call.
        const std::string site = "mmvq_mma_glu_" + std::string(type_name(type)) + "_n" + std::to_string(n);
        test::ScopedEnv inject("MINFER_CUDA_FAIL_LAUNCH", site.c_str());
        cuda::clear_launch_failure();
        EXPECT_NE(cuda::matmul_swiglu(type, k, m0, dw0.get(), dwu.get(), dq.get(), static_cast<int>(n),
                                      dy[3].as<float>(), m0 + kPad, dres.as<float>(), m0, stream_),
                  tensor_cores);
        const cuda::LaunchFailure* f = cuda::launch_failure();
        if (!tensor_cores) {
          EXPECT_EQ(f, nullptr) << "n = 2 ran on the tensor-core kernel";
          cuda::clear_launch_failure();
          ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
          continue;
        }
        ASSERT_NE(f, nullptr) << "no launch failure recorded: the SwiGLU launch was not " << site;
        EXPECT_EQ(std::string(f->site), site);
        cuda::clear_launch_failure();
        ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
      }
    }
}

INSTANTIATE_TEST_SUITE_P(KQuantTypes, CudaMmvqMma,
                         ::testing::Values(TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         test::type_param_name);

INSTANTIATE_TEST_SUITE_P(KQuantPairs, CudaMmvqLaneMixed,
                         ::testing::Values(MixedPair{TensorType::Q4_K, TensorType::Q6_K},
                                           MixedPair{TensorType::Q5_K, TensorType::Q6_K},
                                           MixedPair{TensorType::Q4_K, TensorType::Q5_K}),
                         [](const ::testing::TestParamInfo<MixedPair>& i) {
                           return std::string(type_name(i.param.a)) + "_" + std::string(type_name(i.param.b));
                         });

INSTANTIATE_TEST_SUITE_P(KQuantTypes, CudaMmvqLane,
                         ::testing::Values(TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         test::type_param_name);

INSTANTIATE_TEST_SUITE_P(QuantizedTypes, CudaMatmulFused,
                         ::testing::Values(TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                           TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         test::type_param_name);

TEST(CudaMatmulFusedSupport, only_quantized_types_and_decode_token_counts) {
  // Pure host function.
  EXPECT_TRUE(cuda::matmul_fused_supported(TensorType::Q4_K, 256, 1));
  EXPECT_TRUE(cuda::matmul_fused_supported(TensorType::Q8_0, 32, 8));
  EXPECT_FALSE(cuda::matmul_fused_supported(TensorType::Q8_0, 32, 9));
  EXPECT_FALSE(cuda::matmul_fused_supported(TensorType::Q4_K, 128, 1));
  EXPECT_FALSE(cuda::matmul_fused_supported(TensorType::F16, 64, 1));
  EXPECT_TRUE(cuda::same_activations(TensorType::Q4_K, TensorType::Q6_K));
  EXPECT_TRUE(cuda::same_activations(TensorType::Q4_0, TensorType::Q8_0));
  EXPECT_FALSE(cuda::same_activations(TensorType::Q4_0, TensorType::Q4_K));
  EXPECT_FALSE(cuda::same_activations(TensorType::F16, TensorType::BF16));
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
