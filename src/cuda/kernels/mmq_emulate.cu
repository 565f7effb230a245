// Host emulation of the MMQ kernels (design: mmq_emulate.cuh). The weight rows are decoded once
// per stage as mmq.cu decodes them; the loops over outputs then follow the kernel's order of
// operations for one output (stages in k order, blocks in k order within a stage).
#include "cuda/kernels/mmq_emulate.cuh"

#include <cstring>
#include <vector>

#include "cuda/kernels/mmq.cuh"
#include "cuda/kernels/mmq_tile.cuh"
#include "cuda/kernels/quantize_acts.cuh"

namespace minfer::cuda::mm {
namespace {

/// Decoded weights of all rows: int8 values [m][k] and per-block scales.
struct DecodedW {
  std::vector<int8_t> q;
  std::vector<float> d, m;        // legacy: per block; K: per super-block (d, dmin)
  std::vector<KScales> ks;        // K-quants
};

template <TensorType T>
DecodedW decode_rows(const uint8_t* w, int64_t k, int64_t m) {
  using Tr = MmqTraits<T>;
  const int64_t nbw = k / Tr::kBlock, rb = nbw * Tr::kBytes, w_bytes = m * rb;
  const int64_t stages = (k + Tr::kStageK - 1) / Tr::kStageK;
  DecodedW out;
  out.q.assign(static_cast<size_t>(m * k), 0);
  out.d.assign(static_cast<size_t>(m * nbw), 0.0f);
  out.m.assign(static_cast<size_t>(m * nbw), 0.0f);
  if constexpr (Tr::kKQuant) out.ks.resize(static_cast<size_t>(m * nbw));
  std::vector<uint8_t> raw(static_cast<size_t>(Tr::kRawWords) * 16 + 16);
  for (int64_t row = 0; row < m; ++row)
    for (int64_t s = 0; s < stages; ++s) {
      const int64_t kb0 = s * Tr::kStageBlocks;
      const int nblk = static_cast<int>(nbw - kb0 < Tr::kStageBlocks ? nbw - kb0 : Tr::kStageBlocks);
      const MmqRowStage g = mmq_row_stage(row, rb, kb0, nblk, Tr::kBytes);
      // The kernel's copy: words [0, g.words) of the stage, bytes past the tensor zero-filled.
      std::fill(raw.begin(), raw.end(), 0);
      for (int64_t b = 0; b < 16 * static_cast<int64_t>(g.words); ++b) {
        const int64_t a = g.first + b;
        if (a < w_bytes) raw[static_cast<size_t>(b)] = w[a];
      }
      if constexpr (!Tr::kKQuant) {
        for (int b = 0; b < nblk; ++b) {
          uint32_t q[8];
          float d, mn;
          mmq_decode_legacy<T>(raw.data(), g.shift + b * Tr::kBytes, q, &d, &mn);
          const int64_t kb = kb0 + b;
          std::memcpy(out.q.data() + row * k + kb * 32, q, 32);
          out.d[static_cast<size_t>(row * nbw + kb)] = d;
          out.m[static_cast<size_t>(row * nbw + kb)] = mn;
        }
      } else {
        uint32_t q[64];
        mmq_decode_khalf<T>(raw.data(), g.shift, 0, q);
        mmq_decode_khalf<T>(raw.data(), g.shift, 1, q + 32);
        std::memcpy(out.q.data() + row * k + s * 256, q, 256);
        out.ks[static_cast<size_t>(row * nbw + s)] = mmq_decode_kscales<T>(raw.data(), g.shift);
      }
    }
  return out;
}

int dot_i8(const int8_t* a, const int8_t* b, int len) {
  int s = 0;
  for (int i = 0; i < len; ++i) s += a[i] * b[i];
  return s;
}

int8_t sc_byte(const uint32_t* words, int j) { return static_cast<int8_t>(words[j >> 2] >> (8 * (j & 3))); }

template <TensorType T>
void emulate(const uint8_t* w, int64_t k, int64_t m, const void* acts, int64_t n, float* y, int64_t ldy, int splits) {
  using Tr = MmqTraits<T>;
  const int64_t nbw = k / Tr::kBlock;
  // Split z sums the stages [stages z / splits, stages (z + 1) / splits) from zero; the sums are
  // then added in z order (mmq_split_count). A stage is kStageBlocks legacy blocks or one
  // super-block.
  const int64_t stages = (k + Tr::kStageK - 1) / Tr::kStageK;
  std::vector<int> split_of_block(static_cast<size_t>(nbw));  // the split whose stages hold weight block kb
  for (int64_t kb = 0, z = 0; kb < nbw; ++kb) {
    const int64_t stage = Tr::kKQuant ? kb : kb / Tr::kStageBlocks;
    while (z + 1 < splits && stage >= stages * (z + 1) / splits) ++z;
    split_of_block[static_cast<size_t>(kb)] = static_cast<int>(z);
  }
  const DecodedW dw = decode_rows<T>(w, k, m);
  const ActLayout L = act_layout(Tr::kKQuant ? ActKind::Q8K : ActKind::Q8, k, n);
  const auto* base = static_cast<const uint8_t*>(acts);
  const auto* qs = reinterpret_cast<const int8_t*>(base + L.qs_off);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t row = 0; row < m; ++row) {
      const int8_t* wq = dw.q.data() + row * k;
      const int8_t* aq = qs + t * k;
      float part[kMmqMaxSplits] = {};
      if constexpr (!Tr::kKQuant) {
        const auto* ds = reinterpret_cast<const float2*>(base + L.ds_off) + t * L.nb;
        for (int64_t kb = 0; kb < nbw; ++kb) {
          float& acc = part[split_of_block[static_cast<size_t>(kb)]];
          const int isum = dot_i8(wq + kb * 32, aq + kb * 32, 32);
          const size_t i = static_cast<size_t>(row * nbw + kb);
          acc = mmq_legacy_step(acc, dw.d[i], ds[kb].x, isum);
          if constexpr (Tr::kMin) acc = mmq_min_step(acc, dw.m[i], mmq_min_factor(ds[kb].x, ds[kb].y));
        }
      } else {
        const auto* da = reinterpret_cast<const float*>(base + L.ds_off) + t * L.nb;
        const auto* bsums = reinterpret_cast<const int16_t*>(base + L.bsums_off) + t * L.nb * 16;
        for (int64_t sb = 0; sb < nbw; ++sb) {
          const KScales& ks = dw.ks[static_cast<size_t>(row * nbw + sb)];
          const int8_t* wsb = wq + sb * 256;
          const int8_t* asb = aq + sb * 256;
          int isum = 0;
          if constexpr (T == TensorType::Q6_K) {
            for (int g = 0; g < 16; ++g) isum += sc_byte(ks.sc, g) * dot_i8(wsb + 16 * g, asb + 16 * g, 16);
          } else {
            for (int j = 0; j < 8; ++j) isum += sc_byte(ks.sc, j) * dot_i8(wsb + 32 * j, asb + 32 * j, 32);
          }
          const uint32_t bs[4] = {mmq_pack_bsums(bsums + sb * 16, 0), mmq_pack_bsums(bsums + sb * 16, 1),
                                  mmq_pack_bsums(bsums + sb * 16, 2), mmq_pack_bsums(bsums + sb * 16, 3)};
          const int msum = T == TensorType::Q6_K ? 0 : mmq_msum(ks.mins, bs);
          float& acc = part[split_of_block[static_cast<size_t>(sb)]];
          acc = fadd(acc, mmq_kquant_term<T>(ks.d, ks.dmin, da[sb], isum, msum));
        }
      }
      float acc = part[0];
      for (int z = 1; z < splits; ++z) acc = fadd(acc, part[z]);
      y[row + t * ldy] = acc;
    }
}

}  // namespace

