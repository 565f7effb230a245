// Host emulation of the quantized MMVQ kernels (design: mmvq_emulate.cuh). The loops below
// mirror mmvq_legacy_kernel, mmvq_kquant_kernel and the direct-load kernels lane by lane; the
// per-block arithmetic is the kernels' own (mmvq_blocks.cuh).
#include "cuda/kernels/mmvq_emulate.cuh"

#include <algorithm>
#include <cstring>

#include "cuda/kernels/mmvq_blocks.cuh"
#include "cuda/kernels/mmvq_common.cuh"
#include "cuda/kernels/mmvq_lane.cuh"
#include "cuda/kernels/mmvq_mma.cuh"
#include "cuda/kernels/quantize_acts.cuh"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace minfer::cuda::mm {
namespace {

/// The stage as the kernel fills it: words of [g.base, g.base + 16 words) with bytes outside
/// the tensor [lo, hi) read as 0.
void fill_stage(std::vector<uint8_t>& stage, const StageGeom& g, uint64_t lo, uint64_t hi) {
  std::fill(stage.begin(), stage.end(), 0);
  for (int64_t b = 0; b < 16 * static_cast<int64_t>(g.words); ++b) {
    const uint64_t a = g.base + static_cast<uint64_t>(b);
    if (a >= lo && a < hi) stage[static_cast<size_t>(b)] = *reinterpret_cast<const uint8_t*>(a);
  }
}

/// True when the m x n outputs (column stride ldy) of two emulations have the same bits.
bool same_bits(const float* y, const float* y2, int64_t m, int n, int64_t ldy) {
  for (int c = 0; c < n; ++c)
    for (int64_t j = 0; j < m; ++j)
      if (f2u(y[j + c * ldy]) != f2u(y2[j + c * ldy])) return false;
  return true;
}

/// Lane sums folded by halving (the kernel's fold_lanes).
float fold(float* v) {
  for (int w = 16; w >= 1; w >>= 1)
    for (int i = 0; i < w; ++i) v[i] = fadd(v[i], v[i + w]);
  return v[0];
}

template <TensorType kType>
bool emulate_legacy(const uint8_t* w, int64_t k, int64_t m, const Q8View& a, int n, float* y,
                    int64_t ldy) {
  using T = Legacy<kType>;
  const int64_t nb = k / 32, rb = nb * T::kBytes;
  const uint64_t lo = reinterpret_cast<uint64_t>(w), hi = lo + static_cast<uint64_t>(m * rb);
  std::vector<uint8_t> stage(static_cast<size_t>(32 * T::U + 1) * 16);
  for (int64_t row = 0; row < m; ++row) {
    float acc[32][8] = {};
    const uint64_t row_start = lo + static_cast<uint64_t>(row * rb);
    for (int64_t b0 = 0; b0 < nb; b0 += T::CB) {
      const int n_blk = static_cast<int>(nb - b0 < T::CB ? nb - b0 : T::CB);
      const StageGeom g = stage_geom(row_start + static_cast<uint64_t>(b0 * T::kBytes), n_blk * T::kBytes);
      if (g.words > 32 * T::U) return false;
      fill_stage(stage, g, lo, hi);
      for (int it = 0; it < T::CB / 32; ++it)
        for (int lane = 0; lane < 32; ++lane) {
          const int i = it * 32 + lane;
          if (i >= n_blk) continue;
          const LegacyW wb = T::decode(stage.data(), g.offset + i * T::kBytes);
          for (int c = 0; c < n; ++c) acc[lane][c] = fadd(acc[lane][c], legacy_term<kType>(wb, a, c, b0 + i));
        }
    }
    for (int c = 0; c < n; ++c) {
      float v[32];
      for (int l = 0; l < 32; ++l) v[l] = acc[l][c];
      y[row + c * ldy] = fold(v);
    }
  }
  return true;
}

template <TensorType kType>
bool emulate_kquant(const uint8_t* w, int64_t k, int64_t m, const Q8KView& a, int n, float* y,
                    int64_t ldy) {
  using T = KQuant<kType>;
  const int64_t nb = k / 256, rb = nb * T::kBytes;
  const uint64_t lo = reinterpret_cast<uint64_t>(w), hi = lo + static_cast<uint64_t>(m * rb);
  std::vector<uint8_t> stage(static_cast<size_t>(32 * T::U + 1) * 16);
  for (int64_t row = 0; row < m; ++row) {
    float acc[32][8] = {};
    const uint64_t row_start = lo + static_cast<uint64_t>(row * rb);
    for (int64_t b0 = 0; b0 < nb; b0 += T::CB) {
      const int64_t cnt = nb - b0 < T::CB ? nb - b0 : T::CB;
      const StageGeom g = stage_geom(row_start + static_cast<uint64_t>(b0 * T::kBytes), cnt * T::kBytes);
      if (g.words > 32 * T::U) return false;
      fill_stage(stage, g, lo, hi);
      for (int it = 0; it < T::CB / 4; ++it) {
        const int64_t t_first = b0 + 4 * it;
        if (t_first >= nb) break;
        for (int grp = 0; grp < 4; ++grp) {
          if (t_first + grp >= nb) continue;  // the kernel computes such a group but never takes it
          const int64_t t = t_first + grp;
          KPartW wp[8];
          for (int part = 0; part < 8; ++part)
            wp[part] = T::decode(stage.data(), g.offset + (4 * it + grp) * T::kBytes, part);
          for (int c = 0; c < n; ++c) {
            int isum = 0, msum = 0;
            for (int part = 0; part < 8; ++part) {
              const int2 s = kquant_partial<kType>(wp[part], a, c, t, part);
              isum += s.x;
              msum += s.y;
            }
            const float term = kquant_term<kType>(wp[0], ldg(a.d + c * a.nb + t), isum, msum);
            const int lane = static_cast<int>(t % 32);
            acc[lane][c] = fadd(acc[lane][c], term);
          }
        }
      }
    }
    for (int c = 0; c < n; ++c) {
      float v[32];
      for (int l = 0; l < 32; ++l) v[l] = acc[l][c];
      y[row + c * ldy] = fold(v);
    }
  }
  return true;
}

/// 16 bytes at p as four little-endian words (the device's 16-byte load).
uint4 load16(const uint8_t* p) {
  uint4 r;
  std::memcpy(&r, p, 16);
  return r;
}

/// mmvq_kquant_direct_kernel (Q4_K/Q5_K, 16-byte aligned weights) lane by lane: per step of
/// 8 KB super-blocks, lane 4g + q decodes quarter q of super-block t0 + 8 kb + g (clamped to the
/// row's last one), the shares are exchanged as the kernel's xor-shuffles do (transposed for
/// KB = 2), each lane forms the term of the half it holds, and lane l adds the term of lane
/// my_src when the step is its step and the super-block exists.
template <TensorType kType>
bool emulate_kquant_direct_kb(const uint8_t* w, int64_t k, int64_t m, const Q8KView& a, int n, float* y,
                              int64_t ldy, int KB) {
  constexpr int kBytes = kType == TensorType::Q4_K ? 144 : 176;
  constexpr int kQsOff = kType == TensorType::Q4_K ? 16 : 48;
  const int64_t nb = k / 256;
  const int step_blocks = 8 * KB, steps_per_round = 32 / step_blocks;
  const uint4 zero{0, 0, 0, 0};
  for (int64_t row = 0; row < m; ++row) {
    float acc[32][8] = {};
    const uint8_t* rw = w + row * nb * kBytes;
    for (int64_t t0 = 0, step = 0; t0 < nb; t0 += step_blocks, ++step) {
      int64_t tk[32][2];
      int isum[32][2][8], msum[32][2][8];
      uint32_t hdx[32][2];
      for (int lane = 0; lane < 32; ++lane) {
        const int q = lane & 3, g = lane >> 2;
        for (int kb = 0; kb < KB; ++kb) {
          const int64_t t = t0 + 8 * kb + g;
          tk[lane][kb] = t < nb ? t : nb - 1;
          const uint8_t* blk = rw + tk[lane][kb] * kBytes;
          const uint4 hd = load16(blk);
          hdx[lane][kb] = hd.x;
          const uint4 ha = kType == TensorType::Q5_K ? load16(blk + 16) : zero;
          const uint4 hb = kType == TensorType::Q5_K ? load16(blk + 32) : zero;
          const KQuarterW wq = kquarter_decode<kType>(hd, load16(blk + kQsOff + 32 * q),
                                                      load16(blk + kQsOff + 32 * q + 16), ha, hb, q);
          for (int c = 0; c < n; ++c) {
            const int2 sh = kquarter_partial(wq, a, c, tk[lane][kb], q);
            isum[lane][kb][c] = sh.x;
            msum[lane][kb][c] = sh.y;
          }
        }
      }
      for (int c = 0; c < n; ++c) {
        int vi[32], vm[32], ti[32], tm[32];
        for (int lane = 0; lane < 32; ++lane) {
          const int odd = lane & 1, p = lane ^ 1;
          if (KB == 2) {  // keep half `odd`, receive the partner's share of it
            vi[lane] = isum[lane][odd][c] + isum[p][odd][c];
            vm[lane] = msum[lane][odd][c] + msum[p][odd][c];
          } else {
            vi[lane] = isum[lane][0][c] + isum[p][0][c];
            vm[lane] = msum[lane][0][c] + msum[p][0][c];
          }
        }
        for (int lane = 0; lane < 32; ++lane) {
          ti[lane] = vi[lane] + vi[lane ^ 2];
          tm[lane] = vm[lane] + vm[lane ^ 2];
        }
        float term[32];
        for (int lane = 0; lane < 32; ++lane) {
          const int half = KB == 2 ? lane & 1 : 0;
          const int64_t t_mine = tk[lane][half];
          term[lane] = kquarter_term(hdx[lane][half], ldg(a.d + c * a.nb + t_mine), ti[lane], tm[lane]);
        }
        for (int lane = 0; lane < 32; ++lane) {
          const int my_step = lane / step_blocks;
          const int my_src = 4 * (lane % 8) + (KB == 2 ? (lane >> 3) & 1 : 0);
          if (step % steps_per_round == my_step && t0 + lane % step_blocks < nb)
            acc[lane][c] = fadd(acc[lane][c], term[my_src]);
        }
      }
    }
    for (int c = 0; c < n; ++c) {
      float v[32];
      for (int l = 0; l < 32; ++l) v[l] = acc[l][c];
      y[row + c * ldy] = fold(v);
    }
  }
  return true;
}

/// The direct kernel with one half per step (the default), checked against two halves per step
/// (MINFER_CUDA_MMVQ_KB=2): both must give the same bits, else false.
template <TensorType kType>
bool emulate_kquant_direct(const uint8_t* w, int64_t k, int64_t m, const Q8KView& a, int n, float* y,
                           int64_t ldy) {
  std::vector<float> y2(static_cast<size_t>(ldy * n), 0.0f);
  return emulate_kquant_direct_kb<kType>(w, k, m, a, n, y, ldy, 1) &&
         emulate_kquant_direct_kb<kType>(w, k, m, a, n, y2.data(), ldy, 2) && same_bits(y, y2.data(), m, n, ldy);
}

/// The 16-byte aligned word at address a with bytes outside the tensor [lo, hi) read as 0 (the
/// kernel's load_word_clamped).
uint4 load_word_clamped_host(uint64_t a, uint64_t lo, uint64_t hi) {
  uint8_t bytes[16] = {};
  for (int i = 0; i < 16; ++i)
    if (a + i >= lo && a + i < hi) bytes[i] = *reinterpret_cast<const uint8_t*>(a + i);
  uint4 r;
  std::memcpy(&r, bytes, 16);
  return r;
}

/// mmvq_q6k_direct_kernel lane by lane: per step of 8 super-blocks, lane 4g + q loads the aligned
/// words around quarter q of super-block 8 step + g (clamped to the row's last one), decodes them
/// with the kernel's q6k_quarter_decode, the four shares are exchanged as the xor-shuffles do, and
/// lane l adds the term of lane 4 (l % 8) in its step when the super-block exists.
bool emulate_q6k_direct(const uint8_t* w, int64_t k, int64_t m, const Q8KView& a, int n, float* y,
                        int64_t ldy) {
  constexpr int kBytes = 210;
  const int64_t nb = k / 256;
  const uint64_t lo = reinterpret_cast<uint64_t>(w), hi = lo + static_cast<uint64_t>(m * nb * kBytes);
  for (int64_t row = 0; row < m; ++row) {
    float acc[32][8] = {};
    const uint64_t rw = lo + static_cast<uint64_t>(row * nb * kBytes);
    for (int64_t step = 0; 8 * step < nb; ++step) {
      int isum[32][8];
      uint16_t d[32];
      int64_t tl[32];
      for (int lane = 0; lane < 32; ++lane) {
        const int q = lane & 3, g = lane >> 2;
        const int64_t t = 8 * step + g < nb ? 8 * step + g : nb - 1;
        tl[lane] = t;
        const uint64_t blk = rw + static_cast<uint64_t>(t * kBytes);
        const uint64_t base = blk & ~uint64_t{15};
        uint4 l[3], h[3], sw[2];
        for (int i = 0; i < 3; ++i) {
          l[i] = load_word_clamped_host(base + 32 * q + 16 * i, lo, hi);
          h[i] = load_word_clamped_host(base + 128 + 32 * (q >> 1) + 16 * i, lo, hi);
        }
        sw[0] = load_word_clamped_host(base + 192, lo, hi);
        sw[1] = load_word_clamped_host(base + 208, lo, hi);
        const Q6QuarterW wq = q6k_quarter_decode(l, h, sw, static_cast<int>(blk - base), q);
        d[lane] = wq.d;
        for (int c = 0; c < n; ++c) isum[lane][c] = q6k_quarter_isum(wq, q6k_quarter_acts(a, c, t, q));
      }
      for (int c = 0; c < n; ++c) {
        int v1[32], v2[32];
        for (int lane = 0; lane < 32; ++lane) v1[lane] = isum[lane][c] + isum[lane ^ 1][c];
        for (int lane = 0; lane < 32; ++lane) v2[lane] = v1[lane] + v1[lane ^ 2];
        for (int lane = 0; lane < 32; ++lane) {
          const int src = 4 * (lane & 7);
          if ((step & 3) != (lane >> 3) || 8 * step + (lane & 7) >= nb) continue;
          const float term = q6k_quarter_term(d[src], ldg(a.d + c * a.nb + tl[src]), v2[src]);
          acc[lane][c] = fadd(acc[lane][c], term);
        }
      }
    }
    for (int c = 0; c < n; ++c) {
      float v[32];
      for (int l = 0; l < 32; ++l) v[l] = acc[l][c];
      y[row + c * ldy] = fold(v);
    }
  }
  return true;
}

/// The direct Q6_K kernel as on the device, checked against the staged one (mmvq_kquant_kernel):
/// both must give the same bits, else false.
bool emulate_q6k(const uint8_t* w, int64_t k, int64_t m, const Q8KView& a, int n, float* y, int64_t ldy) {
  std::vector<float> y2(static_cast<size_t>(ldy * n), 0.0f);
  return emulate_q6k_direct(w, k, m, a, n, y, ldy) && emulate_kquant<TensorType::Q6_K>(w, k, m, a, n, y2.data(), ldy) &&
         same_bits(y, y2.data(), m, n, ldy);
}

/// mmvq_lane_kernel (one token column) row by row: the activation stage in its kLaneActStride
/// layout, each row's piece of lanes-per-row super-blocks copied as the aligned 16-byte words
/// around it (bytes past the tensor's end read as 0) into a buffer with the kernel's slack, lane
/// t % 32's terms (lane_term) added in increasing t, and the kernel's fold over lanes-per-row
/// lanes (8, 16 or 32; an fadd of +0.0f for the empty virtual lanes).
template <TensorType kType>
bool emulate_lane(const uint8_t* w, int64_t k, int64_t m, const Q8KView& a, float* y) {
  constexpr int kBytes = kLaneBlockBytes<kType>;
  const int nb = static_cast<int>(k / 256);
  const int lpr = nb <= 8 ? 8 : nb <= 16 ? 16 : 32;
  std::vector<uint8_t> act(static_cast<size_t>(nb) * kLaneActStride + 16, 0);
  uint8_t* act16 = act.data() + (16 - reinterpret_cast<uintptr_t>(act.data()) % 16) % 16;
  for (int t = 0; t < nb; ++t) {
    std::memcpy(act16 + t * kLaneActStride, a.qs + static_cast<int64_t>(t) * 256, 256);
    std::memcpy(act16 + t * kLaneActStride + kLaneActBsums, a.bsums + static_cast<int64_t>(t) * 16, 32);
    std::memcpy(act16 + t * kLaneActStride + kLaneActD, a.d + t, 4);
  }
  const int64_t row_bytes = static_cast<int64_t>(nb) * kBytes;
  const uint64_t lo = reinterpret_cast<uint64_t>(w), hi = lo + static_cast<uint64_t>(m * row_bytes);
  std::vector<uint8_t> piece(static_cast<size_t>(32 * kBytes + 32));  // + the kernel's slack
  for (int64_t j = 0; j < m; ++j) {
    float lane[32] = {};
    for (int t0 = 0; t0 < nb; t0 += 32) {
      const int nbr = std::min(nb - t0, lpr);
      const StageGeom g = stage_geom(lo + static_cast<uint64_t>(j * row_bytes + int64_t{t0} * kBytes), nbr * kBytes);
      fill_stage(piece, g, lo, hi);
      for (int h = 0; h < nbr; ++h)
        lane[h] = fadd(lane[h],
                       lane_term<kType>(piece.data() + g.offset + h * kBytes, act16 + (t0 + h) * kLaneActStride));
    }
    if (lpr < 32)
      for (int i = 0; i < lpr; ++i) lane[i] = fadd(lane[i], 0.0f);
    for (int wdt = lpr / 2; wdt >= 1; wdt >>= 1)
      for (int i = 0; i < wdt; ++i) lane[i] = fadd(lane[i], lane[i + wdt]);
    y[j] = lane[0];
  }
  return true;
}

/// For one token column and 16-byte aligned weights (where the device takes mmvq_lane_kernel),
/// the lane kernel's emulation, which must give the same bits as the other kernels' (y), else false.
template <TensorType kType>
bool check_lane(const uint8_t* w, int64_t k, int64_t m, const Q8KView& a, int n, const float* y) {
  if (n != 1 || (reinterpret_cast<uintptr_t>(w) & 15u) != 0) return true;
  std::vector<float> y2(static_cast<size_t>(m), 0.0f);
  return emulate_lane<kType>(w, k, m, a, y2.data()) && same_bits(y, y2.data(), m, 1, m);
}

/// Q6_K super-block t of tile `tile` as the tensor-core kernel computes it (sb_terms_q6): each
/// lane's fields, the 16 group mma.sync from the PTX m16n8k16 fragment layout, the group shares
/// and the term, for the lane's four outputs.
void mma_q6_terms_emulated(const uint8_t* w, int64_t row_bytes, int64_t m, int64_t tile, int64_t t, const Q8KView& a,
                           int n, float (&term)[32][4]) {
  const auto u32 = [](const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  };
  const auto byte_of = [](uint32_t v, int i) { return static_cast<int>(static_cast<int8_t>((v >> (8 * i)) & 0xFFu)); };
  MmaQ6Raw rows[32][2];
  uint32_t act[32][16];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, tq = lane & 3;
    for (int r = 0; r < 2; ++r) {
      int64_t row = tile * 16 + g + 8 * r;
      if (row >= m) row = 0;
      const uint8_t* blk = w + row * row_bytes + t * 210;
      MmaQ6Raw& rr = rows[lane][r];
      for (int hh = 0; hh < 2; ++hh)
        for (int lh = 0; lh < 2; ++lh) {
          for (int sq = 0; sq < 2; ++sq) rr.ql[hh][sq][lh] = u32(blk + 64 * hh + 32 * sq + 16 * lh + 4 * tq);
          rr.qh[hh][lh] = u32(blk + 128 + 32 * hh + 16 * lh + 4 * tq);
        }
      for (int q = 0; q < 4; ++q) rr.sc[q] = u32(blk + 192 + 4 * q);
      std::memcpy(&rr.d, blk + 208, 2);
    }
    for (int G = 0; G < 16; ++G) act[lane][G] = g < n ? u32(reinterpret_cast<const uint8_t*>(a.qs + g * a.k + t * 256 + 16 * G + 4 * tq)) : 0u;
  }
  int isum[32][4] = {};
  for (int G = 0; G < 16; ++G) {
    const int hh = G >> 3, quad = (G >> 1) & 3, lh = G & 1;
    uint32_t A[32][2];
    for (int lane = 0; lane < 32; ++lane)
      for (int r = 0; r < 2; ++r) A[lane][r] = mma_q6_a_word(rows[lane][r], hh, quad, lh);
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < 4; ++e) {
        const int row = (lane >> 2) + 8 * (e >> 1), col = 2 * (lane & 3) + (e & 1);
        int c = 0;
        for (int kk = 0; kk < 16; ++kk)
          c += byte_of(A[(row % 8) * 4 + kk / 4][row >= 8 ? 1 : 0], kk % 4) * byte_of(act[col * 4 + kk / 4][G], kk % 4);
        const int bsum = col < n ? a.bsums[(col * a.nb + t) * 16 + G] : 0;
        isum[lane][e] += mma_q6_group(rows[lane][e >> 1], G, c, bsum);
      }
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int e = 0; e < 4; ++e) {
      const int col = 2 * (lane & 3) + (e & 1);
      const float da = col < n ? a.d[col * a.nb + t] : 0.0f;
      term[lane][e] = fmul(fmul(half_to_float(rows[lane][e >> 1].d), da), i2f(isum[lane][e]));
    }
}

