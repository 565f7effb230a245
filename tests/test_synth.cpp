// `minfer synth` (src/convert/synth*.h and the command): preset facts against published numbers,
// metadata, vocabulary padding, determinism, a forward pass of the tiny presets, and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <sys/wait.h>

#include <unistd.h>

#include "convert/synth.h"
#include "convert/synth_random.h"
#include "convert/synth_vocab.h"
#include "engine/engine.h"
#include "gguf_test_util.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace minfer::convert {
namespace {

/// A scratch folder for one test, removed when the test ends: these tests write model files of
/// tens of megabytes. Named like test::temp_dir()'s, with the '/' of a parameterized test's name
/// replaced so the folder is not nested.
struct ScratchDir {
  std::filesystem::path path = flat_temp_dir();
  static std::filesystem::path flat_temp_dir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("minfer_test_") + info->test_suite_name() + "_" + info->name() + "_" +
                       std::to_string(::getpid());
    std::replace(name.begin(), name.end(), '/', '_');
    const auto dir = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

constexpr const char* kVocab = "fixtures/tokenizer/ggml-vocab-qwen2.gguf";

/// Options for a synth of `preset` in `type` to `out`, without a progress bar.
SynthOptions options(const std::string& arch, const std::string& preset, const std::string& type,
                     const std::filesystem::path& out, uint64_t seed = 7, int threads = 2,
                     const std::string& vocab = test::shared_path(kVocab).string()) {
  SynthOptions o;
  o.arch = arch;
  o.preset = preset;
  o.ftype = parse_file_type(type);
  o.vocab = vocab;
  o.output = out.string();
  o.seed = seed;
  o.n_threads = threads;
  o.progress = false;
  return o;
}

SynthReport synth(const std::string& arch, const std::string& preset, const std::string& type,
                  const std::filesystem::path& out, uint64_t seed = 7, int threads = 2,
                  const std::string& vocab = test::shared_path(kVocab).string()) {
  return synth_model(options(arch, preset, type, out, seed, threads, vocab));
}

// Published parameter counts (Hugging Face model pages, safetensors "Params", exact).
TEST(SynthPresets, parameter_counts_match_the_published_models) {
  EXPECT_EQ(find_synth_preset("qwen2", "qwen2.5-0.5b").n_params(), 494032768u);
  EXPECT_EQ(find_synth_preset("qwen2", "qwen2.5-1.5b").n_params(), 1543714304u);
  EXPECT_EQ(find_synth_preset("qwen2", "qwen2.5-7b").n_params(), 7615616512u);
  EXPECT_EQ(find_synth_preset("qwen3", "qwen3-0.6b").n_params(), 596049920u);
  EXPECT_EQ(find_synth_preset("qwen3", "qwen3-8b").n_params(), 8190735360u);
  // Llama 3.2 1B / 3B, Llama 3.1 8B (plus rope_freqs.weight's head_dim / 2), Mistral 7B v0.3.
  EXPECT_EQ(find_synth_preset("llama", "llama-3.2-1b").n_params(), 1235814432u);
  EXPECT_EQ(find_synth_preset("llama", "llama-3.2-3b").n_params(), 3212749888u);
  EXPECT_EQ(find_synth_preset("llama", "llama-3.1-8b").n_params(), 8030261312u);
  EXPECT_EQ(find_synth_preset("llama", "mistral-7b-v0.3").n_params(), 7248023552u);
}

// ../shared/design/ANCHORS.md: file sizes in GiB (3 decimals) of the same models made by
// llama.cpp's converter (official tokenizers) and llama-quantize. Ours: tensor bytes of the
// plan plus the metadata of the fixture vocabulary (5.93 MB; the official Qwen2.5 tokenizer
// metadata differs from it by well under 1 MB). Tolerance: the 3-decimal rounding plus 1 MB.
// A wrong type on one ffn_down of the 7B model would move the size by 17 MB.
TEST(SynthPresets, sizes_match_llama_cpp_files_of_the_same_models) {
  MINFER_REQUIRE_SHARED(kVocab);
  const double vocab_gib =
      static_cast<double>(std::filesystem::file_size(test::shared_path(kVocab))) / (1 << 30);
  struct Row {
    const char* arch;
    const char* preset;
    const char* type;
    double gib;
  };
  const Row rows[] = {
      {"qwen2", "qwen2.5-0.5b", "bf16", 0.926},   {"qwen2", "qwen2.5-0.5b", "q4_K_M", 0.370},
      {"qwen2", "qwen2.5-0.5b", "q8_0", 0.495},   {"qwen2", "qwen2.5-0.5b", "q4_0", 0.328},
      {"qwen2", "qwen2.5-1.5b", "bf16", 2.881},   {"qwen2", "qwen2.5-1.5b", "q4_K_M", 0.918},
      {"qwen2", "qwen2.5-1.5b", "q8_0", 1.533},   {"qwen2", "qwen2.5-1.5b", "q4_0", 0.871},
      {"qwen2", "qwen2.5-7b", "bf16", 14.191},    {"qwen2", "qwen2.5-7b", "q4_K_M", 4.361},
      {"qwen2", "qwen2.5-7b", "q8_0", 7.542},     {"qwen2", "qwen2.5-7b", "q4_0", 4.127},
      {"qwen3", "qwen3-8b", "bf16", 15.263},      {"qwen3", "qwen3-8b", "q4_K_M", 4.682},
      {"qwen3", "qwen3-8b", "q8_0", 8.111},       {"qwen3", "qwen3-8b", "q4_0", 4.447},
  };
  const double tol = 0.0005 + 1e6 / (1 << 30);
  for (const Row& r : rows) {
    const auto plan = synth_tensor_plan(find_synth_preset(r.arch, r.preset), parse_file_type(r.type), false);
    const double gib = static_cast<double>(synth_plan_bytes(plan)) / (1 << 30) + vocab_gib;
    EXPECT_NEAR(gib, r.gib, tol) << r.preset << " " << r.type;
  }
}

TEST(SynthPresets, unknown_names_are_errors_that_list_the_choices) {
  EXPECT_CONTAINS(test::error_of([] { find_synth_preset("qwen2", "qwen9-1b"); }),
                  "unknown preset 'qwen9-1b' for qwen2 (presets: qwen2.5-0.5b, qwen2.5-1.5b");
  EXPECT_CONTAINS(test::error_of([] { find_synth_preset("gpt2", "tiny"); }),
                  "unknown architecture 'gpt2' (supported: qwen2, qwen3, llama)");
  EXPECT_CONTAINS(test::error_of([] { find_synth_preset("qwen2", "qwen3-8b"); }),
                  "preset 'qwen3-8b' is a qwen3 model, not qwen2");
}

TEST(SynthRandom, values_have_mean_0_and_std_1_and_depend_on_seed_and_name) {
  const uint64_t key = tensor_key(42, "blk.0.attn_q.weight");
  double s = 0, s2 = 0;
  const int n = 1 << 20;
  for (int i = 0; i < n; ++i) {
    const double v = normal_like(counter_hash(key, static_cast<uint64_t>(i)));
    s += v;
    s2 += v * v;
  }
  const double mean = s / n, var = s2 / n - mean * mean;
  // Standard error of the mean is 1/sqrt(n) = 0.001; of the variance ~sqrt(2/n) = 0.0014.
  EXPECT_NEAR(mean, 0.0, 0.005);
  EXPECT_NEAR(var, 1.0, 0.007);
  EXPECT_NE(tensor_key(42, "a"), tensor_key(43, "a"));
  EXPECT_NE(tensor_key(42, "a"), tensor_key(42, "b"));
  EXPECT_NE(counter_hash(key, 0), counter_hash(key, 1));
}

TEST(Synth, metadata_has_llama_cpp_keys_and_the_preset_values) {
  MINFER_REQUIRE_SHARED(kVocab);
  const ScratchDir scratch;
  const auto& dir = scratch.path;
  synth("qwen3", "tiny", "q8_0", dir / "m.gguf");
  const auto f = gguf::GgufFile::open((dir / "m.gguf").string());
  EXPECT_EQ(f->get_string("general.architecture"), "qwen3");
  EXPECT_EQ(f->get_string("general.type"), "model");
  EXPECT_EQ(f->get_u32("qwen3.block_count"), 2u);
  EXPECT_EQ(f->get_u32("qwen3.embedding_length"), 256u);
  EXPECT_EQ(f->get_u32("qwen3.feed_forward_length"), 768u);
  EXPECT_EQ(f->get_u32("qwen3.attention.head_count"), 4u);
  EXPECT_EQ(f->get_u32("qwen3.attention.head_count_kv"), 2u);
  EXPECT_EQ(f->get_u32("qwen3.attention.key_length"), 128u);
  EXPECT_EQ(f->get_u32("qwen3.attention.value_length"), 128u);
  EXPECT_EQ(f->get_u32("qwen3.context_length"), 2048u);
  EXPECT_EQ(f->get_f32("qwen3.rope.freq_base"), 1e6f);
  EXPECT_EQ(f->get_f32("qwen3.attention.layer_norm_rms_epsilon"), 1e-6f);
  EXPECT_EQ(f->get_u32("general.file_type"), 7u);  // LLAMA_FTYPE_MOSTLY_Q8_0
  EXPECT_EQ(f->get_u32("general.quantization_version"), 2u);
  EXPECT_CONTAINS(std::string(*f->get_string("general.description")), "seed 7");
  // Every tokenizer.* key of the vocabulary file, unchanged (151936 tokens: no padding needed).
  const auto v = gguf::GgufFile::open(test::shared_path(kVocab).string());
  for (const auto& kv : v->metadata()) {
    if (kv.key.rfind("tokenizer.", 0) != 0) continue;
    const gguf::Value* got = f->find(kv.key);
    ASSERT_NE(got, nullptr) << kv.key;
    EXPECT_EQ(got->type, kv.value.type) << kv.key;
    EXPECT_EQ(got->count, kv.value.count) << kv.key;
    if (kv.value.type == gguf::ValueType::STRING) {
      EXPECT_EQ(got->str, kv.value.str) << kv.key;
    }
    if (kv.value.type == gguf::ValueType::ARRAY && kv.value.elem_type == gguf::ValueType::STRING) {
      EXPECT_TRUE(got->strings == kv.value.strings) << kv.key;
    }
  }
  // Qwen3 tensors: q/k norms, no biases, an output matrix (untied tiny preset).
  EXPECT_NE(f->find_tensor("blk.1.attn_q_norm.weight"), nullptr);
  EXPECT_EQ(f->find_tensor("blk.1.attn_q.bias"), nullptr);
  EXPECT_NE(f->find_tensor("output.weight"), nullptr);
}

// --layers: the preset's layer shapes with another depth (a 28-layer 7B profiled as 2 layers).
TEST(Synth, layers_option_writes_that_many_layers_of_the_preset_shape) {
  MINFER_REQUIRE_SHARED(kVocab);
  const ScratchDir scratch;
  const auto& dir = scratch.path;
  SynthOptions o = options("qwen2", "tiny", "q8_0", dir / "m.gguf", /*seed=*/0);
  o.n_layer = 3;
  const SynthReport r = synth_model(o);
  EXPECT_EQ(r.n_layer, 3);
  EXPECT_EQ(r.preset->n_layer, 2);  // the preset itself is unchanged
  const auto f = gguf::GgufFile::open(o.output);
  EXPECT_EQ(f->get_u32("qwen2.block_count"), 3u);
  EXPECT_EQ(f->get_u32("qwen2.embedding_length"), 256u);
  EXPECT_EQ(std::string(*f->get_string("general.name")), "minfer-tiny-qwen2 (synthetic, 3 layers)");
  ASSERT_NE(f->find_tensor("blk.2.ffn_down.weight"), nullptr);
  EXPECT_EQ(f->find_tensor("blk.3.ffn_down.weight"), nullptr);
  // Layer 0 is the same tensor as in the 2-layer preset (weights depend on name and seed only).
  o.n_layer = 0;
  o.output = (dir / "p.gguf").string();
  EXPECT_EQ(synth_model(o).n_layer, 2);
  const auto g = gguf::GgufFile::open(o.output);
  EXPECT_EQ(std::string(*g->get_string("general.name")), "minfer-tiny-qwen2 (synthetic)");
  const auto m3 = Model::load((dir / "m.gguf").string());
  const auto m2 = Model::load(o.output);
  const graph::WeightTensor& a = m3->weight("blk.0.attn_q.weight");
  const graph::WeightTensor& b = m2->weight("blk.0.attn_q.weight");
  ASSERT_EQ(a.nbytes, b.nbytes);
  EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0);
  for (const int64_t bad : {int64_t{-1}, kSynthMaxLayers + 1}) {
    o.n_layer = bad;
    o.output = (dir / "bad.gguf").string();
    EXPECT_CONTAINS(test::error_of([&] { synth_model(o); }),
                    fmt::format("--layers {} is out of range: 1..1024 (0 or absent: the preset's 2)", bad));
    EXPECT_FALSE(std::filesystem::exists(dir / "bad.gguf"));
  }
}

TEST(Synth, distinct_rows_repeat_the_first_rows_with_every_shape_and_type_kept) {
  MINFER_REQUIRE_SHARED(kVocab);
  const ScratchDir scratch;
  const auto& dir = scratch.path;
  // tiny-odd: some rows fall back to other types, so the repeat works on per-row bytes.
  SynthOptions o = options("qwen2", "tiny-odd", "q4_K_M", dir / "full.gguf", /*seed=*/5);
  synth_model(o);
  constexpr int64_t kDistinct = 3;
  o.distinct_rows = kDistinct;
  o.output = (dir / "d2.gguf").string();
  synth_model(o);
  o.n_threads = 1;
  o.output = (dir / "d1.gguf").string();
  synth_model(o);
  EXPECT_TRUE(test::read_bytes(dir / "d1.gguf") == test::read_bytes(dir / "d2.gguf")) << "thread count changed bytes";

  const auto full = gguf::GgufFile::open((dir / "full.gguf").string());
  const auto rep = gguf::GgufFile::open((dir / "d2.gguf").string());
  ASSERT_EQ(full->tensors().size(), rep->tensors().size());
  int matrices = 0;
  for (const gguf::TensorInfo& a : full->tensors()) {
    const gguf::TensorInfo* b = rep->find_tensor(a.name);
    ASSERT_NE(b, nullptr) << a.name;
    EXPECT_EQ(b->type, a.type) << a.name;
    ASSERT_EQ(b->nbytes, a.nbytes) << a.name;
    const int64_t rows = a.n_rows();
    const size_t rb = a.nbytes / static_cast<size_t>(rows);
    if (rows <= kDistinct) {  // norms and biases: one row, written in full
      EXPECT_EQ(std::memcmp(a.data, b->data, a.nbytes), 0) << a.name;
      continue;
    }
    ++matrices;
    EXPECT_EQ(std::memcmp(a.data, b->data, rb * kDistinct), 0) << a.name << ": the first rows are the full synth's";
    std::set<int64_t> used;
    for (int64_t r = kDistinct; r < rows; ++r) {
      int64_t src = -1;
      for (int64_t d = 0; d < kDistinct && src < 0; ++d)
        if (std::memcmp(b->data + r * rb, b->data + d * rb, rb) == 0) src = d;
      ASSERT_GE(src, 0) << a.name << " row " << r << " is not a copy of one of the first rows";
      used.insert(src);
    }
    EXPECT_EQ(used.size(), static_cast<size_t>(kDistinct)) << a.name << ": the seeded order uses every row";
  }
  EXPECT_GT(matrices, 10);
  const auto m = Model::load((dir / "d2.gguf").string());
  EXPECT_EQ(m->weight("blk.1.ffn_down.weight").nbytes, full->find_tensor("blk.1.ffn_down.weight")->nbytes);

  for (const int64_t bad : {int64_t{-1}, kSynthMaxDistinctRows + 1}) {
    o.distinct_rows = bad;
    o.output = (dir / "bad.gguf").string();
    EXPECT_CONTAINS(test::error_of([&] { synth_model(o); }),
                    fmt::format("--distinct-rows {} is out of range: 1..2147483648 (0 or absent: every row distinct)",
                                bad));
    EXPECT_FALSE(std::filesystem::exists(dir / "bad.gguf"));
  }
}

TEST(SynthVocab, short_vocabularies_are_padded_with_user_defined_pad_tokens) {
  MINFER_REQUIRE_SHARED(kVocab);
  const ScratchDir scratch;
  const auto& dir = scratch.path;
  gguf::GgufWriter w;
  const int64_t n_tokens = add_vocab_metadata(w, test::shared_path(kVocab).string(), 152064);
  EXPECT_EQ(n_tokens, 151936);
  w.write((dir / "v.gguf").string());
  const auto f = gguf::GgufFile::open((dir / "v.gguf").string());
  const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  const auto types = f->get_i32_array("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens->size(), 152064u);
  ASSERT_EQ(types->size(), 152064u);
  EXPECT_EQ((*tokens)[151936], "[PAD151936]");
  EXPECT_EQ((*tokens)[152063], "[PAD152063]");
  EXPECT_EQ((*types)[152063], 4);   // user-defined
  EXPECT_EQ((*tokens)[151643], "<|endoftext|>");  // original tokens untouched
  EXPECT_EQ((*types)[151643], 3);
  // More tokens than embedding rows is an error naming the file and both counts.
  gguf::GgufWriter w2;
  EXPECT_CONTAINS(test::error_of([&] { add_vocab_metadata(w2, test::shared_path(kVocab).string(), 1000); }),
                  "151936 tokens do not fit the model's 1000 embedding rows");
}

bool same(std::span<const std::string_view> a, std::span<const std::string_view> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

TEST(SynthVocab, tokenizer_json_gives_the_same_tokens_as_the_gguf_vocabulary) {
  MINFER_REQUIRE_SHARED(kVocab);
  const ScratchDir scratch;
  const auto& dir = scratch.path;
  const auto vf = gguf::GgufFile::open(test::shared_path(kVocab).string());
  const tok::VocabData d = tok::vocab_from_gguf(*vf);
  test::write_tokenizer_json(d, dir / "tokenizer.json", /*pair_merges=*/false);
  synth("qwen2", "tiny", "q8_0", dir / "m.gguf", 7, 2, (dir / "tokenizer.json").string());
  const auto model = Model::load((dir / "m.gguf").string());
  ASSERT_NE(model->tokenizer(), nullptr);
  const auto f = gguf::GgufFile::open((dir / "m.gguf").string());
  EXPECT_TRUE(same(*f->get_string_array("tokenizer.ggml.tokens"), *vf->get_string_array("tokenizer.ggml.tokens")));
  EXPECT_EQ(*f->get_i32_array("tokenizer.ggml.token_type"), *vf->get_i32_array("tokenizer.ggml.token_type"));
  EXPECT_TRUE(same(*f->get_string_array("tokenizer.ggml.merges"), *vf->get_string_array("tokenizer.ggml.merges")));
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(model->tokenizer()->encode("Hello world", false, false),
            tok::Tokenizer(tok::vocab_from_gguf(*vf)).encode("Hello world", false, false));
}

TEST(Synth, same_seed_gives_same_bytes_for_any_thread_count) {
  MINFER_REQUIRE_SHARED(kVocab);
  const ScratchDir scratch;
  const auto& dir = scratch.path;
  synth("qwen2", "tiny-odd", "q4_K_M", dir / "a.gguf", 11, 1);
  synth("qwen2", "tiny-odd", "q4_K_M", dir / "b.gguf", 11, 2);
  synth("qwen2", "tiny-odd", "q4_K_M", dir / "c.gguf", 12, 2);
  const auto a = test::read_bytes(dir / "a.gguf");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == test::read_bytes(dir / "b.gguf"));
  const auto fa = gguf::GgufFile::open((dir / "a.gguf").string());
  const auto fc = gguf::GgufFile::open((dir / "c.gguf").string());
  const auto* ta = fa->find_tensor("blk.0.ffn_up.weight");
  const auto* tc = fc->find_tensor("blk.0.ffn_up.weight");
  ASSERT_EQ(ta->nbytes, tc->nbytes);
  EXPECT_NE(std::memcmp(ta->data, tc->data, ta->nbytes), 0);  // another seed, other weights
}

TEST(Synth, odd_preset_reports_fallbacks_and_loads) {
  MINFER_REQUIRE_SHARED(kVocab);
  const ScratchDir scratch;
  const auto& dir = scratch.path;
  const SynthReport r = synth("qwen2", "tiny-odd", "q4_K_M", dir / "m.gguf");
  // Rows of 320 (attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up) and of 832 (ffn_down)
  // in both layers; token_embd (tied) takes the output rule (q8_0), not a fallback.
  EXPECT_EQ(r.fallback_notes.size(), 14u);
  EXPECT_CONTAINS(r.fallback_notes[0], "row length");
  const auto model = Model::load((dir / "m.gguf").string());
  EXPECT_EQ(model->weight("token_embd.weight").type, TensorType::Q8_0);
  EXPECT_EQ(model->weight("blk.0.ffn_down.weight").type, TensorType::Q5_0);  // q4_K -> q5_0
  EXPECT_EQ(model->weight("blk.1.ffn_down.weight").type, TensorType::Q8_0);  // q6_K -> q8_0
}

/// Greedy decoding of `n` tokens after `prompt`; also returns the std of the first logits.
std::vector<int32_t> greedy(Engine& e, std::vector<int32_t> prompt, int n, double* logit_std) {
  std::vector<float> logits = e.decode(prompt);
  double s = 0, s2 = 0;
  for (float v : logits) {
    s += v;
    s2 += double(v) * v;
  }
  const double mean = s / static_cast<double>(logits.size());
  *logit_std = std::sqrt(s2 / static_cast<double>(logits.size()) - mean * mean);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const auto it = std::max_element(logits.begin(), logits.end());
    const int32_t tok = static_cast<int32_t>(it - logits.begin());
    out.push_back(tok);
    logits = e.decode(std::vector<int32_t>{tok});
  }
  return out;
}

class SynthForward : public ::testing::TestWithParam<const char*> {};

TEST_P(SynthForward, tiny_preset_runs_with_spread_logits_and_a_varied_greedy_continuation) {
  MINFER_REQUIRE_SHARED(kVocab);
  const ScratchDir scratch;
  const auto& dir = scratch.path;
  synth(GetParam(), "tiny", "q8_0", dir / "m.gguf");
  auto model = Model::load((dir / "m.gguf").string());
  EngineConfig cfg;
  cfg.n_threads = 2;
  cfg.n_ctx = 64;
  cfg.kv_type = TensorType::F32;
  Engine engine(model, cfg);
  const auto prompt = model->tokenizer()->encode("The quick brown fox", false, false);
  double logit_std = 0;
  const auto out = greedy(engine, prompt, 24, &logit_std);
  // kSynthLogitStd aims the logits at a std of 4: require "several units", not a flat output.
  EXPECT_GT(logit_std, 2.0);
  EXPECT_LT(logit_std, 8.0);
  const std::set<int32_t> distinct(out.begin(), out.end());
  std::printf("%s tiny: logit std %.2f, %zu distinct tokens in a greedy continuation of %zu\n",
              GetParam(), logit_std, distinct.size(), out.size());
  // kSynthAttnGain and kSynthResidualGain keep greedy decoding from settling into runs of one
  // token (measured here: 18 distinct of 24 for qwen2, 24 for qwen3). Half is the bound, so a
  // kernel that changes the last bits of the logits cannot flip the verdict.
  EXPECT_GE(distinct.size(), 12u) << "greedy continuation collapses to few tokens";
}

INSTANTIATE_TEST_SUITE_P(Arch, SynthForward, ::testing::Values("qwen2", "qwen3"));

/// True when every byte is printable ASCII, '\n' or '\t'.
bool printable_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= ' ' && c <= '~') || c == '\n' || c == '\t'; });
}

