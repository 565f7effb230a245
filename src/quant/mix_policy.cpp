// The mix policy (mix_policy.h). Every rule cites the place in llama.cpp's src/llama-quant.cpp
// (commit 80fb11ac) it restates; rules for file types minfer does not write are left out.
#include "quant/mix_policy.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "quant/quant.h"

namespace minfer {
namespace {

using T = TensorType;

struct FileTypeRow {
  FileType ft;
  std::string_view name;
  T base;  // llama_ftype_get_default_type
};

constexpr std::array<FileTypeRow, 13> kFileTypes{{
    {FileType::AllF32, "f32", T::F32},
    {FileType::MostlyF16, "f16", T::F16},
    {FileType::MostlyBF16, "bf16", T::BF16},
    {FileType::MostlyQ8_0, "q8_0", T::Q8_0},
    {FileType::MostlyQ4_0, "q4_0", T::Q4_0},
    {FileType::MostlyQ4_1, "q4_1", T::Q4_1},
    {FileType::MostlyQ5_0, "q5_0", T::Q5_0},
    {FileType::MostlyQ5_1, "q5_1", T::Q5_1},
    {FileType::MostlyQ6_K, "q6_K", T::Q6_K},
    {FileType::MostlyQ4_K_S, "q4_K_S", T::Q4_K},
    {FileType::MostlyQ4_K_M, "q4_K_M", T::Q4_K},
    {FileType::MostlyQ5_K_S, "q5_K_S", T::Q5_K},
    {FileType::MostlyQ5_K_M, "q5_K_M", T::Q5_K},
}};

// llama-quantize's aliases (tools/quantize/quantize.cpp QUANT_OPTIONS).
struct Alias {
  std::string_view name;
  FileType ft;
};
constexpr std::array<Alias, 2> kAliases{{{"q4_K", FileType::MostlyQ4_K_M},
                                         {"q5_K", FileType::MostlyQ5_K_M}}};

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

const FileTypeRow& row_of(FileType ft) {
  for (const auto& r : kFileTypes)
    if (r.ft == ft) return r;
  fail("file type {} is not one minfer writes", static_cast<uint32_t>(ft));
}

int64_t block_size_of(T type) {
  int64_t bs = 0;
  size_t bytes = 0;
  MINFER_ASSERT(type_block_layout(type, &bs, &bytes));
  return bs;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// tensor_get_category: only the categories the rules below distinguish.
enum class Category { TokenEmbd, Output, AttnV, FfnDown, Other };

Category category_of(std::string_view name) {
  if (name == "output.weight") return Category::Output;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::TokenEmbd;
  // category_is_attn_v: attn_qkv, attn_kv_b and attn_v all take the attn_v branch.
  if (contains(name, "attn_qkv.weight") || contains(name, "attn_kv_b.weight") ||
      contains(name, "attn_v.weight"))
    return Category::AttnV;
  if (contains(name, "attn_k.weight") || contains(name, "attn_q.weight") ||
      contains(name, "attn_output.weight") || contains(name, "ffn_up") || contains(name, "ffn_gate"))
    return Category::Other;
  if (contains(name, "ffn_down")) return Category::FfnDown;
  return Category::Other;
}

// ggml_n_dims: 1 + the index of the last dimension larger than 1.
int ggml_n_dims(const std::vector<int64_t>& ne) {
  int n = 1;
  for (size_t d = 1; d < ne.size(); ++d)
    if (ne[d] > 1) n = static_cast<int>(d) + 1;
  return n;
}

/// The layer number of a "blk.N." name, -1 for other names (weight_name_comparer reads it
/// with sscanf "blk.%d."). Numbers beyond int range saturate.
int layer_of(std::string_view name) {
  constexpr std::string_view kPrefix = "blk.";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  size_t i = kPrefix.size();
  if (i >= name.size() || !std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  int64_t v = 0;
  for (; i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])); ++i)
    v = std::min<int64_t>(v * 10 + (name[i] - '0'), std::numeric_limits<int>::max());
  return static_cast<int>(v);
}

}  // namespace

FileType parse_file_type(std::string_view name) {
  for (const auto& r : kFileTypes)
    if (iequal(r.name, name)) return r.ft;
  for (const auto& a : kAliases)
    if (iequal(a.name, name)) return a.ft;
  fail("unknown type '{}' (supported: {})", name, file_type_names());
}

std::string_view file_type_name(FileType ft) { return row_of(ft).name; }

std::string file_type_names() {
  std::string s;
  for (const auto& r : kFileTypes) {
    if (!s.empty()) s += ", ";
    s += r.name;
  }
  for (const auto& a : kAliases) s += ", " + std::string(a.name);
  return s;
}

TensorType file_type_base(FileType ft) { return row_of(ft).base; }

bool is_quantizable(const MixTensor& t) {
  // tensor_allows_quantization: 2-D or more, name ends with "weight", not a norm. (Its other
  // exclusions name tensors of architectures minfer does not load.)
  if (ggml_n_dims(t.ne) < 2) return false;
  const std::string_view n = t.name;
  if (n.size() < 6 || n.substr(n.size() - 6) != "weight") return false;
  if (contains(n, "_norm.weight")) return false;
  if (contains(n, "ffn_gate_inp.weight")) return false;  // MoE router: never quantized
  return true;
}

