// `minfer quantize`: rewrites a GGUF model with its weight matrices in another type, choosing
// each tensor's type with the mix policy (quant/mix_policy.h, llama.cpp's rules), copying every
// metadata key, and writing the tensors in llama-quantize's order. Memory stays bounded: the
// input is memory-mapped and each output tensor is encoded straight into the writer's buffer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/mix_policy.h"

namespace minfer::convert {

struct QuantizeOptions {
  std::string input;                         ///< GGUF file to read
  std::string output;                        ///< GGUF file to write (via a temporary file beside it)
  FileType ftype = FileType::MostlyQ4_K_M;   ///< target file type
  int n_threads = 0;                         ///< 0: default_thread_count()
  bool pure = false;                         ///< every matrix gets the base type (--pure)
  bool progress = true;                      ///< progress bar on stderr when it is a terminal
};

/// What was done, for the command's summary line and for tests.
struct QuantizeReport {
  size_t n_tensors = 0;
  size_t n_converted = 0;  ///< tensors re-encoded (dequantized or converted, then quantized)
  size_t n_copied = 0;     ///< tensors whose type did not change: bytes copied verbatim
  size_t n_fallback = 0;   ///< tensors that got a fallback type (row length vs block size)
  uint64_t bytes_in = 0;   ///< tensor data bytes read
  uint64_t bytes_out = 0;  ///< tensor data bytes written
  /// One line per tensor that needed a fallback type, e.g. "blk.0.attn_q.weight: row length
  /// 896 is not a multiple of 256 (the q4_K block); written as q5_0". Also logged as warnings.
  std::vector<std::string> fallback_notes;
  /// Quantized input types whose tensors were written in another quantized type (requantization
  /// adds a second rounding error; the command warns about it).
  std::vector<TensorType> requantized_from;
  /// Quantized input types whose tensors were written as f32/f16/bf16: the values keep the source's
  /// quantization error (the command says so; no second quantization happens).
  std::vector<TensorType> dequantized_from;
};

/// Quantizes `opt.input` to `opt.output`.
/// Metadata: every key of the input is copied in order (values unchanged), then
/// general.quantization_version (u32 2, ggml's GGML_QNT_VERSION) and general.file_type (u32, the
/// llama_ftype value) are moved to the end, as llama-quantize does.
/// Tensors: in llama_tensor_order; types from plan_tensor_types with n_layer from
/// `<general.architecture>.block_count` (or the number of distinct "blk.N." layers when the key
/// is absent). A tensor whose type does not change is copied byte for byte; 1-D tensors
/// (norms, biases) stored in another type than f32 are converted to f32.
/// Errors (minfer::Error, one line): unreadable or malformed input, an input tensor type minfer
/// cannot dequantize when the tensor must change type (naming tensor and type), input and
/// output naming the same file, a split file (split.count > 1), an unwritable output (reported
/// before any tensor is encoded), a row a quantizer rejects (naming tensor and row). On error
/// the output path is left untouched.
QuantizeReport quantize_model(const QuantizeOptions& opt);

}  // namespace minfer::convert
