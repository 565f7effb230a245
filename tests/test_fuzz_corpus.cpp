// The GGUF fuzz seeds (fuzz/corpus/gguf/, written by fuzz/make_gguf_corpus.cpp) are what their
// names say: every model-*.gguf loads as a model, every bad-*.gguf is refused with a one-line
// minfer::Error naming the file. So fuzz_model starts from inputs that reach the model checks,
// and from inputs one mutation away from each refusal.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/error.h"
#include "models/model.h"
#include "test_util.h"

namespace minfer {
namespace {

namespace fs = std::filesystem;

fs::path corpus_dir() { return fs::path(MINFER_SOURCE_DIR) / "fuzz" / "corpus" / "gguf"; }

TEST(FuzzCorpus, EveryModelSeedLoadsAndEveryBadSeedIsRefusedNamingTheFile) {
  int models = 0, bad = 0;
  for (const auto& e : fs::directory_iterator(corpus_dir())) {
    const std::string name = e.path().filename().string();
    SCOPED_TRACE(name);
    if (name.rfind("model-", 0) == 0) {
      std::shared_ptr<Model> m;
      ASSERT_NO_THROW(m = Model::load(e.path().string()));
      ASSERT_NO_THROW((void)m->tokenizer());  // built on its own thread: its errors come from here
      EXPECT_EQ(m->hparams().n_layer, 1);
      EXPECT_EQ(m->hparams().n_embd, 32);
      ++models;
    } else if (name.rfind("bad-", 0) == 0) {
      try {
        (void)Model::load(e.path().string())->tokenizer();
        ADD_FAILURE() << "loaded";
      } catch (const Error& err) {
        const std::string msg = err.what();
        EXPECT_NE(msg.find(name), std::string::npos) << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      }
      ++bad;
    }
  }
  EXPECT_GE(models, 6);
  EXPECT_GE(bad, 11);
}

TEST(FuzzCorpus, ModelSeedsCoverEverySupportedTypeTiedAndUntiedQwen2AndQwen3) {
  std::set<TensorType> types;
  std::set<std::string> arches;
  bool tied = false, untied = false, vocab = false;
  for (const auto& e : fs::directory_iterator(corpus_dir())) {
    if (e.path().filename().string().rfind("model-", 0) != 0) continue;
    const auto m = Model::load(e.path().string());
    for (const auto& w : m->weights()) types.insert(w.type);
    arches.insert(m->hparams().arch_name);
    (m->hparams().tied_output ? tied : untied) = true;
    vocab = vocab || m->tokenizer() != nullptr;
  }
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q4_0, TensorType::Q4_1,
                       TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K,
                       TensorType::Q6_K})
    EXPECT_TRUE(types.count(t)) << type_name(t);
  EXPECT_EQ(arches, (std::set<std::string>{"qwen2", "qwen3"}));
  EXPECT_TRUE(tied);
  EXPECT_TRUE(untied);
  EXPECT_TRUE(vocab);
}

}  // namespace
}  // namespace minfer
