// A loaded model: hyper-parameters from GGUF metadata, weights used in place from the mapped
// file, and the tokenizer. Qwen2, Qwen3 and Llama (Llama 2/3.x, Mistral) differ only in data
// (flags, tensor names, the RoPE layout and scaling), so one loader and one graph builder serve
// them all.
#pragma once

#include <exception>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "graph/graph.h"

namespace minfer {

enum class Arch { Qwen2, Qwen3, Llama };

/// Hyper-parameters, read from the GGUF keys "<arch>.*" (llama.cpp's names, e.g.
/// qwen2.embedding_length). Qwen2 config: q/k/v biases, no q/k norm, NEOX RoPE; Qwen3 config:
/// q/k RMS norm, explicit head dim (key_length), no biases, NEOX RoPE; Llama config: no biases
/// (q/k/v biases when the file has them), no q/k norm, RoPE in the normal layout, optional
/// rope_freqs.weight (Llama 3.1 frequency factors).
struct HParams {
  Arch arch = Arch::Qwen2;
  std::string arch_name;        ///< "qwen2" / "qwen3" / "llama"
  std::string name;             ///< general.name when present
  int64_t n_vocab = 0;          ///< rows of token_embd
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;         ///< key_length, or n_embd / n_head
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  int64_t n_rot = 0;            ///< rope.dimension_count, or head_dim
  float rope_theta = 10000.0f;
  /// Layout and scaling of RoPE (graph/rope_math.h): the layout from the architecture,
  /// freq_scale / YaRN fields from <arch>.rope.scaling.{type, factor, original_context_length,
  /// attn_factor, yarn_beta_fast, yarn_beta_slow} (or the older rope.scale_linear).
  graph::RopeConfig rope;
  std::string rope_scaling = "none";  ///< "none", "linear" or "yarn"
  bool has_rope_freqs = false;  ///< rope_freqs.weight f32 [n_rot / 2]: frequency divisors
  float rms_eps = 1e-6f;
  bool has_qkv_bias = false;
  bool has_qk_norm = false;
  bool tied_output = false;     ///< no output.weight: token_embd is the output matrix

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
};

namespace tok {
class Tokenizer;
}

class Model {
 public:
  /// Loads `path`: parses the GGUF, reads the hyper-parameters, checks every tensor the
  /// architecture needs exists with the expected shape and a supported type and that the file
  /// holds no other tensor, and, when the file has tokenizer metadata, starts building the
  /// tokenizer on a thread of its own (tokenizer() waits for it), so that the caller's next
  /// steps (e.g. an Engine packing or uploading the weights) overlap it. Throws minfer::Error
  /// naming the file and the tensor / key (unsupported architecture, missing tensor, wrong
  /// shape, unsupported type, tensors not used: e.g. blk.N beyond block_count). Errors of the
  /// tokenizer build (a bad vocabulary, fewer embedding rows than tokens) are thrown by
  /// tokenizer(), not here: a caller that must refuse such a file early calls tokenizer().
  static std::shared_ptr<Model> load(const std::string& path);

  /// Builds a model over an already-opened file (tests), as load() does.
  static std::shared_ptr<Model> from_file(std::unique_ptr<gguf::GgufFile> file);

  /// Waits for the tokenizer build, if it is still running (it reads the file).
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const HParams& hparams() const { return hp_; }
  const gguf::GgufFile& file() const { return *file_; }
  const std::string& path() const { return file_->path(); }

  /// A tensor by GGUF name; throws minfer::Error "<file>: missing tensor <name>".
  const graph::WeightTensor& weight(const std::string& name) const;
  const graph::WeightTensor* find_weight(const std::string& name) const;
  const std::vector<graph::WeightTensor>& weights() const { return weights_; }

  /// The output projection: output.weight, or token_embd.weight when tied.
  const graph::WeightTensor& output_weight() const;

  /// The tokenizer, or nullptr when the file has no tokenizer metadata (tokenizer.ggml.tokens).
  /// The first call waits for the build load() started. When the build failed, every call
  /// throws its error (a minfer::Error naming the file, as tok::vocab_from_gguf and the
  /// Tokenizer constructor word it, or "<file>: tensor token_embd.weight has N rows, fewer than
  /// the M tokens of tokenizer.ggml.tokens"). Thread-safe.
  const tok::Tokenizer* tokenizer() const;

  /// Whether the file has tokenizer metadata, i.e. whether tokenizer() returns a tokenizer
  /// (or throws its build's error) rather than nullptr. Never waits.
  bool has_tokenizer() const { return has_tokenizer_; }

  /// Total bytes of tensor data.
  uint64_t weight_bytes() const;
  /// Number of parameters (elements of all tensors).
  uint64_t n_params() const;

 private:
  Model() = default;
  void read_hparams();
  /// Throws minfer::Error naming the key and value when the metadata asks for maths minfer
  /// does not implement (RoPE scaling other than linear and YaRN, experts, sliding-window
  /// attention).
  void check_unsupported_hparams() const;
  /// Reads <arch>.rope.scaling.* into hp_.rope (YaRN: rope_math.h). Throws minfer::Error naming
  /// the key and value for an unknown type or an out-of-range number.
  void read_rope_scaling();
  void index_weights();
  void check_tensors() const;
  /// Throws minfer::Error naming the first tensors (and their count) that check_tensors did not
  /// claim (`used`, by index of weights_): a block_count below the layers present, or tensors of
  /// an unknown kind. Such a file would otherwise run with some of its weights ignored.
  void check_all_used(const std::vector<bool>& used) const;

  /// Starts building the tokenizer from file_ (when it has tokenizer metadata) on its own
  /// thread; tokenizer() collects the result.
  void start_tokenizer();

  // file_ is declared first so that it is destroyed last: the tokenizer build reads it until
  // tokenizer_build_ is ready (the destructor also waits for it explicitly).
  std::unique_ptr<gguf::GgufFile> file_;
  HParams hp_;
  std::vector<graph::WeightTensor> weights_;
  std::map<std::string, size_t, std::less<>> by_name_;
  bool has_tokenizer_ = false;
  /// The running build (valid until tokenizer() first collects it, or none without metadata).
  mutable std::future<std::unique_ptr<tok::Tokenizer>> tokenizer_build_;
  mutable std::once_flag tokenizer_once_;           ///< tokenizer() collects the build once
  mutable std::unique_ptr<tok::Tokenizer> tokenizer_;  ///< set by that collection
  mutable std::exception_ptr tokenizer_error_;         ///< or the build's error, thrown by every call
};

/// Human size class of a model from its parameter count, e.g. "0.5B", "7B" (llama-bench style).
std::string size_class(uint64_t n_params);

}  // namespace minfer