/// --ascii-output on `arch` tiny with `vocab_file`: the flagged rows of the output matrix are zero
/// bytes and the others are not, and a greedy continuation uses kept tokens only, whose text is
/// printable ASCII (varied, when every row is distinct: with D distinct rows there are at most D
/// distinct logits). Returns the flags.
std::vector<bool> check_ascii_output(const std::string& arch, const std::string& vocab_file, bool add_bos,
                                     int64_t distinct_rows) {
  const ScratchDir scratch;
  const auto out = scratch.path / "m.gguf";
  SynthOptions o = options(arch, "tiny", "q8_0", out, /*seed=*/3, 2, test::shared_path(vocab_file).string());
  o.ascii_output = true;
  o.distinct_rows = distinct_rows;  // the zero rows are written after the copies of the distinct rows
  synth_model(o);
  const auto file = gguf::GgufFile::open(out.string());
  const std::vector<bool> zero = synth_ascii_output_rows(tok::vocab_from_gguf(*file));
  const gguf::TensorInfo* w = file->find_tensor("output.weight");
  if (w == nullptr) w = file->find_tensor("token_embd.weight");  // tied
  EXPECT_NE(w, nullptr);
  if (w == nullptr) return zero;
  EXPECT_EQ(static_cast<size_t>(w->n_rows()), zero.size());
  const size_t rb = w->nbytes / static_cast<size_t>(w->n_rows());
  int64_t zero_rows = 0;
  for (size_t r = 0; r < zero.size(); ++r) {
    const uint8_t* row = w->data + r * rb;
    const bool all_zero = std::all_of(row, row + rb, [](uint8_t b) { return b == 0; });
    EXPECT_EQ(all_zero, static_cast<bool>(zero[r])) << arch << " row " << r;
    zero_rows += all_zero;
  }
  EXPECT_GT(zero_rows, 0);
  EXPECT_LT(zero_rows, static_cast<int64_t>(zero.size()));

  auto model = Model::load(out.string());
  EngineConfig cfg;
  cfg.n_threads = 2;
  cfg.n_ctx = 64;
  cfg.kv_type = TensorType::F32;
  Engine engine(model, cfg);
  double logit_std = 0;
  const auto gen = greedy(engine, model->tokenizer()->encode("The quick brown fox", add_bos, false), 32, &logit_std);
  for (int32_t t : gen) EXPECT_FALSE(zero[static_cast<size_t>(t)]) << arch << ": greedy chose zeroed token " << t;
  const std::string text = model->tokenizer()->decode(gen);
  EXPECT_TRUE(printable_ascii(text)) << arch << ": " << text;
  if (distinct_rows == 0) {
    EXPECT_GE(std::set<int32_t>(gen.begin(), gen.end()).size(), 12u) << arch << ": " << text;
  }
  return zero;
}

