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
constexpr std::array<SynthPreset, 8> kPresets{{
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
  const bool qwen2 = arch == "qwen2";
  const int64_t per_layer = 2 * n_embd                           // attn_norm, ffn_norm
                            + n_embd * (q_dim() + 2 * kv_dim())  // q, k, v
                            + (qwen2 ? q_dim() + 2 * kv_dim() : 2 * head_dim)  // biases | q/k norm
                            + q_dim() * n_embd                   // attn_output
                            + 3 * n_embd * n_ff;                 // gate, up, down
  const int64_t embd = n_embd * n_vocab * (tied ? 1 : 2);
  return static_cast<uint64_t>(embd + n_embd + n_layer * per_layer);
}

std::span<const SynthPreset> synth_presets() { return kPresets; }

const SynthPreset& find_synth_preset(std::string_view arch, std::string_view name) {
  if (arch != "qwen2" && arch != "qwen3")
    fail("unknown architecture '{}' (supported: qwen2, qwen3)", arch);
  for (const SynthPreset& p : kPresets)
    if (p.arch == arch && p.name == name) return p;
  for (const SynthPreset& p : kPresets)
    if (p.name == name)
      fail("preset '{}' is a {} model, not {} (use --arch {})", name, p.arch, arch, p.arch);
  fail("unknown preset '{}' for {} (presets: {})", name, arch, names_for(arch));
}

}  // namespace minfer::convert
