// The SIMD kernel table (src/cpu/simd/) against the reference kernels of src/quant, for every
// weight type and every level this CPU can run (scalar, avx2, avx512): dot products and tiles
// are bit-identical to ref::vec_dot_* (memcmp of the f32 results), activation quantizers give
// the reference bytes and errors, the half / bfloat16 row converters are bit-exact with
// core/fp16.h, and the fused float helpers stay within their documented tolerance.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "cpu/simd/cpu_features.h"
#include "cpu/simd/kernels.h"
#include "quant/blocks.h"
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

std::string level_str(SimdLevel l) { return std::string(cpu::simd::simd_level_name(l)); }

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

/// Block sizes and the offsets of the half-precision fields (scales / mins) in a block.
struct BlockInfo {
  int64_t block = 1;
  size_t bytes = 4;
  std::vector<size_t> half_fields;
};

BlockInfo block_info(TensorType t) {
  switch (t) {
    case TensorType::F32: return {1, 4, {}};
    case TensorType::F16: return {1, 2, {}};
    case TensorType::BF16: return {1, 2, {}};
    case TensorType::Q4_0: return {32, sizeof(block_q4_0), {0}};
    case TensorType::Q4_1: return {32, sizeof(block_q4_1), {0, 2}};
    case TensorType::Q5_0: return {32, sizeof(block_q5_0), {0}};
    case TensorType::Q5_1: return {32, sizeof(block_q5_1), {0, 2}};
    case TensorType::Q8_0: return {32, sizeof(block_q8_0), {0}};
    case TensorType::Q4_K: return {256, sizeof(block_q4_K), {0, 2}};
    case TensorType::Q5_K: return {256, sizeof(block_q5_K), {0, 2}};
    case TensorType::Q6_K: return {256, sizeof(block_q6_K), {208}};
    default: return {};
  }
}

/// A finite half, sometimes an extreme one (largest, smallest subnormal, zero, -0).
uint16_t finite_half(std::mt19937& g) {
  static const uint16_t extremes[] = {0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0000, 0x8000, 0x0400, 0x3C00};
  if (g() % 8 == 0) return extremes[g() % 8];
  uint16_t h = static_cast<uint16_t>(g());
  if ((h & 0x7C00) == 0x7C00) h &= 0xBFFF;  // inf/NaN exponent -> finite
  return h;
}

enum class Fill { kQuantized, kRandomBits, kZero };

/// A weight matrix of `rows` rows of k elements of type t, row_stride bytes apart.
std::vector<uint8_t> make_weights(TensorType t, int64_t k, int64_t rows, size_t row_stride, Fill fill,
                                  uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::vector<uint8_t> out(row_stride * static_cast<size_t>(rows), 0xCD);
  const TypeTraits& tr = type_traits(t);
  const BlockInfo bi = block_info(t);
  const size_t rb = row_bytes(t, k);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = out.data() + static_cast<size_t>(r) * row_stride;
    if (fill == Fill::kZero) {
      std::memset(row, 0, rb);
    } else if (fill == Fill::kQuantized || !tr.quantized) {
      for (auto& v : x) v = nd(g) * scale;
      if (t == TensorType::F32) std::memcpy(row, x.data(), rb);
      else tr.quantize_row(x.data(), row, k);
    } else {
      for (size_t i = 0; i < rb; ++i) row[i] = static_cast<uint8_t>(g());
      for (int64_t b = 0; b < k / bi.block; ++b)
        for (size_t off : bi.half_fields) {
          const uint16_t h = finite_half(g);
          std::memcpy(row + static_cast<size_t>(b) * bi.bytes + off, &h, 2);
        }
    }
  }
  return out;
}

/// Activation rows quantized by the reference quantizer of the vec_dot_type; row r scaled by
/// scales[r % scales.size()] (0 gives an all-zero row).
std::vector<uint8_t> make_acts(TensorType act, int64_t k, int64_t rows, size_t row_stride, uint32_t seed,
                               const std::vector<float>& scales) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint8_t> out(row_stride * static_cast<size_t>(rows), 0xAB);
  std::vector<float> x(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    const float s = scales[static_cast<size_t>(r) % scales.size()];
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = nd(g) * s;
      if (i % 61 == 7) x[i] *= 9.0f;  // outliers
    }
    uint8_t* row = out.data() + static_cast<size_t>(r) * row_stride;
    if (act == TensorType::F32) std::memcpy(row, x.data(), x.size() * 4);
    else type_traits(act).quantize_row(x.data(), row, k);
  }
  return out;
}

