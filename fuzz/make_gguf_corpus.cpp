// Writes the GGUF fuzzers' seed corpus (fuzz_gguf and fuzz_model): small valid files made with the
// GGUF writer (every value type, string arrays, tensors of several types, a custom alignment, a
// vocab-only file, a v2 file), tiny complete qwen2/qwen3 models that Model::from_file loads (every
// supported tensor type, tied and untied output, with and without a small vocabulary), and
// corrupt variants of them (truncation, overlap, huge lengths and counts, bad alignment, metadata
// the model loader refuses). Usage: make_gguf_corpus OUT_DIR.
// Deterministic: the same bytes every run, so the committed corpus can be regenerated.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "quant/quant.h"

namespace {

using minfer::TensorType;
using minfer::gguf::GgufWriter;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(seed + 31 * k);
  return v;
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_all(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()),
                                              static_cast<std::streamsize>(b.size()));
}

size_t find(const std::vector<uint8_t>& b, const std::string& s) {
  for (size_t k = 0; k + s.size() <= b.size(); ++k)
    if (std::memcmp(b.data() + k, s.data(), s.size()) == 0) return k;
  throw minfer::Error("corpus: '" + s + "' not found");
}

template <typename T>
void poke(std::vector<uint8_t>& b, size_t pos, T v) {
  std::memcpy(b.data() + pos, &v, sizeof(T));
}

/// A complete model that Model::from_file accepts: n_embd 32, 1 layer, 2 heads of 16, 1 KV head,
/// 16 vocabulary rows (259 with the vocabulary); each matrix of its own type (the K-quants need rows of 256: only ffn_down,
/// [n_ff, n_embd], takes one, with n_ff 256). Tensor bytes are a pattern: loading reads no values.
struct TinyModel {
  std::string arch = "qwen2";
  TensorType embd = TensorType::Q8_0, q = TensorType::Q8_0, k = TensorType::Q8_0, v = TensorType::Q8_0,
             o = TensorType::Q8_0, gate = TensorType::Q8_0, up = TensorType::Q8_0, down = TensorType::Q8_0,
             out = TensorType::Q8_0;
  bool tied = true;
  bool vocab = false;
  int64_t n_ff = 64;
  uint32_t alignment = 0;  // 0: the default (32)
};

/// GPT-2's byte-to-text map of byte-level BPE (the printable bytes stand for themselves, the
/// others for U+0100 + n in byte order), as UTF-8: the text of the token for byte b.
std::string byte_token(int b) {
  const auto printable = [](int c) { return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255); };
  int cp = b;
  if (!printable(b)) {
    int n = 0;
    for (int c = 0; c < b; ++c) n += !printable(c);
    cp = 256 + n;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

/// Tokens of add_small_vocab: 256 byte tokens, 2 merges, <|endoftext|>.
constexpr int64_t kSmallVocabTokens = 259;

void add_small_vocab(GgufWriter& w) {
  // Byte-level BPE: every byte, two merges ("a b", "ab c"), and the Qwen end-of-text control token.
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_token(b));
  tokens.push_back("ab");
  tokens.push_back("abc");
  tokens.push_back("<|endoftext|>");
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", "qwen2");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_string_array("tokenizer.ggml.merges", std::vector<std::string>{"a b", "ab c"});
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(kSmallVocabTokens - 1));
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(kSmallVocabTokens - 1));
  w.set_bool("tokenizer.ggml.add_bos_token", false);
  w.set_string("tokenizer.chat_template",
               "{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>\\n{% endfor %}");
}

