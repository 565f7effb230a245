// The SIMD activation quantizers and float helpers (src/cpu/simd/) against the references, at
// every level this CPU can run: quantize_act gives the reference quantizer's bytes and throws
// its error message for NaN / infinite elements and out-of-range scales; half / bfloat16 row
// conversions are bit-exact with core/fp16.h (f16 -> f32 checked on all 65536 halves); the
// attention decode helpers are bit-identical to the reference F32 dot product. Also: MINFER_SIMD
// parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "cpu/simd/cpu_features.h"
#include "cpu/simd/exp_ref.h"
#include "cpu/simd/kernels.h"
#include "quant/quant.h"
#include "quant/quant_ref.h"

namespace minfer {
namespace {

using cpu::simd::CpuKernels;
using cpu::simd::SimdLevel;

std::vector<SimdLevel> levels() {
  std::vector<SimdLevel> out;
  for (SimdLevel l : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512})
    if (cpu::simd::level_supported(l)) out.push_back(l);
  return out;
}

/// Rows that exercise the quantizers: ordinary, tiny (subnormal scales), huge (near the half
/// limit), all zero, one spike, exact ties of the rounding, sign-alternating maxima.
std::vector<std::vector<float>> awkward_rows(int64_t k, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::vector<float>> rows;
  for (float s : {1.0f, 1e-3f, 7e-39f, 1e-44f, 3e4f, 1.2e6f}) {
    std::vector<float> r(static_cast<size_t>(k));
    for (auto& v : r) v = nd(g) * s;
    rows.push_back(r);
  }
  rows.emplace_back(static_cast<size_t>(k), 0.0f);
  std::vector<float> spike(static_cast<size_t>(k), 0.0f);
  spike[static_cast<size_t>(k / 3)] = -2.5f;
  rows.push_back(spike);
  std::vector<float> ties(static_cast<size_t>(k));
  for (size_t i = 0; i < ties.size(); ++i) ties[i] = static_cast<float>(static_cast<int>(i % 255) - 127) + 0.5f;
  rows.push_back(ties);
  std::vector<float> alt(static_cast<size_t>(k));
  for (size_t i = 0; i < alt.size(); ++i) alt[i] = (i % 2 ? -1.0f : 1.0f) * (i % 5 == 0 ? 4.0f : 1.0f);
  rows.push_back(alt);
  std::vector<float> bits_row(static_cast<size_t>(k));  // random finite bit patterns, small exponents
  for (auto& v : bits_row) {
    uint32_t b = static_cast<uint32_t>(g());
    b = (b & 0x807FFFFFu) | ((b >> 23) % 140u) << 23;
    v = std::bit_cast<float>(b);
  }
  rows.push_back(bits_row);
  return rows;
}

std::string error_of(void (*f)(const float*, void*, int64_t), const float* x, void* dst, int64_t k) {
  try {
    f(x, dst, k);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CpuSimdQuantize, quantize_act_gives_the_reference_bytes_for_every_activation_type) {
  for (SimdLevel lv : levels()) {
    const CpuKernels& kk = cpu::simd::cpu_kernels(lv);
    for (TensorType t : cpu::simd::kKernelTypes) {
      const auto& tk = kk.get(t);
      const TypeTraits& act = type_traits(tk.vec_dot_type);
      const int64_t blk = act.block_size;
      for (int64_t k : {blk, 3 * blk, 33 * blk, (blk == 1 ? int64_t{13} : 19 * blk)}) {
        for (const auto& row : awkward_rows(k, static_cast<uint32_t>(k))) {
          const size_t nb = act.type == TensorType::F32 ? static_cast<size_t>(k) * 4 : row_bytes(act.type, k);
          std::vector<uint8_t> want(nb, 0x11), got(nb, 0x22);
          if (act.type == TensorType::F32) std::memcpy(want.data(), row.data(), nb);
          else act.quantize_row(row.data(), want.data(), k);
          tk.quantize_act(row.data(), got.data(), k);
          ASSERT_EQ(std::memcmp(want.data(), got.data(), nb), 0)
              << cpu::simd::simd_level_name(lv) << " " << type_name(act.type) << " k=" << k
              << " first value " << row[0];
        }
      }
    }
  }
}

TEST(CpuSimdQuantize, quantize_act_throws_the_reference_errors) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (SimdLevel lv : levels()) {
    const CpuKernels& kk = cpu::simd::cpu_kernels(lv);
    for (TensorType t : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q4_K}) {
      const auto& tk = kk.get(t);
      const TypeTraits& act = type_traits(tk.vec_dot_type);
      const int64_t k = 4 * act.block_size;
      std::vector<uint8_t> buf(row_bytes(act.type, k));
      for (float bad : {nan, inf, -inf, 1e7f, 3e38f}) {
        std::vector<float> x(static_cast<size_t>(k), 0.25f);
        x[static_cast<size_t>(k / 2 + 5)] = bad;
        const std::string want = error_of(act.quantize_row, x.data(), buf.data(), k);
        const std::string got = error_of(tk.quantize_act, x.data(), buf.data(), k);
        EXPECT_EQ(got, want) << cpu::simd::simd_level_name(lv) << " " << type_name(act.type) << " value " << bad;
        if (std::isnan(bad) || std::isinf(bad)) {
          EXPECT_NE(got, "(no error)");
        }
      }
    }
  }
}