/// The tensor-core kernel (mmvq_mma.cu) for one segment without glu, `warps` warps a tile (4 or
/// 8): every lane's fragments packed by the kernel's helpers, each mma.sync computed from the PTX
/// fragment layout (mmvq_mma.cuh), the kernel's lane order, terms and folds.
template <TensorType kType>
bool emulate_mma(const uint8_t* w, int64_t k, int64_t m, const Q8KView& a, int n, float* y, int64_t ldy, int warps) {
  using K = MmaK<kType>;
  const int64_t nb = k / 256, row_bytes = nb * K::kBytes;
  const int per_warp = 32 / warps;
  const auto word8 = [](const void* p) {
    uint2 v;
    std::memcpy(&v, p, 8);
    return v;
  };
  const auto byte_of = [](uint32_t v, int i) { return static_cast<int>(static_cast<int8_t>((v >> (8 * i)) & 0xFFu)); };
  for (int64_t tile = 0; tile * 16 < m; ++tile) {
    std::vector<float> part(static_cast<size_t>(warps) * 32 * 4);
    for (int wp = 0; wp < warps; ++wp) {
      std::vector<float> acc(static_cast<size_t>(per_warp) * 32 * 4, 0.0f);  // [leaf][lane][e]
      for (int64_t base = 0; base < nb; base += 32)
        for (int i = 0; i < per_warp; ++i) {
          const int64_t t = base + bitrev5(per_warp * wp + i);
          if (t >= nb) continue;
          if constexpr (kType == TensorType::Q6_K) {
            float term[32][4];
            mma_q6_terms_emulated(w, row_bytes, m, tile, t, a, n, term);
            for (int lane = 0; lane < 32; ++lane)
              for (int e = 0; e < 4; ++e) {
                float& v = acc[(static_cast<size_t>(i) * 32 + static_cast<size_t>(lane)) * 4 + static_cast<size_t>(e)];
                v = fadd(v, term[lane][e]);
              }
          } else {
            MmaRowRaw rows[32][2];
            uint2 act[32][8];
            for (int lane = 0; lane < 32; ++lane) {
              const int g = lane >> 2, tq = lane & 3;
              for (int r = 0; r < 2; ++r) {
                int64_t row = tile * 16 + g + 8 * r;
                if (row >= m) row = 0;  // the kernel's stand-in row (computed, never stored)
                const uint8_t* blk = w + row * row_bytes + t * K::kBytes;
                MmaRowRaw& rr = rows[lane][r];
                std::memcpy(&rr.hd, blk, 16);
                for (int q = 0; q < 4; ++q) rr.qs[q] = word8(blk + K::kQsOff + 32 * q + 8 * tq);
                rr.qh = kType == TensorType::Q5_K ? word8(blk + 16 + 8 * tq) : uint2{0u, 0u};
              }
              for (int j = 0; j < 8; ++j)
                act[lane][j] = g < n ? word8(a.qs + g * a.k + t * 256 + 8 * tq + 32 * j) : uint2{0u, 0u};
            }
            int isum[32][4] = {};
            for (int j = 0; j < 8; ++j) {
              uint32_t A[32][4], B[32][2];
              for (int lane = 0; lane < 32; ++lane) {
                const uint2 w0 = mma_a_words<kType>(rows[lane][0], j >> 1, j & 1);
                const uint2 w1 = mma_a_words<kType>(rows[lane][1], j >> 1, j & 1);
                A[lane][0] = w0.x;
                A[lane][1] = w1.x;
                A[lane][2] = w0.y;
                A[lane][3] = w1.y;
                B[lane][0] = act[lane][j].x;
                B[lane][1] = act[lane][j].y;
              }
              for (int lane = 0; lane < 32; ++lane)
                for (int e = 0; e < 4; ++e) {
                  const int row = (lane >> 2) + 8 * (e >> 1), col = 2 * (lane & 3) + (e & 1);
                  int c = 0;
                  for (int kk = 0; kk < 32; ++kk) {
                    const int la = (row % 8) * 4 + (kk % 16) / 4, ra = (row >= 8 ? 1 : 0) + (kk >= 16 ? 2 : 0);
                    const int lb = col * 4 + (kk % 16) / 4, rb = kk >= 16 ? 1 : 0;
                    c += byte_of(A[la][ra], kk % 4) * byte_of(B[lb][rb], kk % 4);
                  }
                  isum[lane][e] += mma_scales(rows[lane][e >> 1].hd).sc[j] * c;
                }
            }
            for (int lane = 0; lane < 32; ++lane)
              for (int cc = 0; cc < 2; ++cc) {
                const int col = 2 * (lane & 3) + cc;
                int bsum[8] = {};
                float da = 0.0f;
                if (col < n) {
                  const int16_t* bs = a.bsums + (col * a.nb + t) * 16;
                  for (int j = 0; j < 8; ++j) bsum[j] = bs[2 * j] + bs[2 * j + 1];
                  da = a.d[col * a.nb + t];
                }
                for (int h = 0; h < 2; ++h) {
                  const int e = 2 * h + cc;
                  float& v = acc[(static_cast<size_t>(i) * 32 + static_cast<size_t>(lane)) * 4 + static_cast<size_t>(e)];
                  v = fadd(v, mma_term(rows[lane][h].hd, mma_scales(rows[lane][h].hd), isum[lane][e], bsum, da));
                }
              }
          }
        }
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) {
          float leaf[8];
          for (int i = 0; i < per_warp; ++i) leaf[i] = acc[(static_cast<size_t>(i) * 32 + static_cast<size_t>(lane)) * 4 + static_cast<size_t>(e)];
          part[(static_cast<size_t>(wp) * 32 + static_cast<size_t>(lane)) * 4 + static_cast<size_t>(e)] =
              per_warp == 4 ? tree_fold<4>(leaf) : tree_fold<8>(leaf);
        }
    }
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < 4; ++e) {
        float wv[8];
        for (int wp = 0; wp < warps; ++wp) wv[wp] = part[(static_cast<size_t>(wp) * 32 + static_cast<size_t>(lane)) * 4 + static_cast<size_t>(e)];
        const float v = warps == 8 ? tree_fold<8>(wv) : tree_fold<4>(wv);
        const int64_t row = tile * 16 + (lane >> 2) + 8 * (e >> 1);
        const int col = 2 * (lane & 3) + (e & 1);
        if (row < m && col < n) y[row + col * ldy] = v;
      }
  }
  return true;
}

