// The Llama vocabularies (../shared/fixtures/tokenizer, copied from llama.cpp 80fb11ac with its
// test-tokenizer-0 vectors): the Llama-3 byte-level BPE (pre-tokenizer llama-bpe) and the
// Llama-2 / Mistral SentencePiece vocabulary. Every vector matches exactly, the fixture models'
// prompts tokenize to llama-tokenize's ids (BOS included), and decoding gives the text back
// (SentencePiece: with the space its prefix rule added).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <random>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace minfer::tok {
namespace {

constexpr const char* kBpe = "fixtures/tokenizer/ggml-vocab-llama-bpe.gguf";
constexpr const char* kSpm = "fixtures/tokenizer/ggml-vocab-llama-spm.gguf";
constexpr const char* kPrompts = "fixtures/models/llama-prompts.json";

std::string file_text(const std::string& rel) {
  const auto b = test::read_bytes(test::shared_path(rel));
  return std::string(b.begin(), b.end());
}

const Tokenizer& llama_bpe() {
  static const Tokenizer t(vocab_from_gguf(*gguf::GgufFile::open(test::shared_path(kBpe).string())));
  return t;
}
const Tokenizer& llama_spm() {
  static const Tokenizer t(vocab_from_gguf(*gguf::GgufFile::open(test::shared_path(kSpm).string())));
  return t;
}

TEST(TokenizerLlama, EveryLlama3BpeVectorMatchesLlamaCpp) {
  MINFER_REQUIRE_SHARED(kBpe);
  const auto inputs = test::read_vocab_test_inputs(file_text(std::string(kBpe) + ".inp"));
  const auto expected = test::read_vocab_test_outputs(file_text(std::string(kBpe) + ".out"));
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(expected.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(llama_bpe().encode(inputs[i], false, false), expected[i]) << "string " << i << ": '" << inputs[i] << "'";
    EXPECT_EQ(llama_bpe().encode_uncached(inputs[i], false, true), expected[i]) << "string " << i;
    EXPECT_EQ(llama_bpe().decode(expected[i]), inputs[i]) << "string " << i;
  }
}

TEST(TokenizerLlama, Llama3DigitsGoInRunsOfThreeAndWholeWordTokensSkipMerges) {
  MINFER_REQUIRE_SHARED(kBpe);
  const Tokenizer& t = llama_bpe();
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::Llama3);
  // "1234567" -> "123" "456" "7": three tokens (Qwen2's pattern gives seven).
  const auto ids = t.encode("1234567", false, false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(t.decode(ids), "1234567");
  EXPECT_EQ(t.token_text(ids[0]), "123");
}

TEST(TokenizerLlama, EveryLlamaSpmVectorMatchesLlamaCpp) {
  MINFER_REQUIRE_SHARED(kSpm);
  const auto inputs = test::read_vocab_test_inputs(file_text(std::string(kSpm) + ".inp"));
  const auto expected = test::read_vocab_test_outputs(file_text(std::string(kSpm) + ".out"));
  ASSERT_EQ(inputs.size(), 46u);
  ASSERT_EQ(expected.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(llama_spm().encode(inputs[i], false, false), expected[i]) << "string " << i << ": '" << inputs[i] << "'";
    EXPECT_EQ(llama_spm().encode(inputs[i], false, true), expected[i]) << "string " << i << " (parse_special)";
    // The prefix rule put one space first.
    EXPECT_EQ(llama_spm().decode(expected[i]), inputs[i].empty() ? "" : " " + inputs[i]) << "string " << i;
  }
}

TEST(TokenizerLlama, FixtureModelPromptsTokenizeAsLlamaTokenize) {
  MINFER_REQUIRE_SHARED(kPrompts);
  MINFER_REQUIRE_SHARED(kBpe);
  MINFER_REQUIRE_SHARED(kSpm);
  const auto j = nlohmann::json::parse(file_text(kPrompts));
  const std::pair<const char*, const Tokenizer*> models[] = {{"llama3-tiny-Q8_0", &llama_bpe()},
                                                             {"mistral-tiny-Q8_0", &llama_spm()}};
  for (const auto& [name, tok] : models) {
    ASSERT_EQ(j["prompts"][name].size(), 3u) << name;
    for (const auto& p : j["prompts"][name]) {
      const auto want = p["tokens"].get<std::vector<int32_t>>();
      // llama-tokenize's defaults: add_special (BOS as the vocab asks), parse_special on.
      EXPECT_EQ(tok->encode(p["text"].get<std::string>(), true, true), want) << name << " " << p["id"];
    }
  }
}

TEST(TokenizerLlama, SpmSpecialTokensAndByteFallback) {
  MINFER_REQUIRE_SHARED(kSpm);
  const Tokenizer& t = llama_spm();
  EXPECT_EQ(t.n_vocab(), 32000);
  EXPECT_EQ(t.bos(), 1);
  EXPECT_EQ(t.eos(), 2);
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_TRUE(t.is_eog(2));
  EXPECT_FALSE(t.is_eog(1));
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::None);
  // BOS first; "<s>" in the text is the control token only with parse_special, and the text
  // after a special token gets the space prefix again.
  EXPECT_EQ(t.encode("Hi", true, false).front(), 1);
  const auto with = t.encode("<s>Hi", false, true);
  EXPECT_EQ(with.front(), 1);
  EXPECT_EQ(std::vector<int32_t>(with.begin() + 1, with.end()), t.encode("Hi", false, false));
  EXPECT_NE(t.encode("<s>Hi", false, false).front(), 1);
  // A character outside the vocabulary falls back to its UTF-8 bytes <0xF0> <0x9F> ...
  const auto emoji = t.encode("\xF0\x9F\x9A\x80", false, false);  // U+1F680
  ASSERT_EQ(emoji.size(), 5u);                                     // '▁' + 4 byte tokens
  EXPECT_EQ(t.token_text(emoji[1]), "<0xF0>");
  EXPECT_EQ(t.token_type(emoji[1]), TokenType::Byte);
  EXPECT_EQ(t.token_to_piece(emoji[1]), "\xF0");
  EXPECT_EQ(t.decode(emoji), " \xF0\x9F\x9A\x80");
  // An invalid byte is a byte token too, so encoding loses nothing.
  EXPECT_EQ(t.decode(t.encode("a\xFF" "b", false, false)), " a\xFF" "b");
  EXPECT_EQ(t.token_to_piece(2, false), "");
  EXPECT_EQ(t.token_to_piece(2, true), "</s>");
}