TEST(Synth, ascii_output_zeroes_the_rows_of_other_tokens_and_greedy_decoding_writes_ascii) {
  MINFER_REQUIRE_SHARED(kVocab);
  const tok::VocabData v = tok::vocab_from_gguf(*gguf::GgufFile::open(test::shared_path(kVocab).string()));
  const tok::Tokenizer tk(v);
  const auto id = [&](std::string_view text) { return static_cast<size_t>(*tk.find_token(text)); };
  const std::vector<bool> zero = check_ascii_output("qwen2", kVocab, false, 0);
  ASSERT_EQ(zero.size(), v.tokens.size());
  // Byte-level texts: "Ġ" is a space, "Ċ" a newline; "ä" alone is the byte 0xE4 (a partial
  // UTF-8 sequence), "ä½ł" the three bytes of U+4F60.
  EXPECT_FALSE(zero[id("Hello")]);
  EXPECT_FALSE(zero[id("\u0120world")]);
  EXPECT_FALSE(zero[id("\u010A")]);
  EXPECT_TRUE(zero[id("\u00E4")]);
  EXPECT_TRUE(zero[id("\u00E4\u00BD\u0142")]);
  EXPECT_TRUE(zero[static_cast<size_t>(v.eos_id)]) << "control tokens are zeroed";
  check_ascii_output("qwen3", kVocab, false, 3);
}

