// The tiled matrix kernel of the SIMD levels (gemm_tile for nc >= 3): R weight rows x V token
// vectors per register tile, layouts of gemm_pack.h. Included only from *_avx2.cpp /
// *_avx512.cpp files (isa.h).
//
// Order of the f32 work, for each (row, token) lane: the contract of quant_ref.h. Lane L of the
// 32 contract lanes is computed on its own (blocks L, L + 32, L + 64, ... in increasing order,
// starting from +0.0), the 32 lane values of the tile are stored, and the halving fold is done on
// them. Lanes that receive no block stay +0.0 and are skipped in the fold, which is exact: adding
// +0.0 to a lane changes nothing (a lane is never -0.0, as it starts at +0.0).
#pragma once

#include <algorithm>

#include "cpu/simd/gemm_pack.h"
#include "cpu/simd/scratch.h"

namespace minfer::cpu::simd::MINFER_SIMD_NS {

/// Term of one legacy unit for R rows x V token vectors, added to facc.
template <int R, int V, bool kMin>
inline void unit_legacy(const PanelLegacy* p, const uint8_t* const* a, F (&facc)[R][V]) {
  using U = std::conditional_t<kMin, ActQ8_1, ActQ8_0>;
  I acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const I c = TV::bcast(&p[r].corr);
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = c;
  }
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) {
    I av[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) av[v] = TV::load(a[v] + static_cast<size_t>(g) * kW * 4);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const I wb = TV::bcast(p[r].w + 4 * g);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) acc[r][v] = TV::dot4(acc[r][v], av[v], wb);
    }
  }
  F da[V], as[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    da[v] = TV::loadf(a[v] + U::kDaOffset);
    if constexpr (kMin) as[v] = TV::cvt(TV::load(a[v] + U::kExtraOffset));
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const F dw = TV::bcastf(&p[r].d);
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      F t = TV::mul(TV::mul(dw, da[v]), TV::cvt(acc[r][v]));
      if constexpr (kMin) t = TV::add(t, TV::mul(TV::mul(TV::bcastf(&p[r].m), da[v]), as[v]));
      facc[r][v] = TV::add(facc[r][v], t);
    }
  }
}

/// Term of one Q4_K / Q5_K super-block.
template <int R, int V>
inline void unit_k45(const PanelK45* p, const uint8_t* const* a, F (&facc)[R][V]) {
  I isum[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) isum[r][v] = TV::zeroi();
  for (int j = 0; j < 8; ++j) {
    I sub[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const I c = TV::bcast(&p[r].corr[j]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) sub[r][v] = c;
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      I av[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) av[v] = TV::load(a[v] + static_cast<size_t>(8 * j + g) * kW * 4);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const I wb = TV::bcast(p[r].w + 32 * j + 4 * g);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) sub[r][v] = TV::dot4(sub[r][v], av[v], wb);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const I sc = TV::bcast(&p[r].sc[j]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) isum[r][v] = TV::addi(isum[r][v], TV::mullo(sub[r][v], sc));
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    const F da = TV::loadf(a[v] + ActQ8_K::kDaOffset);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      I ms = TV::zeroi();
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q)
        ms = TV::dot2(ms, TV::load(a[v] + ActQ8_K::kExtraOffset + static_cast<size_t>(q) * kW * 4),
                      TV::bcast(&p[r].mpair[q]));
      const F t1 = TV::mul(TV::mul(TV::bcastf(&p[r].d), da), TV::cvt(isum[r][v]));
      const F t2 = TV::mul(TV::mul(TV::bcastf(&p[r].dmin), da), TV::cvt(ms));
      facc[r][v] = TV::add(facc[r][v], TV::sub(t1, t2));
    }
  }
}

/// Term of one Q6_K super-block.
template <int R, int V>
inline void unit_k6(const PanelK6* p, const uint8_t* const* a, F (&facc)[R][V]) {
  I isum[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) isum[r][v] = TV::zeroi();
  for (int s = 0; s < 16; ++s) {
    I sub[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const I c = TV::bcast(&p[r].corr[s]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) sub[r][v] = c;
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      I av[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) av[v] = TV::load(a[v] + static_cast<size_t>(4 * s + g) * kW * 4);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const I wb = TV::bcast(p[r].w + 16 * s + 4 * g);
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) sub[r][v] = TV::dot4(sub[r][v], av[v], wb);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const I sc = TV::bcast(&p[r].sc[s]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) isum[r][v] = TV::addi(isum[r][v], TV::mullo(sub[r][v], sc));
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    const F da = TV::loadf(a[v] + ActQ8_K::kDaOffset);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      facc[r][v] = TV::add(facc[r][v], TV::mul(TV::mul(TV::bcastf(&p[r].d), da), TV::cvt(isum[r][v])));
  }
}

