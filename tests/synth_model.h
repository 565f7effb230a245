// A tiny random Qwen2 / Qwen3 / Llama model written with the project's GGUF writer, for tests that need a
// model of a given weight type (the fixture models are Q8_0 and Q4_0 only). The file follows
// llama.cpp's tensor names and metadata keys (../shared/fixtures/models/README.md lists them);
// it has no tokenizer (the loader does not need one; tests feed token ids).
//
// Weights are seeded normal values, quantized with the reference quantizer of the chosen type
// (2-D tensors; 1-D norms and biases stay f32). Scales keep activations O(1) and make the logits
// spread (std about 4) so greedy decoding is not a sequence of near-ties.
#pragma once

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"
#include "quant/quant.h"

namespace minfer::test {

struct SynthSpec {
  /// "qwen2" (q/k/v biases, tied output), "qwen3" (q/k norms, untied) or "llama" (no biases,
  /// untied unless llama_tied, rope_freqs.weight when llama_rope_freqs)
  std::string arch = "qwen2";
  TensorType type = TensorType::Q8_0;  ///< every 2-D weight
  int64_t n_embd = 256;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t head_dim = 64;
  int64_t n_ff = 512;
  int64_t n_vocab = 512;
  uint32_t n_ctx_train = 4096;
  float rope_theta = 1e6f;
  uint32_t seed = 1;
  bool llama_tied = false;        ///< llama: no output.weight (Llama-3.2 1B/3B)
  bool llama_rope_freqs = false;  ///< llama: a rope_freqs.weight of Llama-3.1's frequency factors
  std::string omit_tensor;         ///< leave this tensor out (error tests)
  std::string wrong_shape_tensor;  ///< give this tensor one extra row (error tests)
  int64_t block_count = -1;        ///< written as <arch>.block_count (-1: n_layer; error tests)
  std::vector<std::string> extra_tensors;  ///< 1-D f32 tensors of n_embd values added (error tests)
  /// Changes a tensor's f32 values (k x m, row-major: row r at r * k) before they are quantized
  /// and written, e.g. to plant a NaN (error tests).
  std::function<void(const std::string& name, std::vector<float>& values)> edit_values;
  std::function<void(gguf::GgufWriter&)> extra_metadata;  ///< adds keys after the hyper-parameters
};

/// Writes the model to `dir`/synth-<arch>-<type>.gguf and returns the path.
inline std::filesystem::path write_synth_model(const SynthSpec& s, const std::filesystem::path& dir) {
  gguf::GgufWriter w;
  const std::string a = s.arch;
  w.set_string("general.architecture", a);
  w.set_string("general.name", "synth-" + a + "-" + std::string(type_name(s.type)));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.block_count >= 0 ? s.block_count : s.n_layer));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_u32(a + ".context_length", s.n_ctx_train);
  w.set_f32(a + ".rope.freq_base", s.rope_theta);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  if (a == "qwen3") {
    w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(s.head_dim));
    w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(s.head_dim));
  }
  if (s.extra_metadata) s.extra_metadata(w);

  std::mt19937 rng(s.seed);
  // f32 values of a tensor; `sigma` the spread, `mean` added (norm weights sit around 1).
  const auto values = [&rng](int64_t n, float sigma, float mean) {
    std::normal_distribution<float> d(mean, sigma);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = d(rng);
    return v;
  };
  const auto vec = [&](const std::string& name, int64_t n, float sigma, float mean) {
    std::vector<float> v = values(n, sigma, mean);
    if (s.edit_values) s.edit_values(name, v);
    std::vector<uint8_t> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    if (name == s.omit_tensor) return;
    const int64_t ne[1] = {n};
    w.add_tensor_bytes(name, TensorType::F32, ne, bytes);
  };
  const auto mat = [&](const std::string& name, int64_t k, int64_t m, float sigma) {
    if (name == s.omit_tensor) return;
    if (name == s.wrong_shape_tensor) ++m;
    std::vector<float> v = values(k * m, sigma, 0.0f);
    if (s.edit_values) s.edit_values(name, v);
    const size_t rb = row_bytes(s.type, k);
    std::vector<uint8_t> bytes(rb * static_cast<size_t>(m));
    const TypeTraits& t = type_traits(s.type);
    for (int64_t r = 0; r < m; ++r) t.quantize_row(v.data() + r * k, bytes.data() + static_cast<size_t>(r) * rb, k);
    const int64_t ne[2] = {k, m};
    w.add_tensor_bytes(name, s.type, ne, bytes);
  };

  const int64_t q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
  const float in_sigma = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  mat("token_embd.weight", s.n_embd, s.n_vocab, 0.25f);
  vec("output_norm.weight", s.n_embd, 0.05f, 1.0f);
  if (a == "qwen3" || (a == "llama" && !s.llama_tied)) mat("output.weight", s.n_embd, s.n_vocab, 0.25f);
  if (a == "llama" && s.llama_rope_freqs) {
    // Llama-3.1's factors (factor 8, low 1, high 4, original context 8192): 1 for short
    // wavelengths, 8 for long ones, a smooth blend between.
    std::vector<float> ff(static_cast<size_t>(s.head_dim / 2));
    for (size_t i = 0; i < ff.size(); ++i) {
      const double wavelen = 2.0 * 3.14159265358979 * std::pow(s.rope_theta, 2.0 * static_cast<double>(i) / static_cast<double>(s.head_dim));
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      ff[i] = wavelen < 8192.0 / 4.0 ? 1.0f : wavelen > 8192.0 ? 8.0f : static_cast<float>(1.0 / ((1.0 - smooth) / 8.0 + smooth));
    }
    std::vector<uint8_t> bytes(ff.size() * sizeof(float));
    std::memcpy(bytes.data(), ff.data(), bytes.size());
    const int64_t ne[1] = {s.head_dim / 2};
    w.add_tensor_bytes("rope_freqs.weight", TensorType::F32, ne, bytes);
  }
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", s.n_embd, 0.05f, 1.0f);
    mat(p + "attn_q.weight", s.n_embd, q_dim, in_sigma);
    mat(p + "attn_k.weight", s.n_embd, kv_dim, in_sigma);
    mat(p + "attn_v.weight", s.n_embd, kv_dim, in_sigma);
    if (a == "qwen2") {
      vec(p + "attn_q.bias", q_dim, 0.1f, 0.0f);
      vec(p + "attn_k.bias", kv_dim, 0.1f, 0.0f);
      vec(p + "attn_v.bias", kv_dim, 0.1f, 0.0f);
    } else if (a == "qwen3") {
      vec(p + "attn_q_norm.weight", s.head_dim, 0.05f, 1.0f);
      vec(p + "attn_k_norm.weight", s.head_dim, 0.05f, 1.0f);
    }
    mat(p + "attn_output.weight", q_dim, s.n_embd, 1.0f / std::sqrt(static_cast<float>(q_dim)));
    vec(p + "ffn_norm.weight", s.n_embd, 0.05f, 1.0f);
    mat(p + "ffn_gate.weight", s.n_embd, s.n_ff, in_sigma);
    mat(p + "ffn_up.weight", s.n_embd, s.n_ff, in_sigma);
    mat(p + "ffn_down.weight", s.n_ff, s.n_embd, 1.0f / std::sqrt(static_cast<float>(s.n_ff)));
  }
  for (const std::string& name : s.extra_tensors) vec(name, s.n_embd, 0.05f, 1.0f);
  const auto path = dir / ("synth-" + a + "-" + std::string(type_name(s.type)) + ".gguf");
  w.write(path.string());
  return path;
}

}  // namespace minfer::test