/// For 2..8 token columns and 16-byte aligned weights (where the device takes mmvq_mma_kernel),
/// the tensor-core kernel's emulation with 8 and with 4 warps a tile, which must give the same
/// bits as the other kernels' (y), else false.
template <TensorType kType>
bool check_mma(const uint8_t* w, int64_t k, int64_t m, const Q8KView& a, int n, const float* y, int64_t ldy) {
  const uintptr_t align = kType == TensorType::Q6_K ? 2u : 16u;  // where the device takes the kernel
  if (n < 2 || (reinterpret_cast<uintptr_t>(w) & (align - 1)) != 0) return true;
  for (const int warps : {8, 4}) {
    std::vector<float> y2(static_cast<size_t>(ldy * n), 0.0f);
    if (!emulate_mma<kType>(w, k, m, a, n, y2.data(), ldy, warps) || !same_bits(y, y2.data(), m, n, ldy)) return false;
  }
  return true;
}

}  // namespace

bool host_activations_from_blocks(TensorType type, const void* blocks, int64_t k, int64_t n,
                                  std::vector<uint8_t>* out) {
  ActKind kind;
  if (!act_kind_for(type, &kind) || (kind != ActKind::Q8 && kind != ActKind::Q8K) || k <= 0 ||
      n <= 0 || k % (kind == ActKind::Q8 ? 32 : 256) != 0)
    return false;
  const ActLayout L = act_layout(kind, k, n);
  out->assign(L.total, 0);
  uint8_t* base = out->data();
  const auto* src = static_cast<const uint8_t*>(blocks);
  const int64_t total_blocks = L.nb * n;
  for (int64_t b = 0; b < total_blocks; ++b) {
    if (kind == ActKind::Q8) {
      // Q8_0 and Q8_1 blocks both start with d; qs follows at 2 (Q8_0) or 4 (Q8_1).
      const bool q8_1 = type == TensorType::Q4_1 || type == TensorType::Q5_1;
      const size_t bytes = q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
      const uint8_t* blk = src + static_cast<size_t>(b) * bytes;
      uint16_t d;
      std::memcpy(&d, blk, 2);
      const auto* qs = reinterpret_cast<const int8_t*>(blk + (q8_1 ? 4 : 2));
      int sum = 0;
      for (int e = 0; e < 32; ++e) sum += qs[e];
      std::memcpy(base + L.qs_off + static_cast<size_t>(b) * 32, qs, 32);
      const float df = fp16_to_fp32(d);
      float2 ds;
      ds.x = df;
      std::memcpy(&ds.y, &sum, 4);
      std::memcpy(base + L.ds_off + static_cast<size_t>(b) * 8, &ds, 8);
    } else {
      block_q8_K blk;
      std::memcpy(&blk, src + static_cast<size_t>(b) * sizeof(block_q8_K), sizeof blk);
      std::memcpy(base + L.qs_off + static_cast<size_t>(b) * 256, blk.qs, 256);
      std::memcpy(base + L.ds_off + static_cast<size_t>(b) * 4, &blk.d, 4);
      std::memcpy(base + L.bsums_off + static_cast<size_t>(b) * 32, blk.bsums, 32);
    }
  }
  return true;
}

