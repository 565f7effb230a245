// The tokenizer on the real Qwen2 vocabulary (../shared/fixtures/tokenizer, llama.cpp's
// test-tokenizer-0 vectors) and on the Qwen2.5 vocabulary of the demo model: every vector
// matches, the tokenizer.json loader gives the same ids, decode(encode(s)) == s for the vectors
// and for random valid UTF-8, and the GGUF special-token metadata is read as llama.cpp reads it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "chat/chat.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace minfer::tok {
namespace {

constexpr const char* kVocab = "fixtures/tokenizer/ggml-vocab-qwen2.gguf";

std::string file_text(const std::string& rel) {
  const auto b = test::read_bytes(test::shared_path(rel));
  return std::string(b.begin(), b.end());
}

// One Qwen2 tokenizer for the whole suite (the vocabulary takes ~0.5 s to load).
const Tokenizer& qwen2() {
  static const Tokenizer t(vocab_from_gguf(*gguf::GgufFile::open(test::shared_path(kVocab).string())));
  return t;
}

TEST(TokenizerFixture, EveryQwen2VectorMatchesLlamaCpp) {
  MINFER_REQUIRE_SHARED(kVocab);
  const auto inputs = test::read_vocab_test_inputs(file_text(std::string(kVocab) + ".inp"));
  const auto expected = test::read_vocab_test_outputs(file_text(std::string(kVocab) + ".out"));
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(expected.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(qwen2().encode(inputs[i], false, false), expected[i]) << "string " << i << ": '" << inputs[i] << "'";
    EXPECT_EQ(qwen2().encode(inputs[i], false, true), expected[i]) << "string " << i << " (parse_special)";
    EXPECT_EQ(qwen2().decode(expected[i]), inputs[i]) << "string " << i;
  }
}

TEST(TokenizerFixture, ExtraQwen2VectorsMatchLlamaCppWithAndWithoutParseSpecial) {
  MINFER_REQUIRE_SHARED(kVocab);
  auto data = [](const char* name) {
    const auto b = test::read_bytes(std::string(MINFER_SOURCE_DIR) + "/tests/data/tokenizer/" + name);
    return std::string(b.begin(), b.end());
  };
  const auto inputs = test::read_vocab_test_inputs(data("qwen2-extra.inp"));
  const auto plain = test::read_vocab_test_outputs(data("qwen2-extra.out"));
  const auto special = test::read_vocab_test_outputs(data("qwen2-extra.out-special"));
  ASSERT_EQ(inputs.size(), 208u);
  ASSERT_EQ(plain.size(), inputs.size());
  ASSERT_EQ(special.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(qwen2().encode(inputs[i], false, false), plain[i]) << "string " << i << ": '" << inputs[i] << "'";
    EXPECT_EQ(qwen2().encode(inputs[i], false, true), special[i]) << "string " << i << " (parse_special)";
    if (utf8_is_valid(inputs[i])) {
      EXPECT_EQ(qwen2().decode(plain[i]), inputs[i]) << "string " << i;
    }
  }
}

// The repository's demo model carries the Qwen2.5 vocabulary: the same tokens and merges as the
// Qwen2 vocabulary below id 151643 (they differ only in the added tokens from 151646 on), so the
// llama.cpp vectors run on any clone, without ../shared's vocabulary file.
const Tokenizer& qwen25_of_the_repo_demo_model() {
  static const Tokenizer t(
      vocab_from_gguf(*gguf::GgufFile::open(test::repo_demo_model())));
  return t;
}

TEST(TokenizerFixture, EveryQwen2VectorMatchesLlamaCppWithTheRepoDemoModelsQwen25Vocab) {
  MINFER_REQUIRE_SHARED(std::string(kVocab) + ".inp");
  const auto inputs = test::read_vocab_test_inputs(file_text(std::string(kVocab) + ".inp"));
  const auto expected = test::read_vocab_test_outputs(file_text(std::string(kVocab) + ".out"));
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(expected.size(), inputs.size());
  const Tokenizer& t = qwen25_of_the_repo_demo_model();
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(t.encode(inputs[i], false, false), expected[i]) << "string " << i << ": '" << inputs[i] << "'";
    EXPECT_EQ(t.decode(expected[i]), inputs[i]) << "string " << i;
  }
}

