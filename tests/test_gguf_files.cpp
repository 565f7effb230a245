// The reader on real files made by llama.cpp and gguf-py (../shared/fixtures, ../shared/models):
// every file opens and has the tensors and metadata its README documents; rewriting a file with
// our writer reproduces it byte for byte.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "gguf_test_util.h"

namespace minfer::gguf {
namespace {

namespace fs = std::filesystem;

const char* kQwen2Tiny = "fixtures/models/qwen2-tiny-Q8_0.gguf";
const char* kQwen3Tiny = "fixtures/models/qwen3-tiny-Q4_0.gguf";
const char* kVocab = "fixtures/tokenizer/ggml-vocab-qwen2.gguf";
const char* kDemo = "models/minfer-demo-py-q8_0.gguf";
const char* kDraft = "models/minfer-draft-py-q8_0.gguf";

std::unique_ptr<GgufFile> open_shared(const char* rel) {
  return GgufFile::open(test::shared_path(rel).string());
}

void expect_tensor(const GgufFile& f, const char* name, TensorType type,
                   std::vector<int64_t> ne) {
  const TensorInfo* t = f.find_tensor(name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(t->type, type) << name << " is " << type_name(t->type);
  ASSERT_EQ(t->n_dims, ne.size()) << name;
  for (size_t d = 0; d < ne.size(); ++d) EXPECT_EQ(t->ne[d], ne[d]) << name << " dim " << d;
}

std::map<TensorType, int> count_by_type(const GgufFile& f) {
  std::map<TensorType, int> out;
  for (const TensorInfo& t : f.tensors()) out[t.type] += 1;
  return out;
}

TEST(GgufFiles, OpensEveryGgufFileUnderSharedFixturesAndModels) {
  MINFER_REQUIRE_SHARED("fixtures");
  int opened = 0;
  for (const char* dir : {"fixtures", "models"}) {
    if (!fs::exists(test::shared_path(dir))) continue;
    for (const auto& e : fs::recursive_directory_iterator(test::shared_path(dir))) {
      if (!e.is_regular_file() || e.path().extension() != ".gguf") continue;
      SCOPED_TRACE(e.path().string());
      std::unique_ptr<GgufFile> f;
      ASSERT_NO_THROW(f = GgufFile::open(e.path().string()));
      ++opened;
      EXPECT_GE(f->version(), 2u);
      EXPECT_TRUE(f->get_string("general.architecture").has_value());
      EXPECT_EQ(f->file_size(), fs::file_size(e.path()));
      for (const TensorInfo& t : f->tensors())
        EXPECT_LE(f->data_offset() + t.offset + t.nbytes, f->file_size()) << t.name;
    }
  }
  EXPECT_GE(opened, 3);
}

TEST(GgufFiles, Qwen2TinyHasATiedQ8_0EmbeddingAndTwoLayers) {
  MINFER_REQUIRE_SHARED(kQwen2Tiny);
  const auto f = open_shared(kQwen2Tiny);
  EXPECT_EQ(f->require_string("general.architecture"), "qwen2");
  EXPECT_EQ(f->tensors().size(), 2u + 2u * 12u);  // README: 2 global + 12 per layer
  expect_tensor(*f, "token_embd.weight", TensorType::Q8_0, {256, 151936});
  expect_tensor(*f, "output_norm.weight", TensorType::F32, {256});
  expect_tensor(*f, "blk.1.attn_k.weight", TensorType::Q8_0, {256, 128});
  expect_tensor(*f, "blk.1.attn_k.bias", TensorType::F32, {128});
  expect_tensor(*f, "blk.0.ffn_down.weight", TensorType::Q8_0, {768, 256});
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);  // tied
  EXPECT_EQ(f->find_tensor("token_embd.weight")->nbytes, 256u / 32u * 34u * 151936u);
  EXPECT_EQ(f->require_u32("qwen2.block_count"), 2u);
  EXPECT_EQ(f->require_u32("qwen2.embedding_length"), 256u);
  EXPECT_EQ(f->require_u32("qwen2.attention.head_count_kv"), 2u);
  EXPECT_EQ(f->require_f32("qwen2.rope.freq_base"), 1e6f);
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), 151936u);
}

