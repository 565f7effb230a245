#include "graph/weight_placement.h"

#include <algorithm>

#include <fmt/format.h>

namespace minfer {

WeightPlacement place_weight(const graph::WeightTensor& w, std::span<const TensorType> matrix_types,
                             std::string_view device) {
  WeightPlacement p;
  const bool one_d = w.ne[1] == 1 && w.ne[2] == 1 && w.ne[3] == 1;
  if (one_d) {
    if (w.type != TensorType::F32) {
      p.reason = fmt::format("{}: type {} is not placed on {}: 1-D tensors (norm weights, biases) "
                             "must be f32", w.name, type_name(w.type), device);
      return p;
    }
  } else if (std::find(matrix_types.begin(), matrix_types.end(), w.type) == matrix_types.end()) {
    std::string list;
    for (TensorType t : matrix_types) list += (list.empty() ? "" : ", ") + std::string(type_name(t));
    p.reason = fmt::format("{}: type {} has no {} kernel (supported: {})", w.name, type_name(w.type),
                           device, list.empty() ? "none" : list);
    return p;
  }
  p.kind = WeightPlacementKind::RawUpload;
  p.device_bytes = w.nbytes;
  return p;
}

}  // namespace minfer