bool emulate_mmvq(TensorType type, const void* w, int64_t k, int64_t m, const void* acts,
                  int64_t n, float* y, int64_t ldy) {
  ActKind kind;
  if (n < 1 || n > 8 || !act_kind_for(type, &kind)) return false;
  const auto* wb = static_cast<const uint8_t*>(w);
  const int nn = static_cast<int>(n);
  if (kind == ActKind::Q8) {
    if (k % 32 != 0) return false;
    const Q8View a = q8_view(act_layout(kind, k, n), acts);
    switch (type) {
      case TensorType::Q4_0: return emulate_legacy<TensorType::Q4_0>(wb, k, m, a, nn, y, ldy);
      case TensorType::Q4_1: return emulate_legacy<TensorType::Q4_1>(wb, k, m, a, nn, y, ldy);
      case TensorType::Q5_0: return emulate_legacy<TensorType::Q5_0>(wb, k, m, a, nn, y, ldy);
      case TensorType::Q5_1: return emulate_legacy<TensorType::Q5_1>(wb, k, m, a, nn, y, ldy);
      case TensorType::Q8_0: return emulate_legacy<TensorType::Q8_0>(wb, k, m, a, nn, y, ldy);
      default: return false;
    }
  }
  if (kind == ActKind::Q8K) {
    if (k % 256 != 0) return false;
    const Q8KView a = q8k_view(act_layout(kind, k, n), acts);
    const bool aligned16 = (reinterpret_cast<uintptr_t>(w) & 15u) == 0;
    switch (type) {
      // As on the device: the direct-load kernel for 16-byte aligned Q4_K/Q5_K weights.
      // n = 1 with 16-byte aligned weights: also the lane kernel, which must agree bit for bit.
      case TensorType::Q4_K:
        return (aligned16 ? emulate_kquant_direct<TensorType::Q4_K>(wb, k, m, a, nn, y, ldy)
                          : emulate_kquant<TensorType::Q4_K>(wb, k, m, a, nn, y, ldy)) &&
               check_lane<TensorType::Q4_K>(wb, k, m, a, nn, y) && check_mma<TensorType::Q4_K>(wb, k, m, a, nn, y, ldy);
      case TensorType::Q5_K:
        return (aligned16 ? emulate_kquant_direct<TensorType::Q5_K>(wb, k, m, a, nn, y, ldy)
                          : emulate_kquant<TensorType::Q5_K>(wb, k, m, a, nn, y, ldy)) &&
               check_lane<TensorType::Q5_K>(wb, k, m, a, nn, y) && check_mma<TensorType::Q5_K>(wb, k, m, a, nn, y, ldy);
      case TensorType::Q6_K:
        return emulate_q6k(wb, k, m, a, nn, y, ldy) && check_lane<TensorType::Q6_K>(wb, k, m, a, nn, y) &&
               check_mma<TensorType::Q6_K>(wb, k, m, a, nn, y, ldy);
      default: return false;
    }
  }
  return false;
}

