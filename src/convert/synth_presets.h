// Model shapes for `minfer synth`: the public configurations of Qwen2.5 / Qwen3 / Llama 3.x /
// Mistral models (facts
// copied from their Hugging Face config.json files, each row naming its source) and tiny
// shapes for tests.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace minfer::convert {

/// One model shape. Field names follow the GGUF keys they become (`<arch>.embedding_length`
/// ...); the HF config.json field is given in each comment.
struct SynthPreset {
  std::string_view arch;        ///< GGUF general.architecture: "qwen2", "qwen3" or "llama"
  std::string_view name;        ///< preset name on the command line, e.g. "qwen2.5-7b"
  std::string_view model_name;  ///< the public model it copies, e.g. "Qwen2.5-7B-Instruct"
  std::string_view source;      ///< where the numbers come from
  int64_t n_embd;       ///< hidden_size
  int64_t n_layer;      ///< num_hidden_layers
  int64_t n_head;       ///< num_attention_heads
  int64_t n_head_kv;    ///< num_key_value_heads
  int64_t head_dim;     ///< head_dim (Qwen3), hidden_size / num_attention_heads (Qwen2)
  int64_t n_ff;         ///< intermediate_size
  int64_t n_vocab;      ///< vocab_size (rows of token_embd; the token list is padded to it)
  int64_t n_ctx_train;  ///< max_position_embeddings
  float rope_theta;     ///< rope_theta
  float rms_eps;        ///< rms_norm_eps
  bool tied;            ///< tie_word_embeddings (no output.weight)
  /// Llama 3.1+ rope_scaling {rope_type "llama3", factor, low_freq_factor, high_freq_factor,
  /// original_max_position_embeddings}: written as rope_freqs.weight, the per-pair frequency
  /// divisors llama.cpp's converter computes (llama3_rope_freq_factors). factor 0: none.
  float rope_factor = 0.0f;
  float rope_low_freq_factor = 0.0f;
  float rope_high_freq_factor = 0.0f;
  int64_t rope_orig_ctx = 0;

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  bool has_rope_freqs() const { return rope_factor > 0.0f; }
  /// Elements of all tensors of the model (embeddings counted once when tied).
  uint64_t n_params() const;
};

/// Every preset, public ones first.
std::span<const SynthPreset> synth_presets();

/// The preset `name` of architecture `arch`. Throws minfer::Error naming the unknown
/// architecture, or the unknown preset with the list of presets of that architecture, or a
/// preset that exists only for the other architecture.
const SynthPreset& find_synth_preset(std::string_view arch, std::string_view name);

}  // namespace minfer::convert
