// Bad-input codes that kernels report through a backend's two fault words (word 0: the OR of the
// codes, word 1: the first offending value). Kernels cannot throw; the backend reads the words
// at synchronize() and turns them into a minfer::Error (docs/cuda.md, "Launch checks and
// errors"). Host and device code include this header.
#pragma once

#include <cstdint>

namespace minfer::cuda {

enum FaultCode : uint32_t {
  kFaultRowId = 1u,   ///< get_rows: a row id outside the table
  kFaultKvCell = 2u,  ///< KV store: a cell index outside the region
  /// The f16 prefill GEMM: an activation or FFN h value beyond the f16 range (|x| >= 65520
  /// rounds to infinity); the value is its magnitude, saturated to 2^31 - 1.
  kFaultF16Range = 4u,
};

}  // namespace minfer::cuda