std::vector<int> lane_group_visits(int split, int64_t grid_warps, int64_t n_warps, int64_t n_groups,
                                   int64_t groups_per_warp) {
  std::vector<int> visits(static_cast<size_t>(n_groups), 0);
  for (int64_t wg = 0; wg < grid_warps; ++wg) {
    const LaneWarpRun run = lane_warp_run(split, wg, n_warps, n_groups, groups_per_warp);
    for (int64_t i = 0; i < run.count; ++i) {
      const int64_t g = run.first + i * run.step;
      if (g < 0 || g >= n_groups) return {};  // a group outside the grid: the caller sees a size mismatch
      ++visits[static_cast<size_t>(g)];
    }
  }
  return visits;
}

std::vector<int> lane_mixed_row_visits(int64_t rows_a, int64_t rows_total, int k_rows) {
  std::vector<int> visits(static_cast<size_t>(rows_total), 0);
  const int64_t groups_a = (rows_a + k_rows - 1) / k_rows;
  const int64_t n_groups = groups_a + (rows_total - rows_a + k_rows - 1) / k_rows;
  for (int64_t g = 0; g < n_groups; ++g)
    for (int j = 0; j < k_rows; ++j) {
      int64_t row = 0;
      bool second = false;
      if (!lane_mixed_row(groups_a, rows_a, rows_total, k_rows, g, j, &row, &second)) continue;
      if (row < 0 || row >= rows_total) return {};
      int& v = visits[static_cast<size_t>(row)];
      v = (second != (row >= rows_a)) ? -1 : v + 1;
    }
  return visits;
}

