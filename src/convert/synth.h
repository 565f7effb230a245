// `minfer synth`: writes a model with the exact shape and metadata of a public configuration
// (synth_presets.h) and seeded random weights, for benchmarks and tests where real weights
// cannot be downloaded. Types per tensor come from the same mix policy as `minfer quantize`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "convert/synth_presets.h"
#include "quant/mix_policy.h"
#include "tokenizer/vocab.h"

namespace minfer::convert {

struct SynthOptions {
  std::string arch;    ///< "qwen2" / "qwen3" / "llama"
  std::string preset;  ///< synth_presets() name
  std::string vocab;   ///< GGUF or tokenizer.json with the tokenizer (synth_vocab.h)
  std::string output;  ///< GGUF file to write (via a temporary file beside it)
  FileType ftype = FileType::MostlyQ4_K_M;
  uint64_t seed = 0;
  int n_threads = 0;      ///< 0: default_thread_count()
  bool pure = false;      ///< every matrix gets the base type
  int64_t n_layer = 0;    ///< layers to write: 0 = the preset's; 1..kSynthMaxLayers replaces it
                          ///< (the first layers of a deeper or shallower copy, for profiling)
  bool progress = true;   ///< progress bar on stderr when it is a terminal
  /// 0: every row of every matrix is generated and quantized. N in 1..2^31: only the first N
  /// rows of each matrix are; the others repeat them in a seeded order (TensorJob::distinct_rows):
  /// the same shapes, types and bytes per row, written in seconds, for speed benchmarks (kernel
  /// time does not depend on weight values). Out of range: minfer::Error naming the value.
  int64_t distinct_rows = 0;
  /// `minfer synth --ascii-output`: the rows of output.weight (token_embd.weight when the preset
  /// ties them) of every token that synth_ascii_output_rows() does not keep are zero, so their
  /// logit is exactly 0 while the kept tokens' logits have std kSynthLogitStd: greedy decoding
  /// then emits printable ASCII text. Without it a random model's greedy output is arbitrary
  /// bytes (partial UTF-8 sequences, control tokens), and a server that checks its stream's
  /// UTF-8 ends the stream (llama-server 80fb11ac answers "The model produced output that does not
  /// match the expected Content-only format"). Costs no speed: the rows keep their type and size.
  bool ascii_output = false;
};

/// The most layers `SynthOptions::n_layer` may ask for (GGUF block_count is a u32; this bound
/// keeps a typo from writing terabytes).
inline constexpr int64_t kSynthMaxLayers = 1024;

/// The most `SynthOptions::distinct_rows` may ask for (any larger count is every row of every
/// preset's matrices anyway).
inline constexpr int64_t kSynthMaxDistinctRows = int64_t{1} << 31;

struct SynthReport {
  const SynthPreset* preset = nullptr;
  int64_t n_layer = 0;         ///< layers written (the preset's unless SynthOptions::n_layer)
  uint64_t n_params = 0;       ///< elements of all tensors
  uint64_t bytes = 0;          ///< tensor data bytes written
  int64_t vocab_tokens = 0;    ///< tokens in the vocabulary file (before padding)
  std::vector<std::string> fallback_notes;  ///< as QuantizeReport::fallback_notes
};

/// The standard deviation of the logits that the output scale aims at: token_embd and
/// output.weight are drawn with std kSynthLogitStd / sqrt(n_embd), and the final RMS norm gives
/// the hidden state a norm of about sqrt(n_embd), so each logit has std ~ kSynthLogitStd.
inline constexpr float kSynthLogitStd = 4.0f;

/// The gain of the matrices that write into the residual stream (attn_output, ffn_down). With
/// tied embeddings the input token's own embedding, left in the residual stream, adds
/// |e|^2 / rms(h) = kSynthLogitStd^2 / rms(h) to its own logit; unchecked, that makes the greedy
/// continuation repeat one token. Layer outputs of RMS ~kSynthResidualGain keep that bonus to
/// ~kSynthLogitStd / 2 even for a 2-layer model, as the layer outputs dominate the stream.
inline constexpr float kSynthResidualGain = 8.0f;

/// The gain of the query and key projections (and of Qwen3's q/k norms, which would otherwise
/// undo it): attention scores get a std of ~kSynthAttnGain^2 instead of ~1. With scores of std 1
/// attention averages over the whole context, consecutive positions see nearly the same
/// residual stream, and greedy decoding repeats its last token in runs (measured on
/// qwen2.5-0.5b, 4 prompts x 48 tokens: 58 adjacent repeats with gain 1, 1 with gain 2).
inline constexpr float kSynthAttnGain = 2.0f;

/// How element values are drawn, by tensor role (z is synth_random.h's normal_like, mean 0 and
/// std 1, from (seed, tensor name, element index)):
/// - token_embd.weight, output.weight: z * kSynthLogitStd / sqrt(n_embd);
/// - attn_output.weight, ffn_down.weight: z * kSynthResidualGain / sqrt(ne[0]);
/// - attn_q.weight, attn_k.weight: z * kSynthAttnGain / sqrt(ne[0]); attn_q_norm.weight,
///   attn_k_norm.weight: kSynthAttnGain * (1 + 0.05 z);
/// - other matrices: z / sqrt(ne[0]) (ne[0] = input width), so each output of a layer whose
///   input has unit RMS (after a norm) has std ~1;
/// - norms (*_norm.weight): 1 + 0.05 z; biases (*.bias): 0.1 z.
/// Returns {mean, std} for a tensor name and row length.
struct SynthScale {
  float mean;
  float std;
};
SynthScale synth_scale(std::string_view name, int64_t ne0, int64_t n_embd);

/// The rope_freqs.weight of a preset with Llama-3.1 rope scaling (SynthPreset::rope_factor > 0):
/// head_dim / 2 divisors of the pairs' frequencies, by Meta's rule (the config's factor,
/// low_freq_factor, high_freq_factor and original_max_position_embeddings): 1 for wavelengths
/// below orig / high, factor above orig / low, a smooth blend between.
std::vector<float> llama3_rope_freq_factors(const SynthPreset& p);

/// One tensor of a synth model: name, shape (ggml order) and the mix policy's choice.
struct SynthTensor {
  std::string name;
  std::vector<int64_t> ne;
  MixChoice choice;
};

/// The tensors synth writes for `preset` and `ftype`, in file order (llama_tensor_order), with
/// llama.cpp's names (LLM_TN) and shapes and the types plan_tensor_types gives them.
std::vector<SynthTensor> synth_tensor_plan(const SynthPreset& preset, FileType ftype, bool pure);

/// Tensor data bytes of a plan (what llama-bench reports as the model size).
uint64_t synth_plan_bytes(const std::vector<SynthTensor>& plan);

/// One flag per token of `vocab` (SentencePiece or byte-level BPE): true for a token that
/// SynthOptions::ascii_output zeroes, i.e. any token that is not Normal, or whose bytes are not
/// all printable ASCII (' '..'~'), '\n' or '\t' (SentencePiece: U+2581 counts as ' ').
std::vector<bool> synth_ascii_output_rows(const tok::VocabData& vocab);

/// Writes the model. Metadata (llama.cpp's key names for the architecture, as its converter
/// writes them): general.architecture, .type "model", .name (the public model's name plus
/// " (synthetic)"), .size_label, .description (the seed and the source of the shape), the
/// `<arch>.*` hyper-parameters (qwen3 adds attention.key_length / value_length), the tokenizer
/// keys (synth_vocab.h), then general.quantization_version 2 and general.file_type.
/// Tensors in llama_tensor_order with llama.cpp's names and shapes. The file's bytes depend only
/// on (preset, vocab, type, seed, pure), not on the thread count.
/// Throws minfer::Error (one line) for an unknown architecture or preset, a vocabulary problem
/// (synth_vocab.h), or an unwritable output (before any weight is generated).
SynthReport synth_model(const SynthOptions& opt);

}  // namespace minfer::convert
