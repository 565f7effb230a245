// Block structs of every tensor type minfer computes with: the one place that knows how a block
// is laid out. Everything else (reference kernels, SIMD kernels, CUDA kernels, the GGUF loader)
// asks this header.
//
// Layouts are ggml's, as stored in GGUF files (ggml/src/ggml-common.h at llama.cpp 80fb11ac:
// block_q4_0 ... block_q8_K; the table in ../shared/fixtures/quant/README.md). All fields are
// little-endian; `uint16_t` fields named d/m/s/dmin hold IEEE binary16 ("half") bit patterns,
// converted with core/fp16.h. Every struct has alignment 1 or 2 (4 for block_q8_K) and no
// padding, which the static_asserts below check, so an array of blocks can be read in place from
// a (suitably aligned) mapped file.
#pragma once

#include <cstddef>
#include <cstdint>

namespace minfer {

/// Elements per block of the legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1).
/// ggml-common.h QK4_0 = QK4_1 = QK5_0 = QK5_1 = QK8_0 = QK8_1 = 32.
inline constexpr int kQK = 32;
/// Elements per super-block of the K-quants (Q4_K, Q5_K, Q6_K, Q8_K). ggml-common.h QK_K = 256.
inline constexpr int kQKK = 256;
/// Bytes of the packed 6-bit scales and mins of Q4_K / Q5_K. ggml-common.h K_SCALE_SIZE = 12.
inline constexpr int kKScaleSize = 12;

/// Q4_0 (18 bytes, 32 elements): x[j] = d * ((qs[j] & 0xF) - 8), x[j+16] = d * ((qs[j] >> 4) - 8)
/// for j in [0, 16). ggml-common.h block_q4_0.
struct block_q4_0 {
  uint16_t d;               ///< scale, half
  uint8_t qs[kQK / 2];      ///< element j in the low nibble of qs[j], element j+16 in the high
};
static_assert(sizeof(block_q4_0) == 18 && alignof(block_q4_0) == 2);

/// Q4_1 (20 bytes, 32 elements): x = d * q + m, q in [0, 15], same nibble order as Q4_0.
/// ggml-common.h block_q4_1.
struct block_q4_1 {
  uint16_t d;               ///< scale, half
  uint16_t m;               ///< minimum (offset), half
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(block_q4_1) == 20 && alignof(block_q4_1) == 2);

/// Q5_0 (22 bytes, 32 elements): x = d * (q - 16), q in [0, 31]. The low 4 bits of q are stored
/// as in Q4_0; bit 4 of element j is bit j of the little-endian u32 in qh.
/// ggml-common.h block_q5_0.
struct block_q5_0 {
  uint16_t d;               ///< scale, half
  uint8_t qh[4];            ///< bit 4 of each element, element j at bit j (u32 little-endian)
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(block_q5_0) == 22 && alignof(block_q5_0) == 2);

/// Q5_1 (24 bytes, 32 elements): x = d * q + m, q in [0, 31], bits stored as in Q5_0.
/// ggml-common.h block_q5_1.
struct block_q5_1 {
  uint16_t d;               ///< scale, half
  uint16_t m;               ///< minimum (offset), half
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
static_assert(sizeof(block_q5_1) == 24 && alignof(block_q5_1) == 2);

/// Q8_0 (34 bytes, 32 elements): x[j] = d * qs[j]. ggml-common.h block_q8_0.
struct block_q8_0 {
  uint16_t d;               ///< scale, half
  int8_t qs[kQK];
};
static_assert(sizeof(block_q8_0) == 34 && alignof(block_q8_0) == 2);

/// Q8_1 (36 bytes, 32 elements), an activation type: x[j] = d * qs[j]; s = d * sum(qs) rounded
/// to half, kept for kernels that want the block sum without adding up qs.
/// ggml-common.h block_q8_1.
struct block_q8_1 {
  uint16_t d;               ///< scale, half
  uint16_t s;               ///< half(d * sum of qs), d as a float before rounding to half
  int8_t qs[kQK];
};
static_assert(sizeof(block_q8_1) == 36 && alignof(block_q8_1) == 2);

/// Q4_K (144 bytes, 256 elements = 8 sub-blocks of 32):
/// x = (d * sc[j]) * q - (dmin * m[j]) for element e in sub-block j = e / 32, q in [0, 15].
/// sc[j], m[j] are 6-bit and packed in `scales` (see k4_scale_min). The nibbles: sub-blocks 2p
/// and 2p+1 share qs[32p .. 32p+31], sub-block 2p in the low nibbles, 2p+1 in the high ones.
/// ggml-common.h block_q4_K; element order of ggml-quants.c dequantize_row_q4_K.
struct block_q4_K {
  uint16_t d;                      ///< super-block scale of the sub-block scales, half
  uint16_t dmin;                   ///< super-block scale of the sub-block mins, half
  uint8_t scales[kKScaleSize];     ///< 8 x (6-bit scale, 6-bit min), packed
  uint8_t qs[kQKK / 2];
};
static_assert(sizeof(block_q4_K) == 144 && alignof(block_q4_K) == 2);

/// Q5_K (176 bytes, 256 elements = 8 sub-blocks of 32): like Q4_K with q in [0, 31]. Bit 4 of
/// element l (0..31) of sub-block j is bit j of qh[l].
/// ggml-common.h block_q5_K; element order of ggml-quants.c dequantize_row_q5_K.
struct block_q5_K {
  uint16_t d;                      ///< half
  uint16_t dmin;                   ///< half
  uint8_t scales[kKScaleSize];     ///< as in Q4_K
  uint8_t qh[kQKK / 8];            ///< bit 4 of the elements
  uint8_t qs[kQKK / 2];            ///< low 4 bits, as in Q4_K
};
static_assert(sizeof(block_q5_K) == 176 && alignof(block_q5_K) == 2);

/// Q6_K (210 bytes, 256 elements = 16 sub-blocks of 16): x = (d * scales[e / 16]) * (q - 32),
/// q in [0, 63]. For half h (elements 128h .. 128h+127), l in [0, 32), with L = ql + 64h and
/// H = qh + 32h, the four elements 128h + l + {0, 32, 64, 96} are
///   (L[l] & 0xF) | ((H[l] >> 0) & 3) << 4,   (L[l+32] & 0xF) | ((H[l] >> 2) & 3) << 4,
///   (L[l] >> 4)  | ((H[l] >> 4) & 3) << 4,   (L[l+32] >> 4)  | ((H[l] >> 6) & 3) << 4.
/// ggml-common.h block_q6_K; element order of ggml-quants.c dequantize_row_q6_K.
struct block_q6_K {
  uint8_t ql[kQKK / 2];            ///< low 4 bits
  uint8_t qh[kQKK / 4];            ///< high 2 bits
  int8_t scales[kQKK / 16];        ///< signed 8-bit sub-block scales
  uint16_t d;                      ///< super-block scale, half
};
static_assert(sizeof(block_q6_K) == 210 && alignof(block_q6_K) == 2);

/// Q8_K (292 bytes, 256 elements), an activation type: x[e] = d * qs[e], d a float32 (not a
/// half); bsums[g] = sum of qs[16g .. 16g+15]. ggml-common.h block_q8_K.
struct block_q8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};
static_assert(sizeof(block_q8_K) == 292 && alignof(block_q8_K) == 4);

/// The 32 high bits of a Q5_0 / Q5_1 block as one u32 (little-endian): bit j is bit 4 of
/// element j.
inline uint32_t q5_high_bits(const uint8_t qh[4]) {
  return static_cast<uint32_t>(qh[0]) | static_cast<uint32_t>(qh[1]) << 8 |
         static_cast<uint32_t>(qh[2]) << 16 | static_cast<uint32_t>(qh[3]) << 24;
}

/// Reads the 6-bit scale and min of sub-block j (0..7) from the packed `scales` of a Q4_K/Q5_K
/// block. Packing (ggml-quants.c get_scale_min_k4): for j < 4, sc = s[j] & 63, m = s[j+4] & 63;
/// for j >= 4, the low 4 bits are in s[j+4] (scale low nibble, min high nibble) and the top 2
/// bits in the top 2 bits of s[j-4] (scale) and s[j] (min).
inline void k4_scale_min(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

/// Inverse of k4_scale_min: packs 8 scales and 8 mins (each in [0, 63]) into 12 bytes.
inline void k4_pack_scale_min(const uint8_t sc[8], const uint8_t m[8], uint8_t* s) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

// ---- element order of the K-quants: unpack to / pack from one value per element -------------
// q[e] for element e of the super-block (0..255), as an unsigned stored value (Q4_K: 0..15,
// Q5_K: 0..31, Q6_K: 0..63, before Q6_K's -32). Packing ignores bits above the type's width.

/// Q4_K: element e = 32j + l (sub-block j) is nibble (j odd ? high : low) of qs[32 (j/2) + l].
inline void unpack_q4_K(const block_q4_K& b, uint8_t q[kQKK]) {
  for (int e = 0; e < kQKK; ++e) {
    const int j = e / 32, l = e % 32;
    const uint8_t byte = b.qs[32 * (j / 2) + l];
    q[e] = static_cast<uint8_t>((j & 1) ? byte >> 4 : byte & 0xF);
  }
}
inline void pack_q4_K(const uint8_t q[kQKK], block_q4_K* b) {
  for (int p = 0; p < 4; ++p)
    for (int l = 0; l < 32; ++l)
      b->qs[32 * p + l] =
          static_cast<uint8_t>((q[64 * p + l] & 0xF) | (q[64 * p + 32 + l] & 0xF) << 4);
}

/// Q5_K: low 4 bits as Q4_K; bit 4 of element e = 32j + l is bit j of qh[l].
inline void unpack_q5_K(const block_q5_K& b, uint8_t q[kQKK]) {
  for (int e = 0; e < kQKK; ++e) {
    const int j = e / 32, l = e % 32;
    const uint8_t byte = b.qs[32 * (j / 2) + l];
    const int lo = (j & 1) ? byte >> 4 : byte & 0xF;
    q[e] = static_cast<uint8_t>(lo | ((b.qh[l] >> j) & 1) << 4);
  }
}
inline void pack_q5_K(const uint8_t q[kQKK], block_q5_K* b) {
  for (int p = 0; p < 4; ++p)
    for (int l = 0; l < 32; ++l)
      b->qs[32 * p + l] =
          static_cast<uint8_t>((q[64 * p + l] & 0xF) | (q[64 * p + 32 + l] & 0xF) << 4);
  for (int l = 0; l < 32; ++l) {
    uint8_t h = 0;
    for (int j = 0; j < 8; ++j) h = static_cast<uint8_t>(h | ((q[32 * j + l] >> 4) & 1) << j);
    b->qh[l] = h;
  }
}

/// Q6_K: element e = 128h + 32r + l (h < 2, r < 4, l < 32) has its low 4 bits in
/// ql[64h + l + 32 (r & 1)] (low nibble for r < 2, high nibble for r >= 2) and its high 2 bits
/// at bits 2r, 2r+1 of qh[32h + l]. The value is q[e] - 32.
inline void unpack_q6_K(const block_q6_K& b, uint8_t q[kQKK]) {
  for (int e = 0; e < kQKK; ++e) {
    const int h = e / 128, r = (e / 32) % 4, l = e % 32;
    const uint8_t lo_byte = b.ql[64 * h + l + 32 * (r & 1)];
    const int lo = r < 2 ? lo_byte & 0xF : lo_byte >> 4;
    const int hi = (b.qh[32 * h + l] >> (2 * r)) & 3;
    q[e] = static_cast<uint8_t>(lo | hi << 4);
  }
}
inline void pack_q6_K(const uint8_t q[kQKK], block_q6_K* b) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* v = q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      b->ql[64 * h + l] = static_cast<uint8_t>((v[l] & 0xF) | (v[l + 64] & 0xF) << 4);
      b->ql[64 * h + l + 32] = static_cast<uint8_t>((v[l + 32] & 0xF) | (v[l + 96] & 0xF) << 4);
      b->qh[32 * h + l] = static_cast<uint8_t>(((v[l] >> 4) & 3) | ((v[l + 32] >> 4) & 3) << 2 |
                                               ((v[l + 64] >> 4) & 3) << 4 |
                                               ((v[l + 96] >> 4) & 3) << 6);
    }
  }
}

}  // namespace minfer
