#include "models/model.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <system_error>

#include "core/error.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"

namespace minfer {
namespace {

std::string shape_str(const graph::Shape& ne, int n_dims) {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i) s += (i ? ", " : "") + std::to_string(ne[static_cast<size_t>(i)]);
  return s + "]";
}

}  // namespace

Model::~Model() {
  // A build on its thread may still read file_; a deferred one (no thread could start) never ran.
  if (tokenizer_build_.valid() && tokenizer_build_.wait_for(std::chrono::seconds(0)) != std::future_status::deferred)
    tokenizer_build_.wait();
}

std::shared_ptr<Model> Model::load(const std::string& path) { return from_file(gguf::GgufFile::open(path)); }

std::shared_ptr<Model> Model::from_file(std::unique_ptr<gguf::GgufFile> file) {
  std::shared_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  m->index_weights();
  m->read_hparams();
  m->check_tensors();
  m->start_tokenizer();  // last: nothing after it throws, so a started build always has a Model to wait
  return m;
}

void Model::start_tokenizer() {
  has_tokenizer_ = file_->find("tokenizer.ggml.tokens") != nullptr;
  if (!has_tokenizer_) return;
  // The build reads only the file's metadata, through its const getters: GgufFile has no
  // caches or other state that a read changes, so it is safe beside the caller's use of the
  // model (the weights' bytes, the metadata).
  auto build = [file = file_.get(), n_rows = hp_.n_vocab] {
    // The Tokenizer constructor validates the data (the checks vocab_from_gguf would run again).
    auto t = std::make_unique<tok::Tokenizer>(tok::vocab_from_gguf_unvalidated(*file));
    // Every token id must have an embedding row. More rows than tokens (a vocabulary padded
    // for alignment) is fine: generation samples only the tokenizer's ids.
    if (t->n_vocab() > n_rows)
      fail("{}: tensor token_embd.weight has {} rows, fewer than the {} tokens of tokenizer.ggml.tokens",
           file->path(), n_rows, t->n_vocab());
    return t;
  };
  try {
    tokenizer_build_ = std::async(std::launch::async, build);
  } catch (const std::system_error&) {
    tokenizer_build_ = std::async(std::launch::deferred, build);  // no thread: built by tokenizer()
  }
}

const tok::Tokenizer* Model::tokenizer() const {
  std::call_once(tokenizer_once_, [this] {
    if (!tokenizer_build_.valid()) return;  // no tokenizer metadata
    try {
      tokenizer_ = tokenizer_build_.get();
    } catch (...) {
      tokenizer_error_ = std::current_exception();
    }
  });
  if (tokenizer_error_) std::rethrow_exception(tokenizer_error_);
  return tokenizer_.get();
}

void Model::index_weights() {
  const auto& infos = file_->tensors();
  weights_.reserve(infos.size());
  for (const auto& ti : infos) {
    graph::WeightTensor w;
    w.name = ti.name;
    w.type = ti.type;
    w.n_dims = static_cast<int>(ti.n_dims);
    for (int i = 0; i < 4; ++i) w.ne[static_cast<size_t>(i)] = ti.ne[i];
    w.data = ti.data;
    w.nbytes = ti.nbytes;
    w.file_mapped = file_->is_mapped();
    by_name_.emplace(w.name, weights_.size());
    weights_.push_back(std::move(w));
  }
}

