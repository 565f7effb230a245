// Which type each tensor of a model gets when the model is quantized to a file type such as
// q4_K_M: the "mix policy". The rules are llama.cpp's tensor-type policy (src/llama-quant.cpp at
// commit 80fb11ac: tensor_allows_quantization, llama_tensor_get_type_impl for the file types
// listed here, tensor_type_fallback), restated for the file types minfer writes, so a file from
// `minfer quantize` / `minfer synth` has the same type per tensor as llama-quantize would give.
// docs/quantize.md explains the policy in words.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/types.h"

namespace minfer {

/// A target file type. The numeric values are llama.cpp's `enum llama_ftype` (include/llama.h),
/// which is what GGUF `general.file_type` stores. Only the types minfer can write are listed.
enum class FileType : uint32_t {
  AllF32 = 0,
  MostlyF16 = 1,
  MostlyQ4_0 = 2,
  MostlyQ4_1 = 3,
  MostlyQ8_0 = 7,
  MostlyQ5_0 = 8,
  MostlyQ5_1 = 9,
  MostlyQ4_K_S = 14,
  MostlyQ4_K_M = 15,
  MostlyQ5_K_S = 16,
  MostlyQ5_K_M = 17,
  MostlyQ6_K = 18,
  MostlyBF16 = 32,
};

/// Parses a target name, case-insensitively: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q6_K q4_K_S
/// q4_K_M q5_K_S q5_K_M, and q4_K / q5_K, which name q4_K_M / q5_K_M as in llama-quantize
/// (tools/quantize/quantize.cpp QUANT_OPTIONS: "alias for Q4_K_M"). Throws minfer::Error
/// "unknown type '<name>' (supported: ...)".
FileType parse_file_type(std::string_view name);

/// The canonical name ("q4_K_M", "f16", ...), as parse_file_type accepts it.
std::string_view file_type_name(FileType ft);

/// The comma-separated list of accepted names (for help texts and errors).
std::string file_type_names();

/// The file type's base tensor type: what a quantizable tensor gets unless a rule says otherwise
/// (llama_ftype_get_default_type: q4_K_M -> q4_K, f16 -> f16, ...).
TensorType file_type_base(FileType ft);

/// One tensor as the policy sees it.
struct MixTensor {
  std::string name;          ///< GGUF tensor name, e.g. "blk.3.attn_v.weight"
  TensorType type;           ///< its current type (kept when the tensor is not quantizable)
  std::vector<int64_t> ne;   ///< dimensions in ggml order (ne[0] = row length), 1..4 entries
};

/// The policy's answer for one tensor.
struct MixChoice {
  TensorType type = TensorType::F32;    ///< the type to write
  TensorType wanted = TensorType::F32;  ///< the type chosen before the fallback rule
  bool quantizable = false;  ///< a weight matrix the file type applies to (see is_quantizable)
  bool fell_back = false;    ///< ne[0] is not a multiple of wanted's block size: type != wanted
};

/// Model-wide facts the per-tensor rule needs.
struct MixParams {
  FileType ftype = FileType::MostlyQ4_K_M;
  bool pure = false;            ///< llama-quantize --pure: no per-tensor rules, only the fallback
  int n_layer = 0;              ///< `<arch>.block_count`
  int n_attn_v = 0;             ///< number of attn_v-like tensors (attn_v, attn_qkv, attn_kv_b)
  bool tied_embeddings = true;  ///< no output.weight: token_embd is also the output matrix
};

/// llama.cpp's tensor_allows_quantization for the tensors of Qwen-like models: at least two
/// dimensions larger than 1 (ggml_n_dims >= 2), a name ending in "weight" and not containing
/// "_norm.weight". Everything else (norms, biases) keeps its type.
bool is_quantizable(const MixTensor& t);

/// The fallback of a type whose block does not divide the row length `ne0` (llama.cpp
/// tensor_type_fallback): q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0, and f16 when that type's
/// 32-element block does not divide ne0 either (also for the 32-element types themselves).
/// Returns `wanted` unchanged when its block divides ne0.
TensorType fallback_type(TensorType wanted, int64_t ne0);

/// The per-tensor rule (a pure function). `attn_v_index` is the tensor's ordinal among the
/// attn_v-like tensors and `ffn_down_index` among the ffn_down tensors, both counted in
/// llama_tensor_order (for a dense model: the layer number). The rules for the mixes:
/// - output.weight, and token_embd.weight when the embeddings are tied: q6_K (q8_0 when ne[0]
///   is not a multiple of the base type's block, and for the q8_0 file type);
/// - attn_v: q6_K in the "more bits" layers (use_more_bits below) for q4_K_M and q5_K_M; q5_K
///   in the first 4 for q4_K_S;
/// - ffn_down: q6_K in the "more bits" layers for q4_K_M and q5_K_M; q5_K in the first
///   n_layer/8 for q4_K_S;
/// - everything else quantizable: the base type; the rest keeps its type. Non-quantized base
///   types (f32, f16, bf16) apply to every quantizable tensor, with no rules.
/// Then fallback_type for block types.
MixChoice choose_tensor_type(const MixParams& p, const MixTensor& t, int attn_v_index,
                             int ffn_down_index);

/// The one-line note for a tensor that got a fallback type, e.g. "blk.0.attn_q.weight: row
/// length 896 is not a multiple of 256 (the q4_K block); written as q5_0".
std::string describe_fallback(const MixTensor& t, const MixChoice& c);

/// llama.cpp's "more bits" layers (use_more_bits in llama_tensor_get_type_impl): the first and
/// last eighth of the layers and every third layer in between.
bool use_more_bits(int i_layer, int n_layer);

/// Order of tensors in files llama-quantize writes (llama_model_loader's weight_name_comparer):
/// tensors outside "blk.N." first, then by layer number N, names in byte order within a group.
bool llama_tensor_order_less(std::string_view a, std::string_view b);

/// Types for a whole model: counts the attn_v-like tensors, detects tied embeddings, walks the
/// tensors in llama_tensor_order to number attn_v and ffn_down, and applies choose_tensor_type.
/// `n_layer` is `<arch>.block_count`. Returns one choice per tensor, in the order of `tensors`.
std::vector<MixChoice> plan_tensor_types(FileType ftype, std::span<const MixTensor> tensors,
                                         int n_layer, bool pure);

}  // namespace minfer
