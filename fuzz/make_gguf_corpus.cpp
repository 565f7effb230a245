// Writes the GGUF fuzzer's seed corpus: small valid files made with the GGUF writer (every value
// type, string arrays, tensors of several types, a custom alignment, a vocab-only file, a v2
// file) and a few corrupt variants of them. Usage: make_gguf_corpus OUT_DIR.
// Deterministic: the same bytes every run, so the committed corpus can be regenerated.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "gguf/gguf_writer.h"

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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_gguf_corpus: %s\n", e.what());
    return 1;
  }
  return 0;
}