TEST(CpuSimdConvert, half_to_float_is_exact_for_all_65536_halves) {
  std::vector<uint16_t> h(65536 + 5);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
  for (SimdLevel lv : levels()) {
    std::vector<float> out(h.size());
    cpu::simd::cpu_kernels(lv).f16_to_f32(h.data(), out.data(), static_cast<int64_t>(h.size()));
    for (size_t i = 0; i < h.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(fp16_to_fp32(h[i])))
          << cpu::simd::simd_level_name(lv) << " half 0x" << std::hex << h[i];
    cpu::simd::cpu_kernels(lv).bf16_to_f32(h.data(), out.data(), static_cast<int64_t>(h.size()));
    for (size_t i = 0; i < h.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(bf16_to_fp32(h[i])));
  }
}

TEST(CpuSimdConvert, float_to_half_and_bfloat16_match_fp16_h_bit_for_bit) {
  std::mt19937 g(3);
  std::vector<float> x;
  for (uint32_t b : {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u,
                     0xFFBFFFFFu, 0x477FEFFFu, 0x477FF000u, 0x33000000u, 0x33000001u, 0x387FE000u,
                     0x38800000u, 0x3F801000u, 0x3F803000u, 0x00000001u, 0x7F7FFFFFu})
    x.push_back(std::bit_cast<float>(b));
  for (int i = 0; i < 200000; ++i) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(g())));
  for (int i = 0; i < 50000; ++i)  // the half range, dense
    x.push_back(std::bit_cast<float>(0x33000000u + static_cast<uint32_t>(g() % 0x14800000u)) * (i % 2 ? -1.0f : 1.0f));
  for (SimdLevel lv : levels()) {
    const CpuKernels& kk = cpu::simd::cpu_kernels(lv);
    std::vector<uint16_t> h(x.size()), b(x.size());
    kk.f32_to_f16(x.data(), h.data(), static_cast<int64_t>(x.size()));
    kk.f32_to_bf16(x.data(), b.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(h[i], fp32_to_fp16(x[i])) << cpu::simd::simd_level_name(lv) << " f16 of 0x" << std::hex
                                          << std::bit_cast<uint32_t>(x[i]);
      ASSERT_EQ(b[i], fp32_to_bf16(x[i])) << cpu::simd::simd_level_name(lv) << " bf16 of 0x" << std::hex
                                          << std::bit_cast<uint32_t>(x[i]);
    }
  }
}

