#include "convert/synth_presets.h"

#include <array>
#include <string>

#include "core/error.h"

namespace minfer::convert {
namespace {

// Public configurations: the config.json of each Hugging Face repository (Qwen organisation).
// Cross-check: the parameter counts they give (n_params) match the published ones (Qwen2.5
// 0.49B / 1.54B / 7.61B, Qwen3 0.6B / 8.2B) and the BF16 sizes measured in
// ../shared/design/ANCHORS.md.
constexpr std::array<SynthPreset, 13> kPresets{{
    {"qwen2", "qwen2.5-0.5b", "Qwen2.5-0.5B-Instruct",
     "huggingface.co/Qwen/Qwen2.5-0.5B-Instruct config.json",
     896, 24, 14, 2, 64, 4864, 151936, 32768, 1000000.0f, 1e-6f, true},
    {"qwen2", "qwen2.5-1.5b", "Qwen2.5-1.5B-Instruct",
     "huggingface.co/Qwen/Qwen2.5-1.5B-Instruct config.json",
     1536, 28, 12, 2, 128, 8960, 151936, 32768, 1000000.0f, 1e-6f, true},
    {"qwen2", "qwen2.5-7b", "Qwen2.5-7B-Instruct",
     "huggingface.co/Qwen/Qwen2.5-7B-Instruct config.json",
     3584, 28, 28, 4, 128, 18944, 152064, 32768, 1000000.0f, 1e-6f, false},
    {"qwen3", "qwen3-0.6b", "Qwen3-0.6B", "huggingface.co/Qwen/Qwen3-0.6B config.json",
     1024, 28, 16, 8, 128, 3072, 151936, 40960, 1000000.0f, 1e-6f, true},
    {"qwen3", "qwen3-8b", "Qwen3-8B", "huggingface.co/Qwen/Qwen3-8B config.json",
     4096, 36, 32, 8, 128, 12288, 151936, 40960, 1000000.0f, 1e-6f, false},
    // Llama 3.x (meta-llama organisation) and Mistral (mistralai). Cross-check: 1.24B, 3.21B,
    // 8.03B and 7.25B parameters, as published.
    {"llama", "llama-3.2-1b", "Llama-3.2-1B-Instruct", "huggingface.co/meta-llama/Llama-3.2-1B-Instruct config.json",
     2048, 16, 32, 8, 64, 8192, 128256, 131072, 500000.0f, 1e-5f, true, 32.0f, 1.0f, 4.0f, 8192},
    {"llama", "llama-3.2-3b", "Llama-3.2-3B-Instruct", "huggingface.co/meta-llama/Llama-3.2-3B-Instruct config.json",
     3072, 28, 24, 8, 128, 8192, 128256, 131072, 500000.0f, 1e-5f, true, 32.0f, 1.0f, 4.0f, 8192},
    {"llama", "llama-3.1-8b", "Llama-3.1-8B-Instruct", "huggingface.co/meta-llama/Llama-3.1-8B-Instruct config.json",
     4096, 32, 32, 8, 128, 14336, 128256, 131072, 500000.0f, 1e-5f, false, 8.0f, 1.0f, 4.0f, 8192},
    {"llama", "mistral-7b-v0.3", "Mistral-7B-Instruct-v0.3",
     "huggingface.co/mistralai/Mistral-7B-Instruct-v0.3 config.json",
     4096, 32, 32, 8, 128, 14336, 32768, 32768, 1000000.0f, 1e-5f, false},
    // Test shapes (minfer's own): small enough to write and run in a unit test. qwen2 "tiny" has
    // tied embeddings like the small Qwen2.5 models; qwen3 "tiny" has an output matrix and a head
    // dimension that differs from n_embd / n_head, like Qwen3; qwen2 "tiny-odd" has row lengths
    // (320, 832) that are multiples of 32 but not of 256, like Qwen2.5-0.5B's 896, so K-quant
    // mixes need their fallback types.
    {"qwen2", "tiny", "minfer-tiny-qwen2", "minfer test shape", 256, 2, 4, 2, 64, 768, 151936,
     2048, 1000000.0f, 1e-6f, true},
    {"qwen3", "tiny", "minfer-tiny-qwen3", "minfer test shape", 256, 2, 4, 2, 128, 768, 151936,
     2048, 1000000.0f, 1e-6f, false},
    {"qwen2", "tiny-odd", "minfer-tiny-odd-qwen2", "minfer test shape", 320, 2, 5, 1, 64, 832,
     151936, 2048, 1000000.0f, 1e-6f, true},
    // llama "tiny": the SentencePiece fixture vocabulary's 32000 tokens, an output matrix and
    // Llama-3.1 frequency factors.
    {"llama", "tiny", "minfer-tiny-llama", "minfer test shape", 256, 2, 4, 2, 64, 768, 32000, 2048,
     500000.0f, 1e-5f, false, 8.0f, 1.0f, 4.0f, 8192},
}};

std::string names_for(std::string_view arch) {
  std::string s;
  for (const SynthPreset& p : kPresets) {
    if (p.arch != arch) continue;
    if (!s.empty()) s += ", ";
    s += p.name;
  }
  return s;
}

}  // namespace

uint64_t SynthPreset::n_params() const {
  const bool qwen2 = arch == "qwen2", qwen3 = arch == "qwen3";
  const int64_t per_layer = 2 * n_embd                           // attn_norm, ffn_norm
                            + n_embd * (q_dim() + 2 * kv_dim())  // q, k, v
                            + (qwen2 ? q_dim() + 2 * kv_dim() : qwen3 ? 2 * head_dim : 0)  // biases | q/k norm
                            + q_dim() * n_embd                   // attn_output
                            + 3 * n_embd * n_ff;                 // gate, up, down
  const int64_t embd = n_embd * n_vocab * (tied ? 1 : 2);
  return static_cast<uint64_t>(embd + n_embd + n_layer * per_layer + (has_rope_freqs() ? head_dim / 2 : 0));
}

std::span<const SynthPreset> synth_presets() { return kPresets; }

const SynthPreset& find_synth_preset(std::string_view arch, std::string_view name) {
  if (arch != "qwen2" && arch != "qwen3" && arch != "llama")
    fail("unknown architecture '{}' (supported: qwen2, qwen3, llama)", arch);
  for (const SynthPreset& p : kPresets)
    if (p.arch == arch && p.name == name) return p;
  for (const SynthPreset& p : kPresets)
    if (p.name == name)
      fail("preset '{}' is a {} model, not {} (use --arch {})", name, p.arch, arch, p.arch);
  fail("unknown preset '{}' for {} (presets: {})", name, arch, names_for(arch));
}

}  // namespace minfer::convert