void Model::read_hparams() {
  const gguf::GgufFile& f = *file_;
  const std::string_view arch = f.require_string("general.architecture");
  hp_.arch_name = std::string(arch);
  if (arch == "qwen2") {
    hp_.arch = Arch::Qwen2;
    hp_.has_qkv_bias = true;
  } else if (arch == "qwen3") {
    hp_.arch = Arch::Qwen3;
    hp_.has_qk_norm = true;
  } else if (arch == "llama") {
    // llama.cpp's LLM_ARCH_LLAMA: rope type NORM (adjacent pairs); biases are optional there
    // (TENSOR_NOT_REQUIRED), present in a few fine-tunes.
    hp_.arch = Arch::Llama;
    hp_.rope.layout = graph::RopeLayout::Normal;
    hp_.has_qkv_bias = find_weight("blk.0.attn_q.bias") != nullptr;
  } else {
    fail("{}: architecture '{}' is not supported (supported: qwen2, qwen3, llama)", f.path(), arch);
  }
  if (auto name = f.get_string("general.name")) hp_.name = std::string(*name);
  const auto key = [&](const char* suffix) { return hp_.arch_name + "." + suffix; };
  const auto positive = [&](const std::string& k, int64_t v, int64_t max) {
    if (v <= 0 || v > max) fail("{}: metadata {} = {} is out of range (1..{})", f.path(), k, v, max);
    return v;
  };
  hp_.n_embd = positive(key("embedding_length"), f.require_u32(key("embedding_length")), 1 << 20);
  hp_.n_layer = positive(key("block_count"), f.require_u32(key("block_count")), 4096);
  hp_.n_ff = positive(key("feed_forward_length"), f.require_u32(key("feed_forward_length")), 1 << 22);
  hp_.n_head = positive(key("attention.head_count"), f.require_u32(key("attention.head_count")), 4096);
  hp_.n_head_kv = hp_.n_head;
  if (auto v = f.get_u32(key("attention.head_count_kv")))
    hp_.n_head_kv = positive(key("attention.head_count_kv"), *v, 4096);
  hp_.n_ctx_train = positive(key("context_length"), f.require_u32(key("context_length")), int64_t{1} << 30);
  hp_.head_dim = hp_.n_embd / hp_.n_head;
  if (auto v = f.get_u32(key("attention.key_length"))) hp_.head_dim = positive(key("attention.key_length"), *v, 1024);
  if (auto v = f.get_u32(key("attention.value_length")); v && *v != hp_.head_dim)
    fail("{}: {} = {} differs from key_length {} (not supported)", f.path(), key("attention.value_length"), *v, hp_.head_dim);
  hp_.n_rot = hp_.head_dim;
  if (auto v = f.get_u32(key("rope.dimension_count"))) hp_.n_rot = positive(key("rope.dimension_count"), *v, hp_.head_dim);
  if (hp_.n_head % hp_.n_head_kv != 0)
    fail("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), hp_.n_head, hp_.n_head_kv);
  if (hp_.n_rot % 2 != 0) fail("{}: rope dimension {} is odd", f.path(), hp_.n_rot);
  if (auto v = f.get_f32(key("rope.freq_base"))) hp_.rope_theta = *v;
  if (!(hp_.rope_theta > 0.0f) || !std::isfinite(hp_.rope_theta))
    fail("{}: {} = {} is not a positive number", f.path(), key("rope.freq_base"), hp_.rope_theta);
  if (auto v = f.get_f32(key("attention.layer_norm_rms_epsilon"))) hp_.rms_eps = *v;
  if (!(hp_.rms_eps > 0.0f) || !(hp_.rms_eps < 1.0f))
    fail("{}: {} = {} is out of range", f.path(), key("attention.layer_norm_rms_epsilon"), hp_.rms_eps);
  check_unsupported_hparams();
  read_rope_scaling();
  hp_.has_rope_freqs = find_weight("rope_freqs.weight") != nullptr;
  const graph::WeightTensor& embd = weight("token_embd.weight");
  hp_.n_vocab = embd.ne[1];
  hp_.tied_output = find_weight("output.weight") == nullptr;
}

void Model::check_unsupported_hparams() const {
  // Keys llama.cpp's loader reads for these architectures that change the arithmetic (key
  // names: llama.cpp src/llama-arch.cpp LLM_KV_ROPE_SCALING_TYPE, LLM_KV_EXPERT_COUNT,
  // LLM_KV_ATTENTION_SLIDING_WINDOW). minfer implements none of them, so a file that asks for
  // one is refused rather than run with different maths.
  const gguf::GgufFile& f = *file_;
  const auto key = [&](const char* suffix) { return hp_.arch_name + "." + suffix; };
  if (auto v = f.get_string(key("rope.scaling.type")); v && *v != "none" && *v != "linear" && *v != "yarn")
    fail("{}: metadata {} = '{}' is unsupported (minfer implements none, linear and yarn)", f.path(),
         key("rope.scaling.type"), *v);
  if (auto v = f.get_u32(key("expert_count")); v && *v > 0)
    fail("{}: metadata {} = {} is unsupported (mixture-of-experts models are not implemented)", f.path(),
         key("expert_count"), *v);
  if (auto v = f.get_u32(key("attention.sliding_window")); v && *v > 0 && *v < hp_.n_ctx_train)
    fail("{}: metadata {} = {} is unsupported (sliding-window attention is not implemented; the training "
         "context is {})", f.path(), key("attention.sliding_window"), *v, hp_.n_ctx_train);
}

void Model::read_rope_scaling() {
  // Key names: llama.cpp src/llama-arch.cpp (LLM_KV_ROPE_SCALE_LINEAR, LLM_KV_ROPE_SCALING_*).
  const gguf::GgufFile& f = *file_;
  const auto key = [&](const char* suffix) { return hp_.arch_name + "." + suffix; };
  const auto number = [&](const std::string& k, float def, float lo, float hi) {
    const float v = f.get_f32(k).value_or(def);
    if (!(v >= lo && v <= hi))
      fail("{}: metadata {} = {} is out of range ({}..{})", f.path(), k, v, lo, hi);
    return v;
  };
  std::string type(f.get_string(key("rope.scaling.type")).value_or(""));
  float factor = number(key("rope.scaling.factor"), 0.0f, 0.0f, 1e6f);
  if (type.empty()) {  // older files: rope.scale_linear alone means linear scaling
    const float linear = number(key("rope.scale_linear"), 0.0f, 0.0f, 1e6f);
    type = linear != 0.0f && linear != 1.0f ? "linear" : "none";
    if (type == "linear") factor = linear;
  }
  hp_.rope_scaling = type;
  if (type == "none") return;
  // llama.cpp: freq_scale = 1 / factor, and a factor of 0 means no scaling.
  if (factor == 0.0f) factor = 1.0f;
  if (factor < 1.0f)
    fail("{}: metadata {} = {} is out of range (a {} scaling factor must be >= 1)", f.path(),
         key("rope.scaling.factor"), factor, type);
  hp_.rope.freq_scale = 1.0f / factor;
  if (type != "yarn") return;
  int64_t n_ctx_orig = hp_.n_ctx_train;
  if (auto v = f.get_u32(key("rope.scaling.original_context_length"))) {
    if (*v == 0 || *v > (1u << 30))
      fail("{}: metadata {} = {} is out of range (1..{})", f.path(), key("rope.scaling.original_context_length"),
           *v, 1u << 30);
    n_ctx_orig = *v;
  }
  // Defaults: arXiv:2309.00071 section 3.2 (alpha = 1, beta = 32 for Llama) and section 3.4
  // (the temperature's 0.1 ln(s) + 1; attn_factor multiplies it, 1 unless the file says).
  const float beta_fast = number(key("rope.scaling.yarn_beta_fast"), 32.0f, 1e-3f, 1e4f);
  const float beta_slow = number(key("rope.scaling.yarn_beta_slow"), 1.0f, 1e-3f, 1e4f);
  const float attn_factor = number(key("rope.scaling.attn_factor"), 1.0f, 1e-3f, 1e3f);
  if (!(beta_fast > beta_slow))
    fail("{}: metadata {} = {} must exceed {} = {}", f.path(), key("rope.scaling.yarn_beta_fast"), beta_fast,
         key("rope.scaling.yarn_beta_slow"), beta_slow);
  hp_.rope.ext_factor = 1.0f;
  hp_.rope.mscale = attn_factor * (1.0f + 0.1f * std::log(1.0f / hp_.rope.freq_scale));
  graph::rope_yarn_corr_dims(hp_.n_rot, n_ctx_orig, hp_.rope_theta, beta_fast, beta_slow, &hp_.rope.corr_low,
                             &hp_.rope.corr_high);
}

const graph::WeightTensor* Model::find_weight(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &weights_[it->second];
}

const graph::WeightTensor& Model::weight(const std::string& name) const {
  const auto* w = find_weight(name);
  if (w == nullptr) fail("{}: missing tensor {}", file_->path(), name);
  return *w;
}

const graph::WeightTensor& Model::output_weight() const {
  return hp_.tied_output ? weight("token_embd.weight") : weight("output.weight");
}

void Model::check_tensors() const {
  const HParams& h = hp_;
  std::vector<bool> used(weights_.size(), false);
  const auto expect = [&](const std::string& name, std::initializer_list<int64_t> shape, bool matrix) {
    const graph::WeightTensor& w = weight(name);
    used[static_cast<size_t>(&w - weights_.data())] = true;
    graph::Shape want{1, 1, 1, 1};
    size_t i = 0;
    for (int64_t v : shape) want[i++] = v;
    if (w.ne != want)
      fail("{}: tensor {} has shape {}, expected {}", file_->path(), name, shape_str(w.ne, w.n_dims),
           shape_str(want, static_cast<int>(shape.size())));
    const TypeTraits* t = find_type_traits(w.type);
    if (t == nullptr || t->vec_dot == nullptr)
      fail("{}: tensor {} has type {}, which minfer does not support", file_->path(), name, type_name(w.type));
    if (!matrix && w.type != TensorType::F32)
      fail("{}: tensor {} (a norm or bias) has type {}, expected f32", file_->path(), name, type_name(w.type));
  };
  expect("token_embd.weight", {h.n_embd, h.n_vocab}, true);
  expect("output_norm.weight", {h.n_embd}, false);
  if (h.has_rope_freqs) expect("rope_freqs.weight", {h.n_rot / 2}, false);
  if (!h.tied_output) expect("output.weight", {h.n_embd, h.n_vocab}, true);
  for (int64_t l = 0; l < h.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    expect(p + "attn_norm.weight", {h.n_embd}, false);
    expect(p + "attn_q.weight", {h.n_embd, h.q_dim()}, true);
    expect(p + "attn_k.weight", {h.n_embd, h.kv_dim()}, true);
    expect(p + "attn_v.weight", {h.n_embd, h.kv_dim()}, true);
    expect(p + "attn_output.weight", {h.q_dim(), h.n_embd}, true);
    if (h.has_qkv_bias) {
      expect(p + "attn_q.bias", {h.q_dim()}, false);
      expect(p + "attn_k.bias", {h.kv_dim()}, false);
      expect(p + "attn_v.bias", {h.kv_dim()}, false);
    }
    if (h.has_qk_norm) {
      expect(p + "attn_q_norm.weight", {h.head_dim}, false);
      expect(p + "attn_k_norm.weight", {h.head_dim}, false);
    }
    expect(p + "ffn_norm.weight", {h.n_embd}, false);
    expect(p + "ffn_gate.weight", {h.n_embd, h.n_ff}, true);
    expect(p + "ffn_up.weight", {h.n_embd, h.n_ff}, true);
    expect(p + "ffn_down.weight", {h.n_ff, h.n_embd}, true);
  }
  check_all_used(used);
}

void Model::check_all_used(const std::vector<bool>& used) const {
  // Every tensor of the file is one the graph reads. A tensor left over is a file that does not
  // say what it holds (llama.cpp refuses it too: "wrong number of tensors"): most often a
  // block_count smaller than the blk.N layers present, which would otherwise run fewer layers.
  std::vector<std::string_view> unused;
  int64_t max_layer = -1;
  for (size_t i = 0; i < weights_.size(); ++i) {
    if (used[i]) continue;
    const std::string& name = weights_[i].name;
    unused.push_back(name);
    int64_t layer = -1;
    if (name.starts_with("blk.") &&
        std::from_chars(name.data() + 4, name.data() + name.size(), layer).ec == std::errc())
      max_layer = std::max(max_layer, layer);
  }
  if (unused.empty()) return;
  constexpr size_t kNamed = 4;
  std::string names;
  for (size_t i = 0; i < unused.size() && i < kNamed; ++i) names += fmt::format("{}{}", i ? ", " : "", unused[i]);
  if (unused.size() > kNamed) names += fmt::format(", ... ({} more)", unused.size() - kNamed);
  const std::string why =
      max_layer >= hp_.n_layer
          ? fmt::format("; the file has tensors of layer {} but {}.block_count = {}", max_layer, hp_.arch_name,
                        hp_.n_layer)
          : fmt::format("; minfer's {} model does not use them", hp_.arch_name);
  fail("{}: {} tensor{} not used: {}{}", file_->path(), unused.size(), unused.size() == 1 ? " is" : "s are",
       names, why);
}

uint64_t Model::weight_bytes() const {
  uint64_t s = 0;
  for (const auto& w : weights_) s += w.nbytes;
  return s;
}

uint64_t Model::n_params() const {
  uint64_t s = 0;
  for (const auto& w : weights_) s += static_cast<uint64_t>(w.ne[0] * w.ne[1] * w.ne[2] * w.ne[3]);
  return s;
}

std::string size_class(uint64_t n_params) {
  const double n = static_cast<double>(n_params);
  if (n >= 1e9) {
    std::string s = fmt::format("{:.1f}", n / 1e9);
    if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
    return s + "B";
  }
  return fmt::format("{:.0f}M", n / 1e6);
}

}  // namespace minfer