bool emulate_mmq(TensorType type, const void* w, int64_t k, int64_t m, const void* acts, int64_t n,
                 float* y, int64_t ldy, int splits) {
  if ((reinterpret_cast<uintptr_t>(w) & 15) != 0 || k <= 0 || m < 0 || n < 0 || splits < 1 ||
      splits > kMmqMaxSplits)
    return false;
  const bool kq = type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K;
  if (k % (kq ? 256 : 32) != 0) return false;
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (type) {
    case TensorType::Q4_0: emulate<TensorType::Q4_0>(wb, k, m, acts, n, y, ldy, splits); return true;
    case TensorType::Q4_1: emulate<TensorType::Q4_1>(wb, k, m, acts, n, y, ldy, splits); return true;
    case TensorType::Q5_0: emulate<TensorType::Q5_0>(wb, k, m, acts, n, y, ldy, splits); return true;
    case TensorType::Q5_1: emulate<TensorType::Q5_1>(wb, k, m, acts, n, y, ldy, splits); return true;
    case TensorType::Q8_0: emulate<TensorType::Q8_0>(wb, k, m, acts, n, y, ldy, splits); return true;
    case TensorType::Q4_K: emulate<TensorType::Q4_K>(wb, k, m, acts, n, y, ldy, splits); return true;
    case TensorType::Q5_K: emulate<TensorType::Q5_K>(wb, k, m, acts, n, y, ldy, splits); return true;
    case TensorType::Q6_K: emulate<TensorType::Q6_K>(wb, k, m, acts, n, y, ldy, splits); return true;
    default: return false;
  }
}

}  // namespace minfer::cuda::mm