void write_tiny_model(const std::string& path, const TinyModel& m) {
  constexpr int64_t n_embd = 32, n_head = 2, n_head_kv = 1, head_dim = 16;
  const int64_t n_vocab = m.vocab ? kSmallVocabTokens : 16;  // an embedding row for every token
  GgufWriter w;
  if (m.alignment) w.set_u32("general.alignment", m.alignment);
  const std::string a = m.arch;
  w.set_string("general.architecture", a);
  w.set_string("general.name", "corpus-" + a);
  w.set_u32(a + ".block_count", 1);
  w.set_u32(a + ".context_length", 128);
  w.set_u32(a + ".embedding_length", n_embd);
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(m.n_ff));
  w.set_u32(a + ".attention.head_count", n_head);
  w.set_u32(a + ".attention.head_count_kv", n_head_kv);
  w.set_f32(a + ".rope.freq_base", 1e6f);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  if (a == "qwen3") {
    w.set_u32(a + ".attention.key_length", head_dim);
    w.set_u32(a + ".attention.value_length", head_dim);
  }
  if (m.vocab) add_small_vocab(w);
  uint8_t seed = 10;
  const auto add = [&](const std::string& name, TensorType t, std::vector<int64_t> ne) {
    int64_t block = 0;
    size_t block_bytes = 0;
    if (!minfer::type_block_layout(t, &block, &block_bytes) || ne[0] % block != 0)
      throw minfer::Error("corpus: " + name + " cannot have type " + std::string(minfer::type_name(t)));
    const size_t bytes = static_cast<size_t>(ne[0] / block) * block_bytes * static_cast<size_t>(ne.size() > 1 ? ne[1] : 1);
    w.add_tensor_bytes(name, t, ne, pattern(bytes, seed++));
  };
  const int64_t q_dim = n_head * head_dim, kv_dim = n_head_kv * head_dim;
  add("token_embd.weight", m.embd, {n_embd, n_vocab});
  add("output_norm.weight", TensorType::F32, {n_embd});
  if (!m.tied) add("output.weight", m.out, {n_embd, n_vocab});
  add("blk.0.attn_norm.weight", TensorType::F32, {n_embd});
  add("blk.0.attn_q.weight", m.q, {n_embd, q_dim});
  add("blk.0.attn_k.weight", m.k, {n_embd, kv_dim});
  add("blk.0.attn_v.weight", m.v, {n_embd, kv_dim});
  add("blk.0.attn_output.weight", m.o, {q_dim, n_embd});
  if (a == "qwen2") {
    add("blk.0.attn_q.bias", TensorType::F32, {q_dim});
    add("blk.0.attn_k.bias", TensorType::F32, {kv_dim});
    add("blk.0.attn_v.bias", TensorType::F32, {kv_dim});
  } else {
    add("blk.0.attn_q_norm.weight", TensorType::F32, {head_dim});
    add("blk.0.attn_k_norm.weight", TensorType::F32, {head_dim});
  }
  add("blk.0.ffn_norm.weight", TensorType::F32, {n_embd});
  add("blk.0.ffn_gate.weight", m.gate, {n_embd, m.n_ff});
  add("blk.0.ffn_up.weight", m.up, {n_embd, m.n_ff});
  add("blk.0.ffn_down.weight", m.down, {m.n_ff, n_embd});
  w.write(path);
}