TEST(Synth, ascii_output_with_a_sentencepiece_vocabulary_keeps_words_and_drops_byte_tokens) {
  const char* vocab = "fixtures/tokenizer/ggml-vocab-llama-spm.gguf";
  MINFER_REQUIRE_SHARED(vocab);
  const tok::VocabData v = tok::vocab_from_gguf(*gguf::GgufFile::open(test::shared_path(vocab).string()));
  const tok::Tokenizer tk(v);
  const std::vector<bool> zero = check_ascii_output("llama", vocab, true, 0);
  EXPECT_FALSE(zero[static_cast<size_t>(*tk.find_token("\u2581the"))]);
  EXPECT_TRUE(zero[static_cast<size_t>(*tk.find_token("<0x0A>"))]) << "byte tokens are zeroed";
  EXPECT_TRUE(zero[static_cast<size_t>(v.bos_id)]);
}

TEST(SynthLlama, tiny_llama_preset_has_the_frequency_factors_and_runs_with_the_spm_vocabulary) {
  const char* vocab = "fixtures/tokenizer/ggml-vocab-llama-spm.gguf";
  MINFER_REQUIRE_SHARED(vocab);
  const ScratchDir scratch;
  const auto out = scratch.path / "m.gguf";
  synth_model(options("llama", "tiny", "q8_0", out, 1, 2, test::shared_path(vocab).string()));
  auto model = Model::load(out.string());
  const HParams& h = model->hparams();
  EXPECT_EQ(h.arch, Arch::Llama);
  EXPECT_FALSE(h.tied_output);
  ASSERT_TRUE(h.has_rope_freqs);
  // Llama 3.1's rule at base 500000, head_dim 64, original context 8192, factors 8 / 1 / 4:
  // pair 0 (wavelength 2 pi) keeps its frequency, pair 31 (wavelength ~1.9e6) is divided by 8.
  const auto* ff = reinterpret_cast<const float*>(model->weight("rope_freqs.weight").data);
  EXPECT_EQ(ff[0], 1.0f);
  EXPECT_EQ(ff[31], 8.0f);
  for (int i = 1; i < 32; ++i) EXPECT_GE(ff[i], ff[i - 1]) << i;
  EngineConfig cfg;
  cfg.n_threads = 2;
  cfg.n_ctx = 64;
  cfg.kv_type = TensorType::F32;
  Engine engine(model, cfg);
  const auto prompt = model->tokenizer()->encode("The quick brown fox", true, false);
  EXPECT_EQ(prompt.front(), 1);  // BOS, as the SentencePiece vocabulary asks
  double logit_std = 0;
  const auto gen = greedy(engine, prompt, 24, &logit_std);
  EXPECT_GT(logit_std, 2.0);
  EXPECT_LT(logit_std, 8.0);
  EXPECT_GE(std::set<int32_t>(gen.begin(), gen.end()).size(), 12u);
}