std::vector<int64_t> row_lengths(TensorType t) {
  const int64_t b = block_info(t).block;
  if (b == 1) return {1, 7, 31, 32, 33, 100, 896, 1000};
  if (b == 32) return {32, 96, 32 * 7, 32 * 9, 896, 32 * 33, 32 * 75, 4864};
  return {256, 768, 256 * 33, 4864, 256 * 65};
}

const std::vector<float> kActScales = {1.0f, 1e-3f, 0.0f, 2e4f, 1e-30f, 3.0f};

TEST(CpuSimdDot, vec_dot_is_bit_identical_to_reference_for_every_type_and_level) {
  for (SimdLevel lv : levels()) {
    const CpuKernels& kk = cpu::simd::cpu_kernels(lv);
    EXPECT_EQ(kk.level, lv);
    for (TensorType t : cpu::simd::kKernelTypes) {
      const cpu::simd::TypeKernels& tk = kk.get(t);
      const TypeTraits& tr = type_traits(t);
      ASSERT_EQ(tk.type, t);
      ASSERT_EQ(tk.vec_dot_type, tr.vec_dot_type);
      for (int64_t k : row_lengths(t)) {
        for (Fill fill : {Fill::kQuantized, Fill::kRandomBits, Fill::kZero}) {
          const size_t wb = row_bytes(t, k), ab = row_bytes(tr.vec_dot_type, k);
          const int64_t n_act = static_cast<int64_t>(kActScales.size());
          const auto w = make_weights(t, k, 2, wb, fill, static_cast<uint32_t>(k * 7 + static_cast<int>(fill)));
          const auto a = make_acts(tr.vec_dot_type, k, n_act, ab, static_cast<uint32_t>(k), kActScales);
          for (int64_t r = 0; r < 2; ++r)
            for (int64_t s = 0; s < n_act; ++s) {
              const void* wr = w.data() + static_cast<size_t>(r) * wb;
              const void* ar = a.data() + static_cast<size_t>(s) * ab;
              const float want = tr.vec_dot(k, wr, ar);
              const float got = tk.vec_dot(k, wr, ar);
              ASSERT_EQ(bits(got), bits(want))
                  << level_str(lv) << " " << type_name(t) << " k=" << k << " fill=" << static_cast<int>(fill)
                  << " row=" << r << " act scale=" << kActScales[static_cast<size_t>(s)] << ": got " << got
                  << " want " << want;
            }
        }
      }
    }
  }
}

/// gemm_tile against the reference dot of every (row, token) pair, with strides wider than a row.
void check_tile(const CpuKernels& kk, TensorType t, int64_t k, int64_t nr, int64_t nc, Fill fill, uint32_t seed) {
  const TypeTraits& tr = type_traits(t);
  const size_t wb = row_bytes(t, k) + 64, ab = row_bytes(tr.vec_dot_type, k) + 36;
  const int64_t out_stride = nr + 3;
  const auto w = make_weights(t, k, nr, wb, fill, seed);
  const auto a = make_acts(tr.vec_dot_type, k, nc, ab, seed + 1, kActScales);
  std::vector<float> out(static_cast<size_t>(out_stride * nc), -7.0f);
  kk.get(t).gemm_tile(k, w.data(), wb, nr, a.data(), ab, nc, out.data(), out_stride);
  for (int64_t tok = 0; tok < nc; ++tok)
    for (int64_t j = 0; j < out_stride; ++j) {
      const float got = out[static_cast<size_t>(j + tok * out_stride)];
      if (j >= nr) {
        ASSERT_EQ(got, -7.0f) << "gemm_tile wrote outside the tile at row " << j << " token " << tok;
        continue;
      }
      const float want = tr.vec_dot(k, w.data() + static_cast<size_t>(j) * wb, a.data() + static_cast<size_t>(tok) * ab);
      ASSERT_EQ(bits(got), bits(want)) << level_str(kk.level) << " " << type_name(t) << " k=" << k << " tile "
                                       << nr << "x" << nc << " at row " << j << " token " << tok << ": got "
                                       << got << " want " << want;
    }
}