TEST(TokenizerLlama, SpmStreamingDetokenizerRoundTripsRandomText) {
  MINFER_REQUIRE_SHARED(kSpm);
  std::mt19937 rng(26);
  const char* alphabet[] = {" ", "  ", "\n", "\t", "a", "Hello", "world", "\xC3\xA9", "\xE5\x8C\x97",
                            "\xF0\x9F\x9A\x80", "<0x41>", "'s", "123", ".", "<s>"};
  for (int iter = 0; iter < 500; ++iter) {
    std::string s;
    const int n = std::uniform_int_distribution<int>(1, 20)(rng);
    for (int i = 0; i < n; ++i) s += alphabet[std::uniform_int_distribution<size_t>(0, std::size(alphabet) - 1)(rng)];
    const auto ids = llama_spm().encode(s, false, false);
    Detokenizer d(llama_spm(), true);
    std::string streamed;
    for (int32_t id : ids) streamed += d.push(id);
    streamed += d.flush();
    ASSERT_EQ(streamed, " " + s) << "iteration " << iter;
  }
  // The one loss SentencePiece has by design: a '▁' in the text reads back as a space.
  EXPECT_EQ(llama_spm().decode(llama_spm().encode("a\xE2\x96\x81" "b", false, false)), " a b");
}

TEST(TokenizerLlama, SpmPieceHelpers) {
  EXPECT_EQ(spm_escape("a b  c", false), "a\xE2\x96\x81" "b\xE2\x96\x81\xE2\x96\x81" "c");
  EXPECT_EQ(spm_escape("x", true), "\xE2\x96\x81x");
  EXPECT_EQ(spm_piece("\xE2\x96\x81the", TokenType::Normal), " the");
  EXPECT_EQ(spm_piece("<0x0A>", TokenType::Byte), "\n");
  EXPECT_EQ(spm_piece("<0x0a>", TokenType::Byte), "\n");
  EXPECT_EQ(spm_piece("\xE2\x96\x81", TokenType::Control), "\xE2\x96\x81");
}

TEST(TokenizerLlama, SpmVocabErrorsNameTheKey) {
  MINFER_REQUIRE_SHARED(kSpm);
  const auto src = gguf::GgufFile::open(test::shared_path(kSpm).string());
  const auto dir = test::temp_dir();
  auto rewrite = [&](const std::string& name, auto&& edit) {
    gguf::GgufWriter w;
    for (const auto& kv : src->metadata()) w.set_value(kv.key, kv.value);
    edit(w);
    const auto path = (dir / name).string();
    w.write(path);
    try {
      Tokenizer t(vocab_from_gguf(*gguf::GgufFile::open(path)));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  std::string msg = rewrite("scores.gguf", [](gguf::GgufWriter& w) {
    w.set_f32_array("tokenizer.ggml.scores", std::vector<float>{1.0f, 2.0f});
  });
  EXPECT_NE(msg.find("tokenizer.ggml.scores has 2 entries for 32000 tokens"), std::string::npos) << msg;
  // The pre-tokenizer name is not used by a SentencePiece vocabulary; for BPE an unknown one
  // stays an error (TokenizerFixture.GgufVocabErrorsNameTheKeyAndValue).
  msg = rewrite("pre.gguf", [](gguf::GgufWriter& w) { w.set_string("tokenizer.ggml.pre", "whatever"); });
  EXPECT_EQ(msg, "(no error)");
  // As a BPE vocabulary its pre-tokenizer name 'default' is unknown: an error, no fallback.
  msg = rewrite("bpe.gguf", [](gguf::GgufWriter& w) { w.set_string("tokenizer.ggml.model", "gpt2"); });
  EXPECT_NE(msg.find("unknown pre-tokenizer tokenizer.ggml.pre = 'default'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace minfer::tok