// ---- the command ---------------------------------------------------------------------------

struct CmdResult {
  int exit_code = -1;
  std::string out;
};

CmdResult run_cmd(const std::string& args) {
  CmdResult r;
  FILE* p = ::popen(("MINFER_LOG=info " + test::minfer_bin() + " " + args + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(SynthCommand, writes_a_model_that_loads) {
  MINFER_REQUIRE_SHARED(kVocab);
  const ScratchDir scratch;
  const auto& dir = scratch.path;
  const auto out = dir / "m.gguf";
  const CmdResult r = run_cmd("synth --arch qwen2 --preset tiny --type f16 --seed 3 --vocab " +
                              test::shared_path(kVocab).string() + " -o " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_CONTAINS(r.out, "qwen2 tiny");
  EXPECT_EQ(Model::load(out.string())->weight("blk.0.attn_q.weight").type, TensorType::F16);
}

TEST(SynthCommand, refuses_to_overwrite_its_vocab_file_by_path_symlink_or_hard_link) {
  MINFER_REQUIRE_SHARED(kVocab);
  const ScratchDir scratch;
  const auto& dir = scratch.path;
  const auto vocab = dir / "vocab.gguf";
  std::filesystem::copy_file(test::shared_path(kVocab), vocab);
  std::filesystem::create_symlink(vocab, dir / "link.gguf");
  std::filesystem::create_hard_link(vocab, dir / "hard.gguf");
  const auto before = test::read_bytes(vocab);
  for (const std::string& out : {vocab.string(), (dir / "." / "vocab.gguf").string(),
                                (dir / "link.gguf").string(), (dir / "hard.gguf").string()}) {
    const CmdResult r = run_cmd("synth --arch qwen2 --preset tiny --type q8_0 --vocab " + vocab.string() + " -o " + out);
    EXPECT_EQ(r.exit_code, 1) << out << "\n" << r.out;
    EXPECT_CONTAINS(r.out, out + ": the output would overwrite the input " + vocab.string());
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
  EXPECT_TRUE(test::read_bytes(vocab) == before);
}

TEST(SynthCommand, bad_inputs_give_one_line_errors_naming_the_value) {
  MINFER_REQUIRE_SHARED(kVocab);
  const ScratchDir scratch;
  const auto& dir = scratch.path;
  const std::string vocab = " --vocab " + test::shared_path(kVocab).string();
  const std::string out = " -o " + (dir / "m.gguf").string();
  struct Case {
    std::string args;
    std::string message;
  };
  const Case cases[] = {
      {"--arch qwen2 --preset tiny --type q3_X" + vocab + out, "unknown type 'q3_X'"},
      {"--arch qwen2 --preset huge --type q8_0" + vocab + out, "unknown preset 'huge' for qwen2"},
      {"--arch gpt2 --preset tiny --type q8_0" + vocab + out, "unknown architecture 'gpt2'"},
      {"--arch qwen2 --preset tiny --type q8_0 --vocab " + (dir / "nope.gguf").string() + out,
       "vocab file " + (dir / "nope.gguf").string() + " does not exist"},
      {"--arch qwen2 --preset tiny --type q8_0" + vocab + " -o " + (dir / "x" / "m.gguf").string(),
       (dir / "x" / "m.gguf").string()},
      {"--arch qwen2 --preset tiny --type q8_0 --layers 5000" + vocab + out, "--layers 5000 is out of range"},
      {"--arch qwen2 --preset tiny --type q8_0 --distinct-rows -4" + vocab + out, "--distinct-rows -4 is out of range"},
      {"--arch qwen2 --preset tiny --type q8_0 --distinct-rows 9999999999999999999999" + vocab + out,
       "--distinct-rows 9999999999999999999999 is out of range: 1..2147483648"},
      {"--arch qwen2 --preset tiny --type q8_0 --distinct-rows ''" + vocab + out, "--distinct-rows '' is not a whole number"},
      {"--arch qwen2 --preset tiny --type q8_0 --distinct-rows 0x10" + vocab + out,
       "--distinct-rows '0x10' is not a whole number"},
      {"--arch qwen2 --preset tiny --type q8_0 --layers 99999999999999999999" + vocab + out,
       "--layers 99999999999999999999 is out of range: 1..1024"},
  };
  for (const Case& c : cases) {
    const CmdResult r = run_cmd("synth " + c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args;
    EXPECT_CONTAINS(r.out, "minfer: error: ");
    EXPECT_CONTAINS(r.out, c.message);
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "m.gguf"));
}

}  // namespace
}  // namespace minfer::convert