/// The bytes of `b` with the u32 value of metadata key `key` (a U32 scalar) replaced by `v`.
void poke_u32_key(std::vector<uint8_t>& b, const std::string& key, uint32_t v) {
  poke<uint32_t>(b, find(b, key) + key.size() + 4, v);  // after the key: type tag (4), value
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    {  // empty: header only
      GgufWriter w;
      w.write(dir + "/empty.gguf");
    }
    {  // every scalar type and array element type
      GgufWriter w;
      w.set_u8("t.u8", 200);
      w.set_i8("t.i8", -3);
      w.set_u16("t.u16", 65000);
      w.set_i16("t.i16", -300);
      w.set_u32("t.u32", 70000);
      w.set_i32("t.i32", -70000);
      w.set_u64("t.u64", 1ull << 40);
      w.set_i64("t.i64", -(1ll << 40));
      w.set_f32("t.f32", 0.5f);
      w.set_f64("t.f64", -0.25);
      w.set_bool("t.bool", true);
      w.set_string("t.str", "hello");
      w.set_string_array("a.str", std::vector<std::string>{"x", "", "yz"});
      w.set_i32_array("a.i32", std::vector<int32_t>{1, -2, 3});
      w.set_f32_array("a.f32", std::vector<float>{1.5f, -2.0f});
      const std::vector<uint64_t> u64{1, 2};
      minfer::gguf::Value v;
      v.type = minfer::gguf::ValueType::ARRAY;
      v.elem_type = minfer::gguf::ValueType::U64;
      v.count = u64.size();
      v.elems = reinterpret_cast<const uint8_t*>(u64.data());
      w.set_value("a.u64", v);
      const std::vector<uint8_t> bools{1, 0};
      v.elem_type = minfer::gguf::ValueType::BOOL;
      v.count = bools.size();
      v.elems = bools.data();
      w.set_value("a.bool", v);
      w.write(dir + "/values.gguf");
    }
    {  // tensors of several types, default alignment
      GgufWriter w;
      w.set_string("general.architecture", "qwen2");
      w.set_u32("qwen2.block_count", 1);
      w.set_f32("qwen2.rope.freq_base", 1e6f);
      w.add_tensor_bytes("token_embd.weight", TensorType::Q8_0, std::vector<int64_t>{32, 4},
                         pattern(34 * 4, 1));
      w.add_tensor_bytes("output_norm.weight", TensorType::F32, std::vector<int64_t>{5},
                         pattern(20, 2));
      w.add_tensor_bytes("blk.0.attn_q.weight", TensorType::F16, std::vector<int64_t>{4, 2, 2},
                         pattern(32, 3));
      w.add_tensor_bytes("blk.0.ffn_up.weight", TensorType::Q4_K, std::vector<int64_t>{256, 1},
                         pattern(144, 4));
      w.add_tensor_bytes("blk.0.ffn_down.weight", TensorType::BF16,
                         std::vector<int64_t>{2, 1, 1, 2}, pattern(8, 5));
      w.write(dir + "/tensors.gguf");
    }
    {  // custom alignment
      GgufWriter w;
      w.set_u32("general.alignment", 64);
      w.add_tensor_bytes("a", TensorType::I8, std::vector<int64_t>{3}, pattern(3, 6));
      w.add_tensor_bytes("b", TensorType::Q6_K, std::vector<int64_t>{256}, pattern(210, 7));
      w.write(dir + "/aligned64.gguf");
    }
    {  // vocab-only
      GgufWriter w;
      w.set_string("general.architecture", "qwen2");
      w.set_string("tokenizer.ggml.model", "gpt2");
      std::vector<std::string> tokens;
      std::vector<int32_t> types;
      for (int k = 0; k < 40; ++k) {
        tokens.push_back(std::string(1, static_cast<char>('!' + k)));
        types.push_back(k < 38 ? 1 : 3);
      }
      w.set_string_array("tokenizer.ggml.tokens", tokens);
      w.set_i32_array("tokenizer.ggml.token_type", types);
      w.set_string_array("tokenizer.ggml.merges", std::vector<std::string>{"a b", "ab c"});
      w.set_u32("tokenizer.ggml.eos_token_id", 39);
      w.set_string("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}");
      w.write(dir + "/vocab.gguf");
    }
    const auto tensors = read_all(dir + "/tensors.gguf");
    {  // version 2 (same layout)
      auto b = tensors;
      poke<uint32_t>(b, 4, 2);
      write_all(dir + "/v2.gguf", b);
    }
    {  // corrupt: truncated inside the data section
      auto b = tensors;
      b.resize(b.size() - 40);
      write_all(dir + "/bad-truncated.gguf", b);
    }
    {  // corrupt: overlapping offsets
      auto b = tensors;
      const std::string name = "output_norm.weight";
      poke<uint64_t>(b, find(b, name) + name.size() + 4 + 8 + 4, 0);
      write_all(dir + "/bad-overlap.gguf", b);
    }
    {  // corrupt: huge string length in a key
      auto b = read_all(dir + "/values.gguf");
      poke<uint64_t>(b, find(b, "t.str") - 8, 1ull << 62);
      write_all(dir + "/bad-key-length.gguf", b);
    }
    {  // corrupt: huge array count
      auto b = read_all(dir + "/vocab.gguf");
      poke<uint64_t>(b, find(b, "tokenizer.ggml.tokens") + 21 + 4 + 4, 1ull << 50);
      write_all(dir + "/bad-array-count.gguf", b);
    }
    // ---- tiny models that load (fuzz_model gets past the reader into the model checks) ----
    using T = TensorType;
    {  // qwen2, tied output, every matrix Q8_0, with a small vocabulary (the tokenizer is built)
      TinyModel m;
      m.vocab = true;
      write_tiny_model(dir + "/model-qwen2-q8_0-tied-vocab.gguf", m);
    }
    {  // qwen3 (q/k norms, key_length), untied output, the 32-element block types, one per matrix
      TinyModel m;
      m.arch = "qwen3";
      m.tied = false;
      m.embd = T::F16;
      m.q = T::Q4_0;
      m.k = T::Q4_1;
      m.v = T::Q5_0;
      m.o = T::Q5_1;
      m.gate = T::BF16;
      m.up = T::F32;
      m.down = T::Q8_0;
      m.out = T::F16;
      write_tiny_model(dir + "/model-qwen3-legacy-types-untied.gguf", m);
    }
    for (const T k : {T::Q4_K, T::Q5_K, T::Q6_K}) {  // the K-quants, in ffn_down (rows of 256)
      TinyModel m;
      m.n_ff = 256;
      m.gate = m.up = T::Q4_0;
      m.down = k;
      m.tied = k != T::Q5_K;
      m.out = T::Q6_K == k ? T::Q8_0 : T::Q4_0;
      write_tiny_model(dir + "/model-qwen2-" + std::string(minfer::type_name(k)) + ".gguf", m);
    }
    {  // qwen2 with tensors at 64-byte alignment
      TinyModel m;
      m.alignment = 64;
      m.embd = T::Q4_0;
      write_tiny_model(dir + "/model-qwen2-aligned64.gguf", m);
    }
    const auto model = read_all(dir + "/model-qwen2-q8_0-tied-vocab.gguf");
    {  // bad: general.alignment not a power of two (the reader refuses it)
      TinyModel m;
      m.alignment = 64;
      write_tiny_model(dir + "/bad-align-tmp.gguf", m);
      auto b = read_all(dir + "/bad-align-tmp.gguf");
      std::remove((dir + "/bad-align-tmp.gguf").c_str());
      poke_u32_key(b, "general.alignment", 48);
      write_all(dir + "/bad-alignment-48.gguf", b);
    }
    {  // bad: a tensor offset that is not a multiple of the alignment
      auto b = model;
      const std::string name = "output_norm.weight";
      const size_t off = find(b, name) + name.size() + 4 + 8 * 1 + 4;  // n_dims, ne[0], type
      uint64_t o;
      std::memcpy(&o, b.data() + off, 8);
      poke<uint64_t>(b, off, o + 4);
      write_all(dir + "/bad-unaligned-offset.gguf", b);
    }
    {  // bad model metadata: head_count not a multiple of head_count_kv, no layers, a missing
       // layer, a shape that disagrees with embedding_length, a required key missing
      auto b = model;
      poke_u32_key(b, "qwen2.attention.head_count_kv", 3);
      write_all(dir + "/bad-model-gqa.gguf", b);
      b = model;
      poke_u32_key(b, "qwen2.block_count", 0);
      write_all(dir + "/bad-model-no-layers.gguf", b);
      b = model;
      poke_u32_key(b, "qwen2.block_count", 2);
      write_all(dir + "/bad-model-missing-layer.gguf", b);
      b = model;
      poke_u32_key(b, "qwen2.embedding_length", 64);
      write_all(dir + "/bad-model-shape.gguf", b);
      b = model;
      b[find(b, "qwen2.context_length") + 19] = 'X';  // a required key missing (renamed)
      write_all(dir + "/bad-model-missing-key.gguf", b);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_gguf_corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
