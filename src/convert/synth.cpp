#include "convert/synth.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "convert/model_writer.h"
#include "convert/synth_random.h"
#include "convert/synth_vocab.h"
#include "core/error.h"
#include "core/log.h"
#include "gguf/gguf_writer.h"
#include "models/model.h"
#include "quant/quant.h"
#include "tokenizer/byte_level.h"

namespace minfer::convert {
namespace {

constexpr uint32_t kQuantizationVersion = 2;  // ggml.h GGML_QNT_VERSION

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

/// The tensors of a Qwen2 / Qwen3 / Llama model (llama.cpp's LLM_TN names; shapes in ggml
/// order, as models/model.cpp checks them).
std::vector<SynthTensor> model_tensors(const SynthPreset& p) {
  const bool qwen2 = p.arch == "qwen2", qwen3 = p.arch == "qwen3";
  std::vector<SynthTensor> t;
  t.push_back({"token_embd.weight", {p.n_embd, p.n_vocab}});
  t.push_back({"output_norm.weight", {p.n_embd}});
  if (!p.tied) t.push_back({"output.weight", {p.n_embd, p.n_vocab}});
  if (p.has_rope_freqs()) t.push_back({"rope_freqs.weight", {p.head_dim / 2}});
  for (int64_t l = 0; l < p.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    t.push_back({b + "attn_norm.weight", {p.n_embd}});
    t.push_back({b + "attn_q.weight", {p.n_embd, p.q_dim()}});
    t.push_back({b + "attn_k.weight", {p.n_embd, p.kv_dim()}});
    t.push_back({b + "attn_v.weight", {p.n_embd, p.kv_dim()}});
    if (qwen2) {
      t.push_back({b + "attn_q.bias", {p.q_dim()}});
      t.push_back({b + "attn_k.bias", {p.kv_dim()}});
      t.push_back({b + "attn_v.bias", {p.kv_dim()}});
    } else if (qwen3) {
      t.push_back({b + "attn_q_norm.weight", {p.head_dim}});
      t.push_back({b + "attn_k_norm.weight", {p.head_dim}});
    }
    t.push_back({b + "attn_output.weight", {p.q_dim(), p.n_embd}});
    t.push_back({b + "ffn_norm.weight", {p.n_embd}});
    t.push_back({b + "ffn_gate.weight", {p.n_embd, p.n_ff}});
    t.push_back({b + "ffn_up.weight", {p.n_embd, p.n_ff}});
    t.push_back({b + "ffn_down.weight", {p.n_ff, p.n_embd}});
  }
  std::stable_sort(t.begin(), t.end(), [](const SynthTensor& a, const SynthTensor& b) {
    return llama_tensor_order_less(a.name, b.name);
  });
  return t;
}

void add_hparams(gguf::GgufWriter& w, const SynthPreset& p, uint64_t seed) {
  const std::string a(p.arch);
  w.set_string("general.architecture", a);
  w.set_string("general.type", "model");
  w.set_string("general.name", std::string(p.model_name) + " (synthetic" +
                                    (p.n_layer == find_synth_preset(p.arch, p.name).n_layer
                                         ? std::string(")")
                                         : fmt::format(", {} layers)", p.n_layer)));
  w.set_string("general.size_label", size_class(p.n_params()));
  w.set_string("general.description",
               fmt::format("minfer synth: random weights (seed {}) with the shape of {} ({})", seed,
                           p.model_name, p.source));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(p.n_layer));
  w.set_u32(a + ".context_length", static_cast<uint32_t>(p.n_ctx_train));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(p.n_embd));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(p.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(p.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(p.n_head_kv));
  w.set_f32(a + ".rope.freq_base", p.rope_theta);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", p.rms_eps);
  if (p.arch == "qwen3") {  // config.json has head_dim: the converter writes key/value lengths
    w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(p.head_dim));
    w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(p.head_dim));
  }
  if (p.arch == "llama") {  // llama.cpp's converter writes these for the llama architecture
    w.set_u32(a + ".vocab_size", static_cast<uint32_t>(p.n_vocab));
    w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(p.head_dim));
  }
}

}  // namespace

