// Llama 3 and Mistral chat templates (tests/data/chat_templates) rendered by minfer's Jinja
// interpreter, and the rendered prompts tokenized with the fixture vocabularies: the ids are
// llama-tokenize's for the fixture models' chat prompts (../shared/fixtures/models/
// llama-prompts.json), with one BOS (the template prints it).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chat/chat.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace minfer::chat {
namespace {

std::string template_text(const char* name) {
  std::ifstream f(std::string(MINFER_SOURCE_DIR) + "/tests/data/chat_templates/" + name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ChatOptions options(std::string bos, std::string eos) {
  ChatOptions o;
  o.add_generation_prompt = true;
  o.bos_token = std::move(bos);
  o.eos_token = std::move(eos);
  return o;
}

TEST(ChatLlama, Llama3TemplateRendersHeaderTurns) {
  const ChatTemplate t(template_text("llama3.jinja"));
  const auto o = options("<|begin_of_text|>", "<|eot_id|>");
  EXPECT_EQ(t.render(std::vector<ChatMessage>{{"system", "Be brief."}, {"user", " Hi \n"}, {"assistant", "Hello."}, {"user", "Bye"}}, o),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatLlama, MistralTemplateRendersInstTurnsAndRefusesTwoUserTurnsInARow) {
  const ChatTemplate t(template_text("mistral-instruct.jinja"));
  const auto o = options("<s>", "</s>");
  EXPECT_EQ(t.render(std::vector<ChatMessage>{{"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}}, o),
            "<s>[INST] Hi [/INST]Hello.</s>[INST] Bye [/INST]");
  EXPECT_EQ(t.render(std::vector<ChatMessage>{{"system", "Be brief."}, {"user", "Hi"}}, o),
            "<s>[INST] Be brief.\n\nHi [/INST]");
  try {
    t.render(std::vector<ChatMessage>{{"user", "a"}, {"user", "b"}}, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Conversation roles must alternate"), std::string::npos) << e.what();
  }
}

TEST(ChatLlama, RenderedPromptsTokenizeToTheFixtureChatPrompts) {
  const char* prompts = "fixtures/models/llama-prompts.json";
  MINFER_REQUIRE_SHARED(prompts);
  MINFER_REQUIRE_SHARED("fixtures/tokenizer/ggml-vocab-llama-bpe.gguf");
  std::ifstream f(test::shared_path(prompts));
  const auto j = nlohmann::json::parse(f);
  const auto chat_ids = [&](const char* model) {
    for (const auto& p : j["prompts"][model])
      if (p["id"] == "chat") return p["tokens"].get<std::vector<int32_t>>();
    return std::vector<int32_t>{};
  };
  const std::vector<ChatMessage> msgs = {{"user", "What is the capital of France?"}};
  {
    const tok::Tokenizer tk(tok::vocab_from_gguf(
        *gguf::GgufFile::open(test::shared_path("fixtures/tokenizer/ggml-vocab-llama-bpe.gguf").string())));
    const std::string text = ChatTemplate(template_text("llama3.jinja")).render(msgs, options("<|begin_of_text|>", ""));
    // llama-tokenize added a BOS before the text's own <|begin_of_text|>; the template's one is enough.
    auto want = chat_ids("llama3-tiny-Q8_0");
    ASSERT_EQ(want.size(), 18u);
    want.erase(want.begin());
    EXPECT_EQ(tk.encode(text, /*add_special=*/false, /*parse_special=*/true), want);
  }
  {
    const tok::Tokenizer tk(tok::vocab_from_gguf(
        *gguf::GgufFile::open(test::shared_path("fixtures/tokenizer/ggml-vocab-llama-spm.gguf").string())));
    const std::string text = ChatTemplate(template_text("mistral-instruct.jinja")).render(msgs, options("<s>", "</s>"));
    // "<s>" parsed as BOS, then the SentencePiece space prefix after a special token: the ids of
    // llama-tokenize's BOS + "[INST] What is the capital of France? [/INST]".
    EXPECT_EQ(tk.encode(text, false, true), chat_ids("mistral-tiny-Q8_0"));
  }
}

}  // namespace
}  // namespace minfer::chat
