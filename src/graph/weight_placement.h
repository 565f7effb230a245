// The one rule that decides how a model tensor is placed on a device backend (the CUDA backend
// today). It is a pure function: no device, no environment, so the CPU test suite checks it and
// every model loader / backend asks it instead of carrying its own copy.
//
// The rule (docs/cuda.md, "Weights"):
//  - Weights stay in their file format: a placed tensor is uploaded byte for byte (quantized
//    blocks as in the GGUF file, f16/bf16 at 2 bytes per element, f32 at 4).
//  - A 1-D tensor (norm weights, biases: every dimension after ne[0] is 1) must be f32: the
//    device norm and bias kernels read 4-byte elements.
//  - A matrix (2-D or more) must have a type the device kernels support (the caller's list).
//  - Anything else is refused with one line naming the tensor and its type; the caller turns it
//    into an error (a model runs on the device all or nothing, never half on the CPU).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/types.h"
#include "graph/graph.h"

namespace minfer {

enum class WeightPlacementKind : uint8_t {
  RawUpload,  ///< upload the file bytes unchanged (nbytes = the tensor's size in the file)
  Refused,    ///< the device cannot use this tensor; `reason` says why
};

struct WeightPlacement {
  WeightPlacementKind kind = WeightPlacementKind::Refused;
  uint64_t device_bytes = 0;  ///< bytes the device copy takes (RawUpload: w.nbytes)
  std::string reason;         ///< Refused: "<tensor>: type <t> has no CUDA kernel (...)"
};

/// Decides how `w` is placed on a device whose kernels support matrices of `matrix_types`
/// (e.g. the types with both a matmul and an embedding-gather kernel). `device` names the device
/// in the refusal text ("CUDA"). Pure: the same inputs always give the same answer.
/// A tensor is "1-D" when ne[1] = ne[2] = ne[3] = 1, whatever n_dims says.
WeightPlacement place_weight(const graph::WeightTensor& w, std::span<const TensorType> matrix_types,
                             std::string_view device = "CUDA");

}  // namespace minfer