/// Per weight type: panel entry, activation kind, unit size, how to unpack a row, unit term.
struct GemmQ4_0 {
  using Panel = PanelLegacy;
  static constexpr ActKind kAct = ActKind::kQ8_0;
  static constexpr int64_t kUnit = kQK;
  static void unpack(const uint8_t* row, int64_t n, Panel* d, int s) { unpack_legacy_row<block_q4_0>(row, n, d, s); }
  template <int R, int V>
  static void term(const Panel* p, const uint8_t* const* a, F (&f)[R][V]) { unit_legacy<R, V, false>(p, a, f); }
};
struct GemmQ5_0 : GemmQ4_0 {
  static void unpack(const uint8_t* row, int64_t n, Panel* d, int s) { unpack_legacy_row<block_q5_0>(row, n, d, s); }
};
struct GemmQ8_0 : GemmQ4_0 {
  static void unpack(const uint8_t* row, int64_t n, Panel* d, int s) { unpack_legacy_row<block_q8_0>(row, n, d, s); }
};
struct GemmQ4_1 {
  using Panel = PanelLegacy;
  static constexpr ActKind kAct = ActKind::kQ8_1;
  static constexpr int64_t kUnit = kQK;
  static void unpack(const uint8_t* row, int64_t n, Panel* d, int s) { unpack_legacy_row<block_q4_1>(row, n, d, s); }
  template <int R, int V>
  static void term(const Panel* p, const uint8_t* const* a, F (&f)[R][V]) { unit_legacy<R, V, true>(p, a, f); }
};
struct GemmQ5_1 : GemmQ4_1 {
  static void unpack(const uint8_t* row, int64_t n, Panel* d, int s) { unpack_legacy_row<block_q5_1>(row, n, d, s); }
};
struct GemmQ4_K {
  using Panel = PanelK45;
  static constexpr ActKind kAct = ActKind::kQ8_K;
  static constexpr int64_t kUnit = kQKK;
  static void unpack(const uint8_t* row, int64_t n, Panel* d, int s) { unpack_k45_row<false>(row, n, d, s); }
  template <int R, int V>
  static void term(const Panel* p, const uint8_t* const* a, F (&f)[R][V]) { unit_k45<R, V>(p, a, f); }
};
struct GemmQ5_K : GemmQ4_K {
  static void unpack(const uint8_t* row, int64_t n, Panel* d, int s) { unpack_k45_row<true>(row, n, d, s); }
};
struct GemmQ6_K {
  using Panel = PanelK6;
  static constexpr ActKind kAct = ActKind::kQ8_K;
  static constexpr int64_t kUnit = kQKK;
  static void unpack(const uint8_t* row, int64_t n, Panel* d, int s) { unpack_k6_row(row, n, d, s); }
  template <int R, int V>
  static void term(const Panel* p, const uint8_t* const* a, F (&f)[R][V]) { unit_k6<R, V>(p, a, f); }
};

template <ActKind K>
constexpr size_t act_unit_bytes() {
  return K == ActKind::kQ8_K ? ActQ8_K::kBytes : K == ActKind::kQ8_1 ? ActQ8_1::kBytes : ActQ8_0::kBytes;
}

/// One R x (V * W) tile over all units: res[r][v][i] = dot of panel row r and token v * W + i.
/// Lane L of the contract (quant_ref.h) sums units L, L + 32, ... from zero; lanes L and L + 16
/// are summed one after the other and added in registers (the fold's first step, w = 16), so
/// only 16 lanes go through memory for the steps w = 8 .. 1. Same adds in the same order.
template <class G, int R, int V>
void gemm_micro(const typename G::Panel* panel, const uint8_t* const* chunks, int64_t nunits,
                float* res) {
  constexpr size_t kUB = act_unit_bytes<G::kAct>();
  constexpr int kVec = R * V * kW;  // floats per lane
  alignas(64) float lanes[16 * kVec];
  const int nl = static_cast<int>(std::min<int64_t>(32, nunits));
  const auto lane_sum = [&](int L, F (&facc)[R][V]) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) facc[r][v] = TV::zero();
    for (int64_t b = L; b < nunits; b += 32) {
      const uint8_t* a[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) a[v] = chunks[v] + static_cast<size_t>(b) * kUB;
      G::template term<R, V>(panel + b * R, a, facc);
    }
  };
  const int nlow = std::min(nl, 16);
  for (int L = 0; L < nlow; ++L) {
    F lo[R][V];
    lane_sum(L, lo);
    if (L + 16 < nl) {
      F hi[R][V];
      lane_sum(L + 16, hi);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) lo[r][v] = TV::add(lo[r][v], hi[r][v]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) TV::store(lanes + L * kVec + (r * V + v) * kW, lo[r][v]);
  }
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w && k + w < nl; ++k)
      for (int e = 0; e < kVec; e += kW)
        TV::store(lanes + k * kVec + e,
                  TV::add(TV::loadf(lanes + k * kVec + e), TV::loadf(lanes + (k + w) * kVec + e)));
  std::copy(lanes, lanes + kVec, res);
}

