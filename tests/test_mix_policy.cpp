// The mix policy (src/quant/mix_policy.h): which type each tensor gets for a file type. The
// expected types are worked out by hand from llama.cpp's src/llama-quant.cpp rules, and the
// tensor counts per type agree with what llama.cpp's loader reports for the published
// Qwen2.5-7B-Instruct Q4_K_M file (q4_K: 169, q6_K: 29, f32: 141).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "gguf_test_util.h"
#include "quant/mix_policy.h"

namespace minfer {
namespace {

using T = TensorType;

/// The tensors of a Qwen2-style model (names, shapes in ggml order; 1-D tensors f32, the rest
/// `wtype`), in the converter's order (token_embd first, output last).
std::vector<MixTensor> qwen2_tensors(int n_layer, int64_t n_embd, int64_t kv_dim, int64_t n_ff,
                                     int64_t n_vocab, bool tied, T wtype = T::F16) {
  std::vector<MixTensor> t;
  t.push_back({"token_embd.weight", wtype, {n_embd, n_vocab}});
  for (int l = 0; l < n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    t.push_back({b + "attn_norm.weight", T::F32, {n_embd}});
    t.push_back({b + "attn_q.weight", wtype, {n_embd, n_embd}});
    t.push_back({b + "attn_k.weight", wtype, {n_embd, kv_dim}});
    t.push_back({b + "attn_v.weight", wtype, {n_embd, kv_dim}});
    t.push_back({b + "attn_q.bias", T::F32, {n_embd}});
    t.push_back({b + "attn_k.bias", T::F32, {kv_dim}});
    t.push_back({b + "attn_v.bias", T::F32, {kv_dim}});
    t.push_back({b + "attn_output.weight", wtype, {n_embd, n_embd}});
    t.push_back({b + "ffn_norm.weight", T::F32, {n_embd}});
    t.push_back({b + "ffn_gate.weight", wtype, {n_embd, n_ff}});
    t.push_back({b + "ffn_up.weight", wtype, {n_embd, n_ff}});
    t.push_back({b + "ffn_down.weight", wtype, {n_ff, n_embd}});
  }
  t.push_back({"output_norm.weight", T::F32, {n_embd}});
  if (!tied) t.push_back({"output.weight", wtype, {n_embd, n_vocab}});
  return t;
}

std::map<std::string, T> plan_map(FileType ft, const std::vector<MixTensor>& t, int n_layer,
                                  bool pure = false) {
  const auto plan = plan_tensor_types(ft, t, n_layer, pure);
  std::map<std::string, T> m;
  for (size_t i = 0; i < t.size(); ++i) m[t[i].name] = plan[i].type;
  return m;
}

std::map<T, int> count_types(const std::map<std::string, T>& m) {
  std::map<T, int> c;
  for (const auto& [name, type] : m) ++c[type];
  return c;
}

// use_more_bits(i, 28): i < 28/8 = 3, i >= 7*28/8 = 24, or (i - 3) % 3 == 2.
const std::set<int> kMoreBits28 = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27};

TEST(MixPolicy, more_bits_layers_follow_llama_cpp_rule_for_28_layers) {
  std::set<int> got;
  for (int i = 0; i < 28; ++i)
    if (use_more_bits(i, 28)) got.insert(i);
  EXPECT_EQ(got, kMoreBits28);
}

TEST(MixPolicy, q4_K_M_on_qwen2_5_7b_shapes_gives_llama_cpp_types) {
  const auto t = qwen2_tensors(28, 3584, 512, 18944, 152064, /*tied=*/false);
  const auto m = plan_map(FileType::MostlyQ4_K_M, t, 28);
  EXPECT_EQ(m.at("token_embd.weight"), T::Q4_K);  // untied embeddings keep the base type
  EXPECT_EQ(m.at("output.weight"), T::Q6_K);
  EXPECT_EQ(m.at("output_norm.weight"), T::F32);
  for (int l = 0; l < 28; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const T more = kMoreBits28.count(l) ? T::Q6_K : T::Q4_K;
    EXPECT_EQ(m.at(b + "attn_v.weight"), more) << l;
    EXPECT_EQ(m.at(b + "ffn_down.weight"), more) << l;
    for (const char* n : {"attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_gate.weight",
                          "ffn_up.weight"})
      EXPECT_EQ(m.at(b + n), T::Q4_K) << b + n;
    for (const char* n : {"attn_norm.weight", "ffn_norm.weight", "attn_q.bias", "attn_k.bias",
                          "attn_v.bias"})
      EXPECT_EQ(m.at(b + n), T::F32) << b + n;
  }
  const auto c = count_types(m);
  EXPECT_EQ(c.at(T::Q4_K), 169);
  EXPECT_EQ(c.at(T::Q6_K), 29);
  EXPECT_EQ(c.at(T::F32), 141);
}

TEST(MixPolicy, q5_K_M_uses_q6_K_in_the_same_layers_as_q4_K_M) {
  const auto t = qwen2_tensors(28, 3584, 512, 18944, 152064, false);
  const auto m = plan_map(FileType::MostlyQ5_K_M, t, 28);
  EXPECT_EQ(m.at("token_embd.weight"), T::Q5_K);
  EXPECT_EQ(m.at("output.weight"), T::Q6_K);
  for (int l = 0; l < 28; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const T more = kMoreBits28.count(l) ? T::Q6_K : T::Q5_K;
    EXPECT_EQ(m.at(b + "attn_v.weight"), more) << l;
    EXPECT_EQ(m.at(b + "ffn_down.weight"), more) << l;
    EXPECT_EQ(m.at(b + "attn_q.weight"), T::Q5_K);
  }
}

TEST(MixPolicy, q4_K_S_uses_q5_K_for_first_four_attn_v_and_first_eighth_ffn_down) {
  const auto t = qwen2_tensors(28, 3584, 512, 18944, 152064, false);
  const auto m = plan_map(FileType::MostlyQ4_K_S, t, 28);
  EXPECT_EQ(m.at("output.weight"), T::Q6_K);
  EXPECT_EQ(m.at("token_embd.weight"), T::Q4_K);
  for (int l = 0; l < 28; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(m.at(b + "attn_v.weight"), l < 4 ? T::Q5_K : T::Q4_K) << l;
    EXPECT_EQ(m.at(b + "ffn_down.weight"), l < 3 ? T::Q5_K : T::Q4_K) << l;  // 28 / 8 = 3
  }
}

TEST(MixPolicy, tied_embeddings_take_the_output_type) {
  const auto t = qwen2_tensors(2, 256, 128, 768, 1000, /*tied=*/true);
  EXPECT_EQ(plan_map(FileType::MostlyQ4_K_M, t, 2).at("token_embd.weight"), T::Q6_K);
  EXPECT_EQ(plan_map(FileType::MostlyQ4_0, t, 2).at("token_embd.weight"), T::Q6_K);
  EXPECT_EQ(plan_map(FileType::MostlyQ8_0, t, 2).at("token_embd.weight"), T::Q8_0);
  // Untied: token_embd keeps the base type.
  const auto u = qwen2_tensors(2, 256, 128, 768, 1000, /*tied=*/false);
  EXPECT_EQ(plan_map(FileType::MostlyQ4_0, u, 2).at("token_embd.weight"), T::Q4_0);
  EXPECT_EQ(plan_map(FileType::MostlyQ4_0, u, 2).at("output.weight"), T::Q6_K);
}

TEST(MixPolicy, float_targets_apply_to_every_matrix_and_leave_1d_tensors_f32) {
  const auto t = qwen2_tensors(2, 256, 128, 768, 1000, false, T::Q8_0);
  for (FileType ft : {FileType::MostlyF16, FileType::MostlyBF16, FileType::AllF32}) {
    const T want = file_type_base(ft);
    for (const auto& [name, type] : plan_map(ft, t, 2)) {
      const bool one_d = name.find("norm") != std::string::npos || name.find(".bias") != std::string::npos;
      EXPECT_EQ(type, one_d ? T::F32 : want) << name << " for " << file_type_name(ft);
    }
  }
}

TEST(MixPolicy, one_dimensional_tensors_keep_their_type_under_every_target) {
  const auto t = qwen2_tensors(4, 256, 128, 768, 1000, false);
  for (FileType ft : {FileType::MostlyQ4_K_M, FileType::MostlyQ4_K_S, FileType::MostlyQ5_K_M,
                      FileType::MostlyQ6_K, FileType::MostlyQ4_0, FileType::MostlyQ8_0}) {
    const auto plan = plan_tensor_types(ft, t, 4, false);
    for (size_t i = 0; i < t.size(); ++i) {
      if (t[i].ne.size() != 1) continue;
      EXPECT_FALSE(plan[i].quantizable) << t[i].name;
      EXPECT_EQ(plan[i].type, T::F32) << t[i].name;
    }
  }
  // A matrix with a trailing dimension of 1 is 1-D for ggml (ggml_n_dims), hence not quantized.
  EXPECT_FALSE(is_quantizable(MixTensor{"x.weight", T::F32, {256, 1}}));
  EXPECT_TRUE(is_quantizable(MixTensor{"x.weight", T::F32, {256, 2}}));
  EXPECT_FALSE(is_quantizable(MixTensor{"blk.0.attn_q_norm.weight", T::F32, {128, 2}}));
  EXPECT_FALSE(is_quantizable(MixTensor{"x.bias", T::F32, {256, 2}}));
}

TEST(MixPolicy, rows_not_divisible_by_256_fall_back_like_llama_cpp) {
  EXPECT_EQ(fallback_type(T::Q4_K, 896), T::Q5_0);
  EXPECT_EQ(fallback_type(T::Q5_K, 896), T::Q5_1);
  EXPECT_EQ(fallback_type(T::Q6_K, 896), T::Q8_0);
  EXPECT_EQ(fallback_type(T::Q4_K, 4864), T::Q4_K);  // 19 * 256: fits
  EXPECT_EQ(fallback_type(T::Q4_K, 100), T::F16);    // not a multiple of 32 either
  EXPECT_EQ(fallback_type(T::Q4_0, 100), T::F16);
  EXPECT_EQ(fallback_type(T::Q8_0, 96), T::Q8_0);

  // Qwen2.5-0.5B shapes (n_embd 896, tied): 896-wide rows fall back, 4864-wide rows do not.
  const auto t = qwen2_tensors(24, 896, 128, 4864, 151936, true);
  const auto plan = plan_tensor_types(FileType::MostlyQ4_K_M, t, 24, false);
  std::map<std::string, MixChoice> m;
  for (size_t i = 0; i < t.size(); ++i) m[t[i].name] = plan[i];
  EXPECT_EQ(m["token_embd.weight"].type, T::Q8_0);  // output rule: base block does not fit
  EXPECT_FALSE(m["token_embd.weight"].fell_back);
  EXPECT_EQ(m["blk.0.attn_q.weight"].type, T::Q5_0);
  EXPECT_EQ(m["blk.0.attn_q.weight"].wanted, T::Q4_K);
  EXPECT_TRUE(m["blk.0.attn_q.weight"].fell_back);
  EXPECT_EQ(m["blk.0.attn_v.weight"].type, T::Q8_0);  // wanted q6_K (layer 0 has more bits)
  EXPECT_EQ(m["blk.3.attn_v.weight"].type, T::Q5_0);  // wanted q4_K
  EXPECT_EQ(m["blk.0.ffn_down.weight"].type, T::Q6_K);
  EXPECT_EQ(m["blk.3.ffn_down.weight"].type, T::Q4_K);
  EXPECT_FALSE(m["blk.3.ffn_down.weight"].fell_back);
  EXPECT_EQ(describe_fallback(t[2], m["blk.0.attn_q.weight"]),
            "blk.0.attn_q.weight: row length 896 is not a multiple of 256 (the q4_K block); "
            "written as q5_0");
}

TEST(MixPolicy, pure_gives_every_matrix_the_base_type_except_fallbacks) {
  const auto t = qwen2_tensors(8, 256, 128, 768, 1000, false);
  for (const auto& [name, type] : plan_map(FileType::MostlyQ4_K_M, t, 8, /*pure=*/true)) {
    const bool one_d = name.find("norm") != std::string::npos || name.find(".bias") != std::string::npos;
    EXPECT_EQ(type, one_d ? T::F32 : T::Q4_K) << name;
  }
}

TEST(MixPolicy, layer_numbering_follows_llama_loader_order_not_file_order) {
  // Layers listed 15, 14, ..., 0 in the file: the attn_v ordinal is still the layer number.
  std::vector<MixTensor> t;
  for (int l = 15; l >= 0; --l)
    t.push_back({"blk." + std::to_string(l) + ".attn_v.weight", T::F16, {256, 256}});
  const auto plan = plan_tensor_types(FileType::MostlyQ4_K_M, t, 16, false);
  for (size_t i = 0; i < t.size(); ++i) {
    const int l = 15 - static_cast<int>(i);
    EXPECT_EQ(plan[i].type, use_more_bits(l, 16) ? T::Q6_K : T::Q4_K) << t[i].name;
  }
  EXPECT_TRUE(llama_tensor_order_less("output.weight", "blk.0.attn_k.weight"));
  EXPECT_TRUE(llama_tensor_order_less("blk.2.ffn_up.weight", "blk.10.attn_k.weight"));
  EXPECT_TRUE(llama_tensor_order_less("blk.2.attn_v.weight", "blk.2.ffn_down.weight"));
  EXPECT_FALSE(llama_tensor_order_less("token_embd.weight", "output.weight"));
}

TEST(MixPolicy, file_type_names_and_llama_ftype_values) {
  EXPECT_EQ(parse_file_type("Q4_K_M"), FileType::MostlyQ4_K_M);
  EXPECT_EQ(parse_file_type("q4_k"), FileType::MostlyQ4_K_M);  // llama-quantize alias
  EXPECT_EQ(parse_file_type("q5_K"), FileType::MostlyQ5_K_M);
  EXPECT_EQ(parse_file_type("bf16"), FileType::MostlyBF16);
  // llama.h enum llama_ftype values.
  EXPECT_EQ(static_cast<uint32_t>(FileType::AllF32), 0u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::MostlyQ8_0), 7u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::MostlyQ4_K_M), 15u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::MostlyQ5_K_M), 17u);
  EXPECT_EQ(static_cast<uint32_t>(FileType::MostlyBF16), 32u);
  EXPECT_EQ(file_type_base(FileType::MostlyQ4_K_S), T::Q4_K);
  for (std::string_view n : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q6_K",
                             "q4_K_S", "q4_K_M", "q5_K_S", "q5_K_M"})
    EXPECT_EQ(file_type_name(parse_file_type(n)), n);
  const std::string msg = test::error_of([] { parse_file_type("q3_K_M"); });
  EXPECT_CONTAINS(msg, "unknown type 'q3_K_M'");
  EXPECT_CONTAINS(msg, "q4_K_M");
}

}  // namespace
}  // namespace minfer