TEST(GgufFiles, Qwen3TinyHasAnUntiedQ4_0OutputAndQkNorms) {
  MINFER_REQUIRE_SHARED(kQwen3Tiny);
  const auto f = open_shared(kQwen3Tiny);
  EXPECT_EQ(f->require_string("general.architecture"), "qwen3");
  expect_tensor(*f, "token_embd.weight", TensorType::Q4_0, {256, 151936});
  expect_tensor(*f, "output.weight", TensorType::Q4_0, {256, 151936});
  expect_tensor(*f, "blk.0.attn_q_norm.weight", TensorType::F32, {64});
  expect_tensor(*f, "blk.1.attn_k_norm.weight", TensorType::F32, {64});
  EXPECT_EQ(f->find_tensor("blk.0.attn_q.bias"), nullptr);
  EXPECT_EQ(f->require_u32("qwen3.attention.key_length"), 64u);
}

TEST(GgufFiles, VocabOnlyFileHasNoTensorsAndTheFullQwen2Vocabulary) {
  MINFER_REQUIRE_SHARED(kVocab);
  const auto f = open_shared(kVocab);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_TRUE(f->tensors().empty());
  const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.has_value());
  ASSERT_EQ(tokens->size(), 151936u);
  EXPECT_EQ((*tokens)[151643], "<|endoftext|>");
  EXPECT_EQ((*tokens)[151645], "<|im_end|>");
  const auto types = f->get_i32_array("tokenizer.ggml.token_type");
  ASSERT_TRUE(types.has_value());
  ASSERT_EQ(types->size(), 151936u);
  EXPECT_EQ((*types)[151644], 3);  // control
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.merges")->size(), 151387u);
  EXPECT_EQ(f->require_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->require_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(f->require_u32("tokenizer.ggml.bos_token_id"), 151643u);
  EXPECT_EQ(f->require_u32("tokenizer.ggml.eos_token_id"), 151643u);
  EXPECT_TRUE(f->get_string("tokenizer.chat_template").has_value());
}

TEST(GgufFiles, DemoAndDraftModelsHaveTheDocumentedTensorCounts) {
  MINFER_REQUIRE_SHARED(kDemo);
  MINFER_REQUIRE_SHARED(kDraft);
  const auto demo = open_shared(kDemo);
  EXPECT_EQ(demo->file_size(), 53981664u);
  EXPECT_EQ(demo->tensors().size(), 98u);
  EXPECT_EQ(count_by_type(*demo), (std::map<TensorType, int>{{TensorType::F32, 41},
                                                             {TensorType::Q8_0, 57}}));
  EXPECT_EQ(demo->require_u32("qwen2.block_count"), 8u);
  EXPECT_EQ(demo->require_u32("qwen2.context_length"), 2048u);
  EXPECT_EQ(demo->get_bool("tokenizer.ggml.add_bos_token"), false);
  EXPECT_EQ(demo->require_u32("tokenizer.ggml.eos_token_id"), 151645u);
  const auto draft = open_shared(kDraft);
  EXPECT_EQ(draft->tensors().size(), 26u);
  EXPECT_EQ(count_by_type(*draft), (std::map<TensorType, int>{{TensorType::F32, 11},
                                                              {TensorType::Q8_0, 15}}));
  EXPECT_EQ(draft->require_u32("qwen2.embedding_length"), 128u);
}

/// Copies every KV (set_value) and every tensor (same name, type, shape, bytes) of `src`.
void rewrite(const GgufFile& src, const std::string& out) {
  GgufWriter w;
  for (const KeyValue& kv : src.metadata()) w.set_value(kv.key, kv.value);
  for (const TensorInfo& t : src.tensors()) {
    const uint8_t* data = t.data;
    w.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne, t.n_dims),
                 [data](uint8_t* dst, size_t n) { std::memcpy(dst, data, n); });
  }
  w.write(out);
}

TEST(GgufFiles, RewritingLlamaCppFilesReproducesThemByteForByte) {
  // qwen2-tiny was written by llama-quantize (llama.cpp's gguf.cpp), the vocab file by gguf-py:
  // our writer produces the same bytes from the same content, so llama.cpp reads what we write.
  for (const char* rel : {kVocab, kQwen2Tiny}) {
    SCOPED_TRACE(rel);
    MINFER_REQUIRE_SHARED(rel);
    const auto src = open_shared(rel);
    const auto out = (test::temp_dir() / "rewritten.gguf").string();
    rewrite(*src, out);
    const auto a = test::read_bytes(test::shared_path(rel));
    const auto b = test::read_bytes(out);
    ASSERT_EQ(a.size(), b.size());
    const auto mismatch = std::mismatch(a.begin(), a.end(), b.begin());
    EXPECT_TRUE(mismatch.first == a.end()) << "first difference at byte " << (mismatch.first - a.begin());
  }
}

}  // namespace
}  // namespace minfer::gguf