/// Rows per register tile: 4 with 32 vector registers (avx512), 2 with 16 (avx2).
inline constexpr int kTileRows = MINFER_SIMD_AVX512 ? 4 : 2;
/// From this many token rows on, the tiled kernel beats the row-at-a-time one.
inline constexpr int64_t kMinTiledTokens = 3;
/// From this many token rows on, the tiled kernel (on rows rebuilt from the packed form) beats
/// the packed kernel.
inline constexpr int64_t kMinTiledTokensPacked = 16;

/// The tiled gemm (arguments of GemmTileFn, already checked; nunits = k / G::kUnit). row_at(j)
/// gives weight row j in the standard layout (valid until the next call).
template <class G, int R, class RowAt>
void gemm_tiled(int64_t nunits, RowAt row_at, int64_t nr, const void* a, size_t a_row_bytes,
                int64_t nc, float* out, int64_t out_stride) {
  constexpr int kRowGroup = 4 * R;  // rows whose panels are unpacked together
  constexpr size_t kUB = act_unit_bytes<G::kAct>();
  using Panel = typename G::Panel;
  const int64_t nchunks = (nc + kW - 1) / kW;
  const size_t chunk_bytes = static_cast<size_t>(nunits) * kUB;
  auto* acts = static_cast<uint8_t*>(scratch(ScratchSlot::kActPack, chunk_bytes * static_cast<size_t>(nchunks)));
  auto* panel = static_cast<Panel*>(scratch(ScratchSlot::kPanel, sizeof(Panel) * static_cast<size_t>(nunits) * kRowGroup));
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int64_t c = 0; c < nchunks; ++c)
    pack_act_chunk<G::kAct>(ab, a_row_bytes, c * kW, static_cast<int>(std::min<int64_t>(kW, nc - c * kW)),
                            nunits, acts + static_cast<size_t>(c) * chunk_bytes);
  alignas(64) float res[R * 2 * kW];
  for (int64_t j0 = 0; j0 < nr; j0 += kRowGroup) {
    const int rows = static_cast<int>(std::min<int64_t>(kRowGroup, nr - j0));
    const int nsub = (rows + R - 1) / R;
    for (int sp = 0; sp < nsub; ++sp)
      for (int r = 0; r < R; ++r) {
        const int64_t j = std::min<int64_t>(j0 + sp * R + r, nr - 1);  // pad with the last row
        G::unpack(row_at(j), nunits,
                  panel + static_cast<size_t>(sp) * nunits * R + r, R);
      }
    for (int64_t c = 0; c < nchunks; c += 2) {
      const int nv = static_cast<int>(std::min<int64_t>(2, nchunks - c));
      const uint8_t* ch[2] = {acts + static_cast<size_t>(c) * chunk_bytes,
                              acts + static_cast<size_t>(c + nv - 1) * chunk_bytes};
      for (int sp = 0; sp < nsub; ++sp) {
        const Panel* p = panel + static_cast<size_t>(sp) * nunits * R;
        if (nv == 2) gemm_micro<G, R, 2>(p, ch, nunits, res);
        else gemm_micro<G, R, 1>(p, ch, nunits, res);
        for (int r = 0; r < R; ++r) {
          const int64_t j = j0 + sp * R + r;
          if (j >= nr) break;
          for (int v = 0; v < nv; ++v)
            for (int i = 0; i < kW; ++i) {
              const int64_t t = (c + v) * kW + i;
              if (t >= nc) break;
              out[j + t * out_stride] = res[(r * nv + v) * kW + i];
            }
        }
      }
    }
  }
}

}  // namespace minfer::cpu::simd::MINFER_SIMD_NS
