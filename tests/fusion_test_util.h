// Helpers of the graph-only FusionPass tests: a backend that claims every fused op, and f32
// weight descriptors (no data: the pass only looks at types and shapes).
#pragma once

#include <string>

#include "cpu/cpu_backend.h"
#include "graph/fusion.h"

namespace minfer::graph::test {

/// A CPU backend whose supports_fused says yes to every op (the device-only rules fire).
class FusesEverything : public cpu::CpuBackend {
 public:
  FusesEverything() : CpuBackend(1) {}
  bool supports_fused(Op) const override { return true; }
};

/// An f32 weight of ggml shape [ne0, ne1] (1-D when ne1 == 1), without data.
inline WeightTensor f32_weight(const std::string& name, int64_t ne0, int64_t ne1) {
  WeightTensor w;
  w.name = name;
  w.type = TensorType::F32;
  w.ne = {ne0, ne1, 1, 1};
  w.n_dims = ne1 == 1 ? 1 : 2;
  return w;
}

}  // namespace minfer::graph::test