TensorType fallback_type(TensorType wanted, int64_t ne0) {
  const int64_t bs = block_size_of(wanted);
  if (ne0 % bs == 0) return wanted;
  T alt = wanted;  // 32-element types have no smaller block: only the f16 step below applies
  switch (wanted) {
    case T::Q4_K: alt = T::Q5_0; break;
    case T::Q5_K: alt = T::Q5_1; break;
    case T::Q6_K: alt = T::Q8_0; break;
    default:
      MINFER_CHECK(bs <= 32, "no fallback type is defined for {}", type_name(wanted));
      break;
  }
  if (ne0 % block_size_of(alt) != 0) alt = T::F16;
  return alt;
}

std::string describe_fallback(const MixTensor& t, const MixChoice& c) {
  return fmt::format("{}: row length {} is not a multiple of {} (the {} block); written as {}",
                     t.name, t.ne.empty() ? 0 : t.ne[0], block_size_of(c.wanted),
                     type_name(c.wanted), type_name(c.type));
}

bool use_more_bits(int i_layer, int n_layer) {
  return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

MixChoice choose_tensor_type(const MixParams& p, const MixTensor& t, int attn_v_index,
                             int ffn_down_index) {
  MixChoice c;
  c.quantizable = is_quantizable(t);
  if (!c.quantizable) {
    c.type = c.wanted = t.type;
    return c;
  }
  const T base = file_type_base(p.ftype);
  T type = base;
  const int64_t ne0 = t.ne.empty() ? 0 : t.ne[0];
  const bool quantized_base = find_type_traits(base) != nullptr && type_traits(base).quantized;
  // llama_tensor_get_type: the rules (and the fallback) only apply to a quantized base type.
  if (quantized_base && !p.pure) {
    const FileType ft = p.ftype;
    const Category cat = category_of(t.name);
    if (cat == Category::Output || (p.tied_embeddings && cat == Category::TokenEmbd)) {
      // The output matrix (and tied embeddings): q6_K, or q8_0 when the base block does not fit.
      if (ne0 % block_size_of(base) != 0) type = T::Q8_0;
      else if (type != T::Q8_0) type = T::Q6_K;
    } else if (cat == Category::AttnV) {
      if ((ft == FileType::MostlyQ4_K_M || ft == FileType::MostlyQ5_K_M) &&
          use_more_bits(attn_v_index, p.n_attn_v))
        type = T::Q6_K;
      else if (ft == FileType::MostlyQ4_K_S && attn_v_index < 4)
        type = T::Q5_K;
    } else if (cat == Category::FfnDown) {
      const int i = ffn_down_index, n = p.n_layer;
      if (ft == FileType::MostlyQ4_K_M) {
        if (use_more_bits(i, n)) type = T::Q6_K;
      } else if (ft == FileType::MostlyQ5_K_M && use_more_bits(i, n)) {
        type = T::Q6_K;
      } else if (ft == FileType::MostlyQ4_K_S && i < n / 8) {
        type = T::Q5_K;
      }
    }
  }
  c.wanted = type;
  c.type = quantized_base ? fallback_type(type, ne0) : type;
  c.fell_back = c.type != c.wanted;
  return c;
}

bool llama_tensor_order_less(std::string_view a, std::string_view b) {
  const int la = layer_of(a), lb = layer_of(b);
  if (la != lb) return la < lb;
  return a < b;
}

std::vector<MixChoice> plan_tensor_types(FileType ftype, std::span<const MixTensor> tensors,
                                         int n_layer, bool pure) {
  MixParams p;
  p.ftype = ftype;
  p.pure = pure;
  p.n_layer = n_layer;
  for (const MixTensor& t : tensors) {
    const Category cat = category_of(t.name);
    if (cat == Category::AttnV) ++p.n_attn_v;  // init_quantize_state_counters
    if (cat == Category::Output) p.tied_embeddings = false;
  }
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return llama_tensor_order_less(tensors[x].name, tensors[y].name);
  });
  std::vector<MixChoice> out(tensors.size());
  int i_attn_v = 0, i_ffn_down = 0;
  for (size_t k : order) {
    const MixTensor& t = tensors[k];
    out[k] = choose_tensor_type(p, t, i_attn_v, i_ffn_down);
    // The counters advance only where llama.cpp advances them: for quantizable tensors, in the
    // branch of their category, when the base type is quantized and the rules run.
    const bool rules_ran = out[k].quantizable && !pure && type_traits(file_type_base(ftype)).quantized;
    if (rules_ran) {
      const Category cat = category_of(t.name);
      const bool output_branch =
          cat == Category::Output || (p.tied_embeddings && cat == Category::TokenEmbd);
      if (!output_branch && cat == Category::AttnV) ++i_attn_v;
      if (!output_branch && cat == Category::FfnDown) ++i_ffn_down;
    }
  }
  return out;
}

}  // namespace minfer