std::vector<float> llama3_rope_freq_factors(const SynthPreset& p) {
  // Llama 3.1's frequency rule (Meta's apply_scaling; the config's rope_scaling fields): the
  // wavelength 2 pi / f of pair i, f = theta^(-2i / head_dim); short wavelengths (below
  // orig / high) keep f (divisor 1), long ones (above orig / low) get f / factor, and between
  // them f is blended with smooth = (orig / wavelen - low) / (high - low).
  std::vector<float> ff(static_cast<size_t>(p.head_dim / 2));
  const double orig = static_cast<double>(p.rope_orig_ctx);
  const double low_wavelen = orig / p.rope_low_freq_factor, high_wavelen = orig / p.rope_high_freq_factor;
  for (size_t i = 0; i < ff.size(); ++i) {
    const double freq = std::pow(static_cast<double>(p.rope_theta), -2.0 * static_cast<double>(i) / static_cast<double>(p.head_dim));
    const double wavelen = 2.0 * 3.14159265358979323846 / freq;
    double divisor = 1.0;
    if (wavelen > low_wavelen) {
      divisor = p.rope_factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (orig / wavelen - p.rope_low_freq_factor) / (p.rope_high_freq_factor - p.rope_low_freq_factor);
      divisor = 1.0 / ((1.0 - smooth) / p.rope_factor + smooth);
    }
    ff[i] = static_cast<float>(divisor);
  }
  return ff;
}

SynthScale synth_scale(std::string_view name, int64_t ne0, int64_t n_embd) {
  if (name == "token_embd.weight" || name == "output.weight")
    return {0.0f, kSynthLogitStd / std::sqrt(static_cast<float>(n_embd))};
  if (ends_with(name, "attn_q_norm.weight") || ends_with(name, "attn_k_norm.weight"))
    return {kSynthAttnGain, 0.05f * kSynthAttnGain};
  if (ends_with(name, "_norm.weight")) return {1.0f, 0.05f};
  if (ends_with(name, "attn_q.weight") || ends_with(name, "attn_k.weight"))
    return {0.0f, kSynthAttnGain / std::sqrt(static_cast<float>(ne0))};
  if (ends_with(name, "attn_output.weight") || ends_with(name, "ffn_down.weight"))
    return {0.0f, kSynthResidualGain / std::sqrt(static_cast<float>(ne0))};
  if (ends_with(name, ".bias")) return {0.0f, 0.1f};
  return {0.0f, 1.0f / std::sqrt(static_cast<float>(ne0))};
}

std::vector<SynthTensor> synth_tensor_plan(const SynthPreset& preset, FileType ftype, bool pure) {
  std::vector<SynthTensor> t = model_tensors(preset);
  std::vector<MixTensor> mt;
  mt.reserve(t.size());
  for (const SynthTensor& s : t) mt.push_back(MixTensor{s.name, TensorType::F32, s.ne});
  const std::vector<MixChoice> plan =
      plan_tensor_types(ftype, mt, static_cast<int>(preset.n_layer), pure);
  for (size_t i = 0; i < t.size(); ++i) t[i].choice = plan[i];
  return t;
}

uint64_t synth_plan_bytes(const std::vector<SynthTensor>& plan) {
  uint64_t bytes = 0;
  for (const SynthTensor& s : plan) {
    int64_t bs = 0;
    size_t bb = 0;
    MINFER_ASSERT(type_block_layout(s.choice.type, &bs, &bb));
    int64_t el = 1;
    for (int64_t d : s.ne) el *= d;
    bytes += static_cast<uint64_t>(el / bs) * bb;
  }
  return bytes;
}