TEST(TokenizerFixture, ExtraQwen2VectorsWithoutAddedTokensMatchLlamaCppWithTheRepoDemoModelsVocab) {
  auto data = [](const char* name) {
    const auto b = test::read_bytes(std::string(MINFER_SOURCE_DIR) + "/tests/data/tokenizer/" + name);
    return std::string(b.begin(), b.end());
  };
  const auto inputs = test::read_vocab_test_inputs(data("qwen2-extra.inp"));
  const auto plain = test::read_vocab_test_outputs(data("qwen2-extra.out"));
  const auto special = test::read_vocab_test_outputs(data("qwen2-extra.out-special"));
  ASSERT_EQ(inputs.size(), 208u);
  ASSERT_EQ(plain.size(), inputs.size());
  ASSERT_EQ(special.size(), inputs.size());
  const Tokenizer& t = qwen25_of_the_repo_demo_model();
  size_t checked = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    // Text that names an added token tokenizes differently in the two vocabularies by design: the
    // Qwen2 vocabulary's [PADn] tokens, the Qwen2.5 one's <tool_call>, <|fim_prefix|>... (ids from
    // 151643 on). Such strings are left out; the rest must give llama.cpp's ids.
    const auto has_added = [](const std::vector<int32_t>& ids) {
      return std::any_of(ids.begin(), ids.end(), [](int32_t id) { return id >= 151643; });
    };
    if (has_added(plain[i]) || has_added(special[i]) || has_added(t.encode(inputs[i], false, true))) continue;
    EXPECT_EQ(t.encode(inputs[i], false, false), plain[i]) << "string " << i << ": '" << inputs[i] << "'";
    EXPECT_EQ(t.encode(inputs[i], false, true), special[i]) << "string " << i << " (parse_special)";
    ++checked;
  }
  EXPECT_GE(checked, 100u);  // about half of the 208 strings have no added-token text
  std::printf("[ vocab ] %zu of %zu extra vectors checked on the Qwen2.5 vocabulary\n", checked, inputs.size());
}

TEST(TokenizerFixture, TokenizerJsonMadeFromTheGgufVocabEncodesTheSame) {
  MINFER_REQUIRE_SHARED(kVocab);
  const VocabData gguf_vocab = vocab_from_gguf(*gguf::GgufFile::open(test::shared_path(kVocab).string()));
  const auto dir = test::temp_dir();
  test::write_tokenizer_json(gguf_vocab, dir / "strings.json", false);
  test::write_tokenizer_json(gguf_vocab, dir / "pairs.json", true);
  const auto inputs = test::read_vocab_test_inputs(file_text(std::string(kVocab) + ".inp"));
  const auto expected = test::read_vocab_test_outputs(file_text(std::string(kVocab) + ".out"));
  for (const char* name : {"strings.json", "pairs.json"}) {
    const VocabData json_vocab = vocab_from_tokenizer_json((dir / name).string());
    EXPECT_EQ(json_vocab.tokens, gguf_vocab.tokens);
    EXPECT_EQ(json_vocab.merges, gguf_vocab.merges);
    EXPECT_EQ(json_vocab.types, gguf_vocab.types);
    const Tokenizer tok(json_vocab);
    for (size_t i = 0; i < inputs.size(); ++i)
      EXPECT_EQ(tok.encode(inputs[i], false, false), expected[i]) << name << " string " << i;
  }
}

