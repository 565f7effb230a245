// Block layout (elements per block, bytes per block) of every tensor type ggml defines, so the
// GGUF reader can size any tensor, including types minfer cannot compute with.
//
// Source of the facts: llama.cpp 80fb11ac, ggml/src/ggml.c `type_traits[]` (blck_size,
// type_size = sizeof(block_*)) and ggml/src/ggml-common.h (the block structs and their
// static_asserts; QK_K = 256). The byte counts below are written as the sum of each struct's
// fields so they can be checked against ggml-common.h line by line.
#include <array>

#include "quant/quant.h"

namespace minfer {
namespace {

constexpr int64_t kQK_K = 256;  // ggml-common.h QK_K: elements per K-quant super-block
constexpr size_t kHalf = 2;     // sizeof(ggml_half)

struct Layout {
  TensorType type;
  int64_t block_size;
  size_t block_bytes;
};

constexpr std::array kLayouts = {
    // Plain element types: one element per "block".
    Layout{TensorType::F32, 1, 4},
    Layout{TensorType::F16, 1, 2},
    Layout{TensorType::BF16, 1, 2},
    Layout{TensorType::F64, 1, 8},
    Layout{TensorType::I8, 1, 1},
    Layout{TensorType::I16, 1, 2},
    Layout{TensorType::I32, 1, 4},
    Layout{TensorType::I64, 1, 8},
    // Legacy quants (ggml-common.h block_q4_0 ... block_q8_1).
    Layout{TensorType::Q4_0, 32, kHalf + 32 / 2},             // d, qs[16]
    Layout{TensorType::Q4_1, 32, 2 * kHalf + 32 / 2},         // d, m, qs[16]
    Layout{TensorType::Q5_0, 32, kHalf + 4 + 32 / 2},         // d, qh[4], qs[16]
    Layout{TensorType::Q5_1, 32, 2 * kHalf + 4 + 32 / 2},     // d, m, qh[4], qs[16]
    Layout{TensorType::Q8_0, 32, kHalf + 32},                 // d, qs[32]
    Layout{TensorType::Q8_1, 32, 2 * kHalf + 32},             // d, s, qs[32]
    Layout{TensorType::Q1_0, 128, kHalf + 128 / 8},           // d, qs[16]
    Layout{TensorType::Q2_0, 64, kHalf + 64 / 4},             // d, qs[16]
    // Microscaling FP4 (block_mxfp4: E8M0 scale + 16 bytes; block_nvfp4: 4 UE4M3 scales + 32).
    Layout{TensorType::MXFP4, 32, 1 + 32 / 2},
    Layout{TensorType::NVFP4, 64, 64 / 16 + 64 / 2},
    // K-quants: super-blocks of QK_K elements.
    Layout{TensorType::Q2_K, kQK_K, 2 * kHalf + kQK_K / 16 + kQK_K / 4},  // d, dmin, scales, qs
    Layout{TensorType::Q3_K, kQK_K, kHalf + kQK_K / 4 + kQK_K / 8 + 12},  // d, qs, hmask, scales
    Layout{TensorType::Q4_K, kQK_K, 2 * kHalf + 12 + kQK_K / 2},          // d, dmin, scales, qs
    Layout{TensorType::Q5_K, kQK_K, 2 * kHalf + 12 + kQK_K / 2 + kQK_K / 8},
    Layout{TensorType::Q6_K, kQK_K, kHalf + kQK_K / 16 + 3 * kQK_K / 4},  // d, scales, ql+qh
    Layout{TensorType::Q8_K, kQK_K, 4 + kQK_K + kQK_K / 16 * 2},          // f32 d, qs, bsums
    // IQ types (ggml-common.h block_iq*).
    Layout{TensorType::IQ2_XXS, kQK_K, kHalf + kQK_K / 8 * 2},
    Layout{TensorType::IQ2_XS, kQK_K, kHalf + kQK_K / 8 * 2 + kQK_K / 32},
    Layout{TensorType::IQ2_S, kQK_K, kHalf + kQK_K / 4 + kQK_K / 16},
    Layout{TensorType::IQ3_XXS, kQK_K, kHalf + 3 * (kQK_K / 8)},
    Layout{TensorType::IQ3_S, kQK_K, kHalf + 13 * (kQK_K / 32) + kQK_K / 64},
    Layout{TensorType::IQ1_S, kQK_K, kHalf + kQK_K / 8 + kQK_K / 16},
    Layout{TensorType::IQ1_M, kQK_K, kQK_K / 8 + kQK_K / 16 + kQK_K / 32},
    Layout{TensorType::IQ4_NL, 32, kHalf + 32 / 2},
    Layout{TensorType::IQ4_XS, kQK_K, kHalf + 2 + kQK_K / 64 + kQK_K / 2},
    // Ternary quants (block_tq1_0: 5 trits per byte + 4 per byte; block_tq2_0: 2 bits each).
    Layout{TensorType::TQ1_0, kQK_K, kHalf + kQK_K / 64 + (kQK_K - 4 * kQK_K / 64) / 5},
    Layout{TensorType::TQ2_0, kQK_K, kHalf + kQK_K / 4},
};

}  // namespace

bool type_block_layout(TensorType type, int64_t* block_size, size_t* block_bytes) {
  for (const Layout& l : kLayouts) {
    if (l.type == type) {
      if (block_size) *block_size = l.block_size;
      if (block_bytes) *block_bytes = l.block_bytes;
      return true;
    }
  }
  return false;
}

}  // namespace minfer