std::vector<bool> synth_ascii_output_rows(const tok::VocabData& vocab) {
  std::vector<bool> zero(vocab.tokens.size(), true);
  for (size_t id = 0; id < zero.size(); ++id) {
    if (vocab.types[id] != tok::TokenType::Normal) continue;
    std::string bytes;
    if (tok::is_spm(vocab)) {
      bytes = std::string(vocab.tokens[id]);
      for (size_t at; (at = bytes.find("\u2581")) != std::string::npos;) bytes.replace(at, 3, " ");
    } else {
      bool mapped = true;
      bytes = tok::token_text_to_bytes(vocab.tokens[id], &mapped);
      if (!mapped) continue;
    }
    zero[id] = !std::all_of(bytes.begin(), bytes.end(),
                            [](char c) { return (c >= ' ' && c <= '~') || c == '\n' || c == '\t'; });
  }
  return zero;
}

SynthReport synth_model(const SynthOptions& opt) {
  SynthReport rep;
  const SynthPreset& preset = find_synth_preset(opt.arch, opt.preset);
  rep.preset = &preset;
  if (opt.n_layer < 0 || opt.n_layer > kSynthMaxLayers)
    fail("--layers {} is out of range: 1..{} (0 or absent: the preset's {})", opt.n_layer, kSynthMaxLayers,
         preset.n_layer);
  SynthPreset p = preset;  // the shape written: the preset with the layer count asked for
  if (opt.n_layer > 0) p.n_layer = opt.n_layer;
  rep.n_layer = p.n_layer;
  if (opt.distinct_rows < 0 || opt.distinct_rows > kSynthMaxDistinctRows)
    fail("--distinct-rows {} is out of range: 1..{} (0 or absent: every row distinct)", opt.distinct_rows,
         kSynthMaxDistinctRows);
  check_not_overwriting(opt.output, opt.vocab);

  gguf::GgufWriter w;
  add_hparams(w, p, opt.seed);
  tok::VocabData vocab;
  rep.vocab_tokens = add_vocab_metadata(w, opt.vocab, p.n_vocab, &vocab);
  w.set_u32("general.quantization_version", kQuantizationVersion);
  w.set_u32("general.file_type", static_cast<uint32_t>(opt.ftype));

  const std::vector<SynthTensor> plan = synth_tensor_plan(p, opt.ftype, opt.pure);
  std::vector<TensorJob> jobs;
  for (const SynthTensor& s : plan) {
    if (s.choice.fell_back)
      rep.fallback_notes.push_back(describe_fallback(MixTensor{s.name, TensorType::F32, s.ne}, s.choice));
    TensorJob j;
    j.name = s.name;
    j.ne = s.ne;
    j.type = s.choice.type;
    const SynthScale sc = synth_scale(s.name, s.ne[0], p.n_embd);
    const uint64_t key = tensor_key(opt.seed, s.name);
    const int64_t n = s.ne[0];
    j.rows = [sc, key, n](int64_t row, float* dst) {
      const uint64_t base = static_cast<uint64_t>(row) * static_cast<uint64_t>(n);
      for (int64_t c = 0; c < n; ++c)
        dst[c] = sc.mean + sc.std * normal_like(counter_hash(key, base + static_cast<uint64_t>(c)));
    };
    if (s.name == "rope_freqs.weight")  // not random: the preset's frequency factors
      j.rows = [ff = llama3_rope_freq_factors(p)](int64_t, float* dst) { std::copy(ff.begin(), ff.end(), dst); };
    j.distinct_rows = opt.distinct_rows;
    j.repeat_key = splitmix64_mix(key);
    if (opt.ascii_output && s.name == (p.tied ? "token_embd.weight" : "output.weight"))
      j.zero_rows = synth_ascii_output_rows(vocab);
    int64_t el = 1;
    for (int64_t d : s.ne) el *= d;
    rep.n_params += static_cast<uint64_t>(el);
    jobs.push_back(std::move(j));
  }
  for (const std::string& note : rep.fallback_notes) log_warn("{}", note);
  if (!rep.fallback_notes.empty())
    log_warn("{} of {} tensors needed a fallback type (row length not a multiple of the block size)",
             rep.fallback_notes.size(), plan.size());

  write_model(w, std::move(jobs), opt.output, opt.n_threads, opt.progress, "synth");
  rep.bytes = synth_plan_bytes(plan);
  return rep;
}

}  // namespace minfer::convert