std::string random_utf8(std::mt19937& rng, size_t n_chars) {
  static const uint32_t kPicks[] = {' ', '\n', '\t', '\r', '\'', 0xA0, 0x3000, 0x301, 0x200D, 0x17F, 0xFFFD};
  std::string s;
  std::uniform_int_distribution<int> kind(0, 11);
  for (size_t i = 0; i < n_chars; ++i) {
    uint32_t cp;
    switch (kind(rng)) {
      case 0: cp = std::uniform_int_distribution<uint32_t>(0x80, 0x7FF)(rng); break;
      case 1: cp = std::uniform_int_distribution<uint32_t>(0x800, 0xFFFF)(rng); break;
      case 2: cp = std::uniform_int_distribution<uint32_t>(0x10000, 0x10FFFF)(rng); break;
      case 3: cp = std::uniform_int_distribution<uint32_t>(0x4E00, 0x9FFF)(rng); break;
      case 4: cp = std::uniform_int_distribution<uint32_t>(0x1F300, 0x1FAFF)(rng); break;
      case 5: cp = kPicks[std::uniform_int_distribution<size_t>(0, std::size(kPicks) - 1)(rng)]; break;
      case 6: cp = std::uniform_int_distribution<uint32_t>(0, 0x1F)(rng); break;
      default: cp = std::uniform_int_distribution<uint32_t>(0x20, 0x7E)(rng); break;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
    utf8_append(s, cp);
  }
  return s;
}

TEST(TokenizerFixture, RoundTripOfRandomValidUtf8WithTheQwen2Vocab) {
  MINFER_REQUIRE_SHARED(kVocab);
  std::mt19937 rng(2026);
  for (int iter = 0; iter < 2000; ++iter) {
    const std::string s = random_utf8(rng, std::uniform_int_distribution<size_t>(0, 80)(rng));
    for (bool parse_special : {false, true}) {
      const std::vector<int32_t> ids = qwen2().encode(s, false, parse_special);
      ASSERT_EQ(qwen2().decode(ids), s) << "iteration " << iter;
      Detokenizer d(qwen2(), true);
      std::string streamed;
      for (int32_t id : ids) streamed += d.push(id);
      streamed += d.flush();
      ASSERT_EQ(streamed, s) << "iteration " << iter;
      ASSERT_EQ(qwen2().encode_uncached(s, false, parse_special), ids) << "iteration " << iter;
    }
  }
}

TEST(TokenizerFixture, SpecialTokensOfTheQwen2Vocab) {
  MINFER_REQUIRE_SHARED(kVocab);
  const Tokenizer& t = qwen2();
  EXPECT_EQ(t.n_vocab(), 151936);
  EXPECT_EQ(t.bos(), 151643);
  EXPECT_EQ(t.eos(), 151643);
  EXPECT_EQ(t.pad(), 151643);
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.eot(), 151645);  // <|im_end|>, found by its text as llama.cpp does
  EXPECT_TRUE(t.is_eog(151643));
  EXPECT_TRUE(t.is_eog(151645));
  EXPECT_FALSE(t.is_eog(151644));
  EXPECT_EQ(t.eog_ids(), (std::vector<int32_t>{151643, 151645}));
  EXPECT_EQ(t.encode("<|im_start|>user\nHi<|im_end|>", false, true),
            (std::vector<int32_t>{151644, 872, 198, 13048, 151645}));
  // [PADn] tokens are user-defined: recognised even with parse_special off.
  EXPECT_EQ(t.encode("x[PAD151700]", false, false), (std::vector<int32_t>{87, 151700}));
  EXPECT_EQ(t.token_to_piece(151645, true), "<|im_end|>");
  EXPECT_EQ(t.token_to_piece(151645, false), "");
}

