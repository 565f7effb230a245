// Tensor element types. The numeric values are ggml's `enum ggml_type`, which is what the GGUF
// tensor-info table stores (GGUF v3 spec, "ggml_type"). Types we read but cannot compute with
// are listed so the reader can name them in its error messages.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string_view>

namespace minfer {

enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  // 4 and 5 were Q4_2 / Q4_3, removed from ggml.
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
};

/// ggml's name for a type ("f32", "q4_K", ...), or "type#N" for a value ggml never defined.
std::string_view type_name(TensorType t);

/// Writes type_name(t) (test output and logs: GoogleTest prints parameters with it instead of
/// their raw bytes).
std::ostream& operator<<(std::ostream& os, TensorType t);

/// Parses a ggml type name, case-insensitively ("Q4_K", "q4_k", "bf16"). nullopt when unknown.
std::optional<TensorType> parse_type_name(std::string_view name);

/// True when `v` is a value of enum ggml_type that ggml defines (known name), whether or not
/// minfer can compute with it.
bool is_known_type_id(uint32_t v);

}  // namespace minfer