// The attention decode helpers against the reference F32 dot product (quant_ref.h) of the
// converted rows: bit-identical at every level, for head sizes on and off the vector width,
// strided rows, and skipped cells that hold NaN halves (which must not reach the output).
TEST(CpuSimdFloat, attention_helpers_are_bit_identical_to_the_reference_dot_product) {
  std::mt19937 g(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (SimdLevel lv : levels()) {
    const CpuKernels& kk = cpu::simd::cpu_kernels(lv);
    for (int64_t hd : {6, 8, 24, 40, 64, 128}) {
      for (int64_t n : {0, 1, 31, 33, 100}) {
        const int64_t stride = hd * 3 + 8;  // three heads' rows, as in a GQA cache row
        std::vector<uint16_t> kv(static_cast<size_t>(std::max<int64_t>(n, 1) * stride));
        for (uint16_t& h : kv) h = fp32_to_fp16(nd(g));
        std::vector<float> q(static_cast<size_t>(hd)), p(static_cast<size_t>(n));
        for (float& x : q) x = nd(g);
        std::vector<uint8_t> use(static_cast<size_t>(n), 1);
        for (int64_t i = 0; i < n; ++i) {
          p[static_cast<size_t>(i)] = std::fabs(nd(g));
          if (i % 7 == 3) {  // a skipped cell: weight 0, row of NaN halves
            use[static_cast<size_t>(i)] = 0;
            p[static_cast<size_t>(i)] = 0.0f;
            for (int64_t d = 0; d < hd; ++d) kv[static_cast<size_t>(i * stride + hd + d)] = 0x7E00;
          }
        }
        const uint16_t* head = kv.data() + hd;  // the second head of each row
        std::vector<float> s(static_cast<size_t>(n)), o(static_cast<size_t>(hd), -1.0f);
        kk.attn_scores_f16(hd, head, stride, n, q.data(), s.data());
        kk.attn_pv_f16(hd, head, stride, n, p.data(), use.data(), o.data());
        std::vector<float> row(static_cast<size_t>(hd)), vt(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          if (use[static_cast<size_t>(i)] == 0) continue;  // its score is not used; NaN is fine
          for (int64_t d = 0; d < hd; ++d) row[static_cast<size_t>(d)] = fp16_to_fp32(head[i * stride + d]);
          const float want = ref::vec_dot_f32(hd, row.data(), q.data());
          ASSERT_EQ(std::bit_cast<uint32_t>(s[static_cast<size_t>(i)]), std::bit_cast<uint32_t>(want))
              << cpu::simd::simd_level_name(lv) << " score hd=" << hd << " n=" << n << " i=" << i;
        }
        for (int64_t d = 0; d < hd; ++d) {
          for (int64_t i = 0; i < n; ++i)
            vt[static_cast<size_t>(i)] = use[static_cast<size_t>(i)] != 0 ? fp16_to_fp32(head[i * stride + d]) : 0.0f;
          const float want = ref::vec_dot_f32(n, vt.data(), p.data());
          ASSERT_EQ(std::bit_cast<uint32_t>(o[static_cast<size_t>(d)]), std::bit_cast<uint32_t>(want))
              << cpu::simd::simd_level_name(lv) << " pv hd=" << hd << " n=" << n << " d=" << d;
        }
      }
    }
  }
}

TEST(CpuSimdFloat, exp_shift_is_bit_identical_at_every_level_and_within_kExpTol_of_exp) {
  std::mt19937 g(21);
  std::uniform_real_distribution<float> ud(-90.0f, 1.0f);
  std::vector<float> base;
  for (int i = 0; i < 4099; ++i) base.push_back(ud(g));
  // Edges: masked cells, the underflow threshold, exact zeros, rounding ties of t * log2(e).
  for (float v : {-INFINITY, -87.33654f, -87.3365f, -87.34f, 0.0f, -0.0f, -0.5f * 0.69314718f,
                  -1e-30f, -3.4657359f, 0.5f, 88.0f})
    base.push_back(v);
  const float shift = 0.25f;
  std::vector<float> want;
  for (SimdLevel lv : levels()) {
    const CpuKernels& kk = cpu::simd::cpu_kernels(lv);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{9}, static_cast<int64_t>(base.size())}) {
      std::vector<float> x(base.begin(), base.begin() + n);
      kk.exp_shift(n, x.data(), shift);
      for (int64_t i = 0; i < n; ++i) {
        const float t = base[static_cast<size_t>(i)] - shift;
        EXPECT_EQ(std::bit_cast<uint32_t>(x[static_cast<size_t>(i)]),
                  std::bit_cast<uint32_t>(cpu::simd::exp_softmax(t)))
            << "level " << static_cast<int>(lv) << " t=" << t;
        const double e = std::exp(static_cast<double>(t));
        if (t < cpu::simd::ExpConst::kMin) {
          EXPECT_EQ(x[static_cast<size_t>(i)], 0.0f) << "t=" << t;
        } else {
          EXPECT_LE(std::fabs(x[static_cast<size_t>(i)] - e), cpu::simd::kExpTol * e) << "t=" << t;
        }
      }
    }
  }
}

TEST(CpuSimdLevels, minfer_simd_requests_are_parsed_and_capped_by_the_cpu) {
  using cpu::simd::level_for_request;
  EXPECT_EQ(level_for_request("auto", SimdLevel::kAvx512), SimdLevel::kAvx512);
  EXPECT_EQ(level_for_request("", SimdLevel::kAvx2), SimdLevel::kAvx2);
  EXPECT_EQ(level_for_request("Scalar", SimdLevel::kAvx512), SimdLevel::kScalar);
  EXPECT_EQ(level_for_request("AVX2", SimdLevel::kAvx512), SimdLevel::kAvx2);
  EXPECT_EQ(level_for_request("avx512", SimdLevel::kAvx2), SimdLevel::kAvx2);
  EXPECT_EQ(level_for_request("avx512", SimdLevel::kScalar), SimdLevel::kScalar);
  try {
    level_for_request("sse9", SimdLevel::kAvx2);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MINFER_SIMD=sse9"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(cpu::simd::level_supported(SimdLevel::kScalar));
  EXPECT_LE(static_cast<int>(cpu::simd::selected_level()), static_cast<int>(cpu::simd::max_supported_level()));
  EXPECT_EQ(cpu::simd::cpu_kernels().level, cpu::simd::selected_level());
  if (!cpu::simd::level_supported(SimdLevel::kAvx512)) {
    EXPECT_THROW(cpu::simd::cpu_kernels(SimdLevel::kAvx512), Error);
  }
}

}  // namespace
}  // namespace minfer