TEST(TokenizerFixture, TheQwen2ChatTemplateFromTheGgufRenders) {
  MINFER_REQUIRE_SHARED(kVocab);
  EXPECT_EQ(chat::render_chat(qwen2().chat_template(), {{"user", "Hello"}}, true, true),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
}

TEST(TokenizerFixture, Qwen25VocabOfTheDemoModel) {
  const Tokenizer& t = qwen25_of_the_repo_demo_model();
  EXPECT_EQ(t.eos(), 151645);
  EXPECT_EQ(t.token_type(151657), TokenType::UserDefined);  // <tool_call>
  EXPECT_EQ(t.encode("<tool_call>", false, false), (std::vector<int32_t>{151657}));
  EXPECT_EQ(t.encode("<|fim_prefix|>", false, true), (std::vector<int32_t>{151659}));
  for (int32_t id : {151643, 151645, 151662, 151663, 151664}) EXPECT_TRUE(t.is_eog(id)) << id;
  EXPECT_FALSE(t.is_eog(151659));
  // [PAD151665] is unused (type 5): it decodes to its text, so a generated one is seen, not dropped.
  EXPECT_EQ(t.token_type(151665), TokenType::Unused);
  EXPECT_EQ(t.token_to_piece(151665, false), "[PAD151665]");
  const std::string t25 = t.chat_template();
  EXPECT_NE(t25.find("You are Qwen, created by Alibaba Cloud."), std::string::npos);
}

TEST(TokenizerFixture, GgufVocabErrorsNameTheKeyAndValue) {
  MINFER_REQUIRE_SHARED(kVocab);
  const auto src = gguf::GgufFile::open(test::shared_path(kVocab).string());
  const auto dir = test::temp_dir();
  auto rewrite = [&](const std::string& name, auto&& edit) {
    gguf::GgufWriter w;
    for (const auto& kv : src->metadata()) w.set_value(kv.key, kv.value);
    edit(w);
    const auto path = (dir / name).string();
    w.write(path);
    const auto file = gguf::GgufFile::open(path);
    std::string error = "(no error)";
    try {
      vocab_from_gguf(*file);
    } catch (const Error& e) {
      error = e.what();
    }
    // The unvalidated data handed to the Tokenizer (the Model's path) fails the same way.
    std::string via_tokenizer = "(no error)";
    try {
      Tokenizer t(vocab_from_gguf_unvalidated(*file));
    } catch (const Error& e) {
      via_tokenizer = e.what();
    }
    EXPECT_EQ(via_tokenizer, error) << name;
    return error;
  };
  std::string msg = rewrite("pre.gguf", [](gguf::GgufWriter& w) { w.set_string("tokenizer.ggml.pre", "gpt-4o"); });
  EXPECT_NE(msg.find("unknown pre-tokenizer tokenizer.ggml.pre = 'gpt-4o'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pre.gguf"), std::string::npos) << msg;
  // 'llama' (SentencePiece) is supported now (test_tokenizer_llama.cpp); WordPiece is not.
  msg = rewrite("model.gguf", [](gguf::GgufWriter& w) { w.set_string("tokenizer.ggml.model", "bert"); });
  EXPECT_NE(msg.find("tokenizer.ggml.model = 'bert'"), std::string::npos) << msg;
  msg = rewrite("eos.gguf", [](gguf::GgufWriter& w) { w.set_u32("tokenizer.ggml.eos_token_id", 999999); });
  EXPECT_NE(msg.find("eos token id 999999"), std::string::npos) << msg;
  msg = rewrite("merges.gguf", [](gguf::GgufWriter& w) { w.remove("tokenizer.ggml.merges"); });
  EXPECT_NE(msg.find("tokenizer.ggml.merges"), std::string::npos) << msg;
  msg = rewrite("types.gguf", [](gguf::GgufWriter& w) { w.set_i32_array("tokenizer.ggml.token_type", std::vector<int32_t>{1, 1}); });
  EXPECT_NE(msg.find("token_type has 2 entries for 151936 tokens"), std::string::npos) << msg;
  msg = rewrite("duplicate.gguf", [&](gguf::GgufWriter& w) {
    const auto tokens = src->get_string_array("tokenizer.ggml.tokens");
    std::vector<std::string_view> copy(tokens->begin(), tokens->end());
    copy[1000] = copy[999];
    w.set_string_array("tokenizer.ggml.tokens", copy);
  });
  EXPECT_NE(msg.find("tokens 999 and 1000 have the same text"), std::string::npos) << msg;
}

}  // namespace
}  // namespace minfer::tok