// {150, 3}: more rows than one 16 KiB block of the row-at-a-time paths at the middle row lengths
// (e.g. 68 rows of Q8_0 k = 224), so blocks end inside the tile.
TEST(CpuSimdGemm, gemm_tile_is_bit_identical_to_reference_for_awkward_tile_shapes) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {5, 2}, {7, 3}, {17, 5}, {33, 17}, {9, 33}, {20, 40}, {150, 3}};
  for (SimdLevel lv : levels()) {
    const CpuKernels& kk = cpu::simd::cpu_kernels(lv);
    for (TensorType t : cpu::simd::kKernelTypes) {
      const auto ks = row_lengths(t);
      uint32_t seed = 1;
      for (auto [nr, nc] : shapes)
        for (int64_t k : {ks.front(), ks[2], ks[3]}) {
          SCOPED_TRACE(level_str(lv) + " " + std::string(type_name(t)));
          check_tile(kk, t, k, nr, nc, seed % 3 == 0 ? Fill::kRandomBits : Fill::kQuantized, seed);
          ++seed;
          if (HasFatalFailure()) return;
        }
    }
  }
}

TEST(CpuSimdGemm, gemm_tile_handles_all_zero_weights_and_long_rows) {
  for (SimdLevel lv : levels()) {
    const CpuKernels& kk = cpu::simd::cpu_kernels(lv);
    for (TensorType t : cpu::simd::kKernelTypes) {
      SCOPED_TRACE(level_str(lv));
      check_tile(kk, t, row_lengths(t).back(), 6, 19, Fill::kZero, 5);
      check_tile(kk, t, row_lengths(t).back(), 6, 19, Fill::kRandomBits, 6);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(CpuSimdGemm, empty_tiles_write_nothing) {
  for (SimdLevel lv : levels())
    for (TensorType t : cpu::simd::kKernelTypes) {
      float out = 5.0f;
      cpu::simd::cpu_kernels(lv).get(t).gemm_tile(0, nullptr, 0, 0, nullptr, 0, 0, &out, 0);
      cpu::simd::cpu_kernels(lv).get(t).gemm_tile(256, nullptr, 0, 0, nullptr, 0, 4, &out, 0);
      EXPECT_EQ(out, 5.0f);
    }
}

/// gemm_packed on the packed form of `rows` rows, over the row range [row0, row0 + nr), against
/// the reference dot of every (row, token) pair.
void check_packed(const CpuKernels& kk, TensorType t, int64_t k, int64_t rows, int64_t row0, int64_t nr, int64_t nc,
                  Fill fill, uint32_t seed) {
  const auto& tk = kk.get(t);
  const TypeTraits& tr = type_traits(t);
  const size_t wb = row_bytes(t, k) + 6, ab = row_bytes(tr.vec_dot_type, k) + 2;
  const auto w = make_weights(t, k, rows, wb, fill, seed);
  const auto a = make_acts(tr.vec_dot_type, k, nc, ab, seed + 1, kActScales);
  std::vector<uint8_t> packed(tk.packed_bytes(k, rows) + 1);
  packed.back() = 0x5A;
  tk.pack(k, w.data(), wb, rows, packed.data());
  ASSERT_EQ(packed.back(), 0x5A) << "pack wrote past packed_bytes";
  // Chunked packing (whole groups at a time, as the CPU backend does) gives the same bytes.
  std::vector<uint8_t> chunked(packed.size(), 0xA5);
  const int64_t chunk = tk.pack_rows * 2;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk)
    tk.pack(k, w.data() + static_cast<size_t>(r0) * wb, wb, std::min(chunk, rows - r0),
            chunked.data() + tk.packed_bytes(k, r0));
  chunked.back() = 0x5A;
  ASSERT_EQ(chunked, packed) << level_str(kk.level) << " " << type_name(t) << " rows=" << rows;
  const int64_t out_stride = nr + 1;
  std::vector<float> out(static_cast<size_t>(out_stride * nc), -7.0f);
  tk.gemm_packed(k, packed.data(), rows, row0, nr, a.data(), ab, nc, out.data(), out_stride);
  for (int64_t tok = 0; tok < nc; ++tok)
    for (int64_t i = 0; i < out_stride; ++i) {
      const float got = out[static_cast<size_t>(i + tok * out_stride)];
      if (i >= nr) {
        ASSERT_EQ(got, -7.0f) << "gemm_packed wrote outside the range";
        continue;
      }
      const int64_t j = row0 + i;
      const float want = tr.vec_dot(k, w.data() + static_cast<size_t>(j) * wb, a.data() + static_cast<size_t>(tok) * ab);
      ASSERT_EQ(bits(got), bits(want)) << level_str(kk.level) << " " << type_name(t) << " k=" << k << " rows=" << rows
                                       << " range [" << row0 << ", " << row0 + nr << ") at row " << j << " token "
                                       << tok << " of " << nc << ": got " << got << " want " << want;
    }
}

TEST(CpuSimdPacked, gemm_packed_is_bit_identical_to_reference_for_every_packed_type) {
  for (SimdLevel lv : levels()) {
    const CpuKernels& kk = cpu::simd::cpu_kernels(lv);
    int n_packed = 0;
    for (TensorType t : cpu::simd::kKernelTypes) {
      const auto& tk = kk.get(t);
      if (tk.pack == nullptr) {
        EXPECT_EQ(tk.packed_bytes, nullptr);
        EXPECT_EQ(tk.gemm_packed, nullptr);
        continue;
      }
      ++n_packed;
      const int64_t pr = tk.pack_rows;
      ASSERT_GT(pr, 0);
      EXPECT_EQ(tk.packed_bytes(row_lengths(t)[0], pr), row_bytes(t, row_lengths(t)[0]) * static_cast<size_t>(pr))
          << "the packed form of whole groups is as large as the rows";
      uint32_t seed = 11;
      const auto ks = row_lengths(t);
      for (int64_t k : {ks[0], ks[2], ks[3], ks.back()}) {
        SCOPED_TRACE(level_str(lv) + " " + std::string(type_name(t)));
        check_packed(kk, t, k, 2 * pr + 3, 0, 2 * pr + 3, 1, Fill::kQuantized, seed++);
        check_packed(kk, t, k, 2 * pr + 3, 1, 2 * pr, 3, Fill::kRandomBits, seed++);
        check_packed(kk, t, k, 3 * pr, pr, pr, 6, Fill::kQuantized, seed++);
        check_packed(kk, t, k, 5, 2, 3, 2, Fill::kZero, seed++);
        // 16 tokens and more take the tiled kernel on rows rebuilt from the packed form.
        if (k <= 4864) check_packed(kk, t, k, 2 * pr + 3, 3, 2 * pr - 1, 17, Fill::kRandomBits, seed++);
        if (HasFatalFailure()) return;
      }
    }
    // avx512 packs Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K; avx2 all but Q8_0; scalar none.
    const int want = lv == SimdLevel::kAvx512 ? 8 : lv == SimdLevel::kAvx2 ? 7 : 0;
    EXPECT_EQ(n_packed, want) << level_str(lv);
  }
}

TEST(CpuSimdErrors, gemm_packed_rejects_row_ranges_outside_the_packed_rows) {
  for (SimdLevel lv : levels())
    for (TensorType t : cpu::simd::kKernelTypes) {
      const auto& tk = cpu::simd::cpu_kernels(lv).get(t);
      if (tk.pack == nullptr) continue;
      std::vector<uint8_t> packed(tk.packed_bytes(256, 20));
      uint8_t act[1024] = {};
      float out[64];
      EXPECT_THROW(tk.gemm_packed(256, packed.data(), 20, 10, 11, act, 300, 1, out, 11), Error);
      EXPECT_THROW(tk.gemm_packed(256, packed.data(), 20, -1, 2, act, 300, 1, out, 2), Error);
      EXPECT_THROW(tk.packed_bytes(100, 20), Error);
      EXPECT_THROW(tk.packed_bytes(256, -1), Error);
    }
}

TEST(CpuSimdErrors, bad_row_lengths_and_strides_throw_errors_naming_the_value) {
  for (SimdLevel lv : levels()) {
    const CpuKernels& kk = cpu::simd::cpu_kernels(lv);
    uint8_t buf[4096] = {};
    float out[64];
    for (TensorType t : {TensorType::Q4_0, TensorType::Q6_K}) {
      const auto& tk = kk.get(t);
      try {
        tk.vec_dot(33 * 8, buf, buf);
        ADD_FAILURE() << "no error for k = 264";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("264"), std::string::npos) << e.what();
      }
      EXPECT_THROW(tk.vec_dot(-256, buf, buf), Error);
      EXPECT_THROW(tk.gemm_tile(256, buf, 10, 2, buf, 4096, 1, out, 2), Error);   // w stride < row
      EXPECT_THROW(tk.gemm_tile(256, buf, 1024, 1, buf, 10, 2, out, 2), Error);   // a stride < row
      EXPECT_THROW(tk.gemm_tile(256, buf, 1024, 4, buf, 1024, 2, out, 3), Error); // out stride < nr
      EXPECT_THROW(tk.gemm_tile(256, buf, 1024, -1, buf, 1024, 2, out, 3), Error);
      EXPECT_THROW(tk.quantize_act(reinterpret_cast<const float*>(buf), buf, 100), Error);
    }
    EXPECT_THROW(kk.get(TensorType::Q2_K), Error);
    EXPECT_EQ(kk.find(TensorType::IQ4_NL), nullptr);
  }
}

}  // namespace
}  // namespace minfer