std::vector<std::pair<uint64_t, uint64_t>> l2_share_intervals(const std::vector<uint32_t>& bytes, int64_t n_warps) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (int64_t wg = 0; wg < n_warps; ++wg) {
    uint64_t lo = 0, hi = 0;
    const auto at = [&](size_t i) { return i < bytes.size() ? bytes[i] : 0u; };
    l2_share_bounds(at(0), at(1), at(2), l2_words_per_warp(bytes.data(), static_cast<int>(bytes.size()), n_warps), wg,
                    &lo, &hi);
    out.emplace_back(lo, hi);
  }
  return out;
}

std::vector<std::vector<int>> l2_request_word_visits(const std::vector<uint32_t>& bytes, int64_t n_warps) {
  std::vector<std::vector<int>> visits;
  for (const uint32_t b : bytes) visits.emplace_back(b / 16, 0);
  for (const auto& [lo, hi] : l2_share_intervals(bytes, n_warps)) {
    uint64_t base = 0;
    for (size_t r = 0; r < bytes.size(); ++r) {
      uint64_t off = 0;
      uint32_t n = 0;
      l2_range_piece(lo, hi, base, bytes[r], &off, &n);
      base += bytes[r];
      if (n == 0) continue;
      std::vector<int>& v = visits[r];
      if (off % 16 != 0 || n % 16 != 0 || off + n > bytes[r]) {
        v.assign(v.size(), -1);
        continue;
      }
      for (uint64_t w = off / 16; w < (off + n) / 16; ++w) ++v[w];
    }
  }
  return visits;
}

}  // namespace minfer::cuda::mm
