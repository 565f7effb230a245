// Chat rendering with the official Qwen2, Qwen2.5 and Qwen3 templates (tests/data/chat_templates).
// Expected texts are written by hand from the ChatML format the templates document:
// "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, "<|im_start|>assistant\n" as the
// generation prompt, Qwen2.5's default system prompt, Qwen3's empty think block when thinking
// is off and its removal of earlier turns' reasoning.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "chat/chat.h"
#include "core/error.h"
#include "test_util.h"

namespace minfer::chat {
namespace {

using json = nlohmann::ordered_json;

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(MINFER_SOURCE_DIR) + "/tests/data/chat_templates/" + name, std::ios::binary);
  EXPECT_TRUE(static_cast<bool>(in)) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The Qwen2 template as stored in ../shared/fixtures/tokenizer/ggml-vocab-qwen2.gguf
// (tokenizer.chat_template).
const char* kQwen2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

const std::string kQwen25System =
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n";

const std::vector<ChatMessage> kMultiTurn = {{"system", "You are terse."},
                                             {"user", "Hi"},
                                             {"assistant", "Hello!"},
                                             {"user", "How are you?"}};

const std::string kMultiTurnChatml =
    "<|im_start|>system\nYou are terse.<|im_end|>\n"
    "<|im_start|>user\nHi<|im_end|>\n"
    "<|im_start|>assistant\nHello!<|im_end|>\n"
    "<|im_start|>user\nHow are you?<|im_end|>\n";

TEST(ChatQwen2, AddsTheDefaultSystemPromptAndTheGenerationPrompt) {
  EXPECT_EQ(render_chat(kQwen2Template, {{"user", "Hello"}}, true, true),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(kQwen2Template, kMultiTurn, false, true), kMultiTurnChatml);
}

TEST(ChatQwen25, SingleTurnGetsTheDefaultSystemPrompt) {
  const std::string t = read_template("qwen2.5-instruct.jinja");
  EXPECT_EQ(render_chat(t, {{"user", "Hello"}}, true, true),
            kQwen25System + "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatQwen25, MultiTurnWithSystemPrompt) {
  const std::string t = read_template("qwen2.5-instruct.jinja");
  EXPECT_EQ(render_chat(t, kMultiTurn, true, true), kMultiTurnChatml + "<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(t, kMultiTurn, false, true), kMultiTurnChatml);
  // enable_thinking means nothing to Qwen2.5.
  EXPECT_EQ(render_chat(t, kMultiTurn, true, false), kMultiTurnChatml + "<|im_start|>assistant\n");
}

TEST(ChatQwen25, ToolsAndToolCallsRenderAsDocumented) {
  ChatTemplate t(read_template("qwen2.5-instruct.jinja"));
  ChatOptions opt;
  opt.tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  const json messages = json::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
       {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "{\"temp\": 20}"}])");
  EXPECT_EQ(t.render(messages, opt),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n"
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
            "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
            "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
            "</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n{\"temp\": 20}\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatQwen3, ThinkingOnLeavesTheGenerationPromptOpen) {
  const std::string t = read_template("qwen3.jinja");
  EXPECT_EQ(render_chat(t, {{"user", "Hello"}}, true, true),
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  // Not passing enable_thinking at all is the same as thinking on.
  EXPECT_EQ(ChatTemplate(t).render(std::vector<ChatMessage>{{"user", "Hello"}}, ChatOptions{}),
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatQwen3, ThinkingOffAddsAnEmptyThinkBlock) {
  const std::string t = read_template("qwen3.jinja");
  EXPECT_EQ(render_chat(t, {{"user", "Hello"}}, true, false),
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

TEST(ChatQwen3, MultiTurnDropsEarlierReasoningAndHasNoDefaultSystemPrompt) {
  const std::string t = read_template("qwen3.jinja");
  const std::vector<ChatMessage> msgs = {{"system", "S"},
                                         {"user", "Q1"},
                                         {"assistant", "<think>\nstep 1\n</think>\n\nA1"},
                                         {"user", "Q2"}};
  const std::string history =
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n"
      "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n";
  EXPECT_EQ(render_chat(t, msgs, true, false), history + "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(render_chat(t, msgs, true, true), history + "<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(t, msgs, false, true), history);
}

TEST(ChatQwen3, TheLatestAssistantTurnKeepsItsReasoning) {
  const std::string t = read_template("qwen3.jinja");
  EXPECT_EQ(render_chat(t, {{"user", "Q"}, {"assistant", "<think>\nR\n</think>\n\nA"}}, false, true),
            "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nR\n</think>\n\nA<|im_end|>\n");
}

TEST(ChatChatml, BuiltInFormatNeedsNoTemplate) {
  EXPECT_EQ(render_chat("chatml", kMultiTurn, true, true), kMultiTurnChatml + "<|im_start|>assistant\n");
  EXPECT_EQ(render_chatml(kMultiTurn, false), kMultiTurnChatml);
}

TEST(ChatErrors, AnUnrenderableTemplateSuggestsTheChatmlOverride) {
  try {
    ChatTemplate t("{% macro m() %}{% endmacro %}");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("macro"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--chat-template chatml"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ChatTemplate(""), Error);
  EXPECT_EQ(select_chat_template("", "chatml", "m.gguf"), "chatml");
  EXPECT_EQ(select_chat_template("T", "", "m.gguf"), "T");
  EXPECT_THROW(select_chat_template("", "", "m.gguf"), Error);
  // Qwen2.5 raises nothing, but indexing messages[0] of an empty list is an error, not a crash.
  EXPECT_THROW(render_chat(read_template("qwen2.5-instruct.jinja"), {}, true, true), Error);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// --chat-template is "chatml" or a template file for run, chat and tokenize alike.
TEST(ChatTemplateOption, IsChatmlOrAReadableTemplateFile) {
  const std::filesystem::path dir = test::temp_dir();
  const std::string file = (dir / "override.jinja").string();
  {
    std::ofstream out(file, std::ios::binary);
    out << "{% for m in messages %}[{{ m.content }}]{% endfor %}";
  }
  EXPECT_EQ(select_chat_template("MODEL", file, "m.gguf"), "{% for m in messages %}[{{ m.content }}]{% endfor %}");
  EXPECT_EQ(render_chat(select_chat_template("MODEL", file, "m.gguf"), {{"user", "hi"}}, true, true), "[hi]");

  const std::string missing = (dir / "no-such.jinja").string();
  std::string e = error_of([&] { select_chat_template("MODEL", missing, "m.gguf"); });
  EXPECT_NE(e.find("--chat-template " + missing + ": neither 'chatml' nor a readable template file"),
            std::string::npos) << e;
  e = error_of([&] { select_chat_template("MODEL", dir.string(), "m.gguf"); });
  EXPECT_NE(e.find("(it is a directory)"), std::string::npos) << e;
  // Template text given directly is not a file name: an error, not a template.
  e = error_of([&] { select_chat_template("MODEL", "{{ 'x' }}", "m.gguf"); });
  EXPECT_NE(e.find("neither 'chatml' nor a readable template file"), std::string::npos) << e;
}

TEST(ChatTemplateOption, ErrorsNameWhereTheTemplateCameFrom) {
  EXPECT_EQ(chat_template_origin("", "m.gguf"), "tokenizer.chat_template of m.gguf");
  EXPECT_EQ(chat_template_origin("t.jinja", "m.gguf"), "t.jinja");
  std::string e = error_of([] { ChatTemplate("{% macro m() %}{% endmacro %}", "t.jinja"); });
  EXPECT_EQ(e.rfind("t.jinja: chat template line 1: ", 0), 0u) << e;
  e = error_of([] {
    ChatTemplate("{{ raise_exception('nope') }}", "tokenizer.chat_template of m.gguf").render(kMultiTurn, {});
  });
  EXPECT_EQ(e.rfind("tokenizer.chat_template of m.gguf: chat template line 1: ", 0), 0u) << e;
  EXPECT_NE(e.find("nope"), std::string::npos) << e;
  std::string chain = "{{ 1";
  for (int i = 0; i < 30000; ++i) chain += "+1";
  e = error_of([&] { ChatTemplate(chain + " }}", "long.jinja"); });
  EXPECT_EQ(e.rfind("long.jinja: chat template line 1: expression too long", 0), 0u) << e;
}

}  // namespace
}  // namespace minfer::chat
