// Writes small random Qwen2 / Qwen3 GGUF models with the project's own GGUF writer, for tests
// that need a model of a given weight type or a deliberately broken one. Weights are seeded
// normal(0, scale) values quantized with the reference quantizers; norms are 1 + small noise.
// No tokenizer metadata (the loader does not require it).
#pragma once

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/types.h"
#include "gguf/gguf_writer.h"
#include "quant/quant.h"

namespace minfer::test {

struct TinyModelSpec {
  std::string arch = "qwen2";  ///< qwen2 (q/k/v biases) or qwen3 (q/k norms)
  int64_t n_embd = 256, n_layer = 2, n_head = 4, n_head_kv = 2, head_dim = 64, n_ff = 512;
  int64_t n_vocab = 512, n_ctx = 1024;
  TensorType type = TensorType::Q8_0;  ///< type of every 2-D weight
  bool tied = true;                    ///< no output.weight
  uint32_t seed = 1;
  std::string omit_tensor;             ///< leave this tensor out (error tests)
  std::string wrong_shape_tensor;      ///< give this tensor one extra row (error tests)
};

inline void write_tiny_model(const std::string& path, const TinyModelSpec& s) {
  gguf::GgufWriter w;
  const std::string a = s.arch;
  w.set_string("general.architecture", a);
  w.set_string("general.name", "tiny-" + a);
  w.set_u32(a + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_f32(a + ".rope.freq_base", 1000000.0f);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  if (a == "qwen3") {
    w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(s.head_dim));
    w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(s.head_dim));
  }
  uint32_t tensor_seed = s.seed * 7919u;
  const auto add = [&](const std::string& name, std::vector<int64_t> ne, bool matrix, float scale, float offset) {
    if (name == s.omit_tensor) return;
    if (name == s.wrong_shape_tensor) ne.back() += 1;
    const TensorType type = matrix ? s.type : TensorType::F32;
    const uint32_t seed = ++tensor_seed;
    w.add_tensor(name, type, ne, [=](uint8_t* dst, size_t nbytes) {
      int64_t n = 1;
      for (int64_t v : ne) n *= v;
      std::mt19937 rng(seed);
      std::normal_distribution<float> d(0.0f, scale);
      std::vector<float> vals(static_cast<size_t>(n));
      for (auto& v : vals) v = offset + d(rng);
      if (type == TensorType::F32) {
        std::memcpy(dst, vals.data(), nbytes);
      } else {
        const size_t rb = row_bytes(type, ne[0]);
        for (int64_t r = 0; r < n / ne[0]; ++r)
          type_traits(type).quantize_row(vals.data() + r * ne[0], dst + static_cast<size_t>(r) * rb, ne[0]);
      }
    });
  };
  const float ws = 1.0f / std::sqrt(static_cast<float>(s.n_embd));
  const int64_t q_dim = s.n_head * s.head_dim, kv_dim = s.n_head_kv * s.head_dim;
  add("token_embd.weight", {s.n_embd, s.n_vocab}, true, 1.0f, 0.0f);
  add("output_norm.weight", {s.n_embd}, false, 0.1f, 1.0f);
  if (!s.tied) add("output.weight", {s.n_embd, s.n_vocab}, true, ws * 4, 0.0f);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", {s.n_embd}, false, 0.1f, 1.0f);
    add(p + "attn_q.weight", {s.n_embd, q_dim}, true, ws, 0.0f);
    add(p + "attn_k.weight", {s.n_embd, kv_dim}, true, ws, 0.0f);
    add(p + "attn_v.weight", {s.n_embd, kv_dim}, true, ws, 0.0f);
    if (a == "qwen2") {
      add(p + "attn_q.bias", {q_dim}, false, 0.5f, 0.0f);
      add(p + "attn_k.bias", {kv_dim}, false, 0.5f, 0.0f);
      add(p + "attn_v.bias", {kv_dim}, false, 0.1f, 0.0f);
    } else {
      add(p + "attn_q_norm.weight", {s.head_dim}, false, 0.1f, 1.0f);
      add(p + "attn_k_norm.weight", {s.head_dim}, false, 0.1f, 1.0f);
    }
    add(p + "attn_output.weight", {q_dim, s.n_embd}, true, ws, 0.0f);
    add(p + "ffn_norm.weight", {s.n_embd}, false, 0.1f, 1.0f);
    add(p + "ffn_gate.weight", {s.n_embd, s.n_ff}, true, ws, 0.0f);
    add(p + "ffn_up.weight", {s.n_embd, s.n_ff}, true, ws, 0.0f);
    add(p + "ffn_down.weight", {s.n_ff, s.n_embd}, true, 1.0f / std::sqrt(static_cast<float>(s.n_ff)), 0.0f);
  }
  w.write(path);
}

}  // namespace minfer::test
