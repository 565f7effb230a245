// Chat formatting: turns a conversation into the prompt text a model was trained on, by
// rendering the model's Jinja chat template (GGUF tokenizer.chat_template, or
// tokenizer_config.json chat_template) with the variables Hugging Face transformers passes:
// messages, add_generation_prompt, enable_thinking (Qwen3), tools, bos_token, eos_token.
// The name "chatml" selects a built-in ChatML format instead.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace minfer::jinja {
class Template;
}

namespace minfer::chat {

/// One message: role ("system", "user", "assistant", "tool") and its text.
struct ChatMessage {
  std::string role;
  std::string content;
};

struct ChatOptions {
  bool add_generation_prompt = true;  ///< end with the assistant header so the model replies
  /// Qwen3: false adds the empty "<think>\n\n</think>\n\n" block after the generation prompt.
  /// nullopt: the variable is not defined (the template's default).
  std::optional<bool> enable_thinking;
  std::string bos_token;                ///< text of the bos token, for templates that print it
  std::string eos_token;                ///< text of the eos token
  nlohmann::ordered_json tools = nullptr;  ///< list of tool definitions, or null for none
};

/// The name that selects the built-in ChatML format.
inline constexpr std::string_view kChatmlName = "chatml";

/// A parsed chat template (or the built-in ChatML format). Reusable and thread-safe to render.
class ChatTemplate {
 public:
  /// `source` is Jinja text, or "chatml". Throws minfer::Error "chat template line N: ..."
  /// (with a hint to use --chat-template chatml) when the template uses Jinja outside the
  /// supported subset, or when `source` is empty.
  /// `origin` names where the text came from (a file path, or "tokenizer.chat_template of
  /// MODEL"); when not empty, every parse and render error starts with "ORIGIN: ".
  explicit ChatTemplate(std::string_view source, std::string origin = {});
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  bool is_chatml() const { return !tmpl_; }

  /// Renders `messages` (a JSON array of objects with at least "role" and "content"; other
  /// fields such as tool_calls or reasoning_content are passed through to the template).
  /// Throws minfer::Error for render-time errors, including raise_exception() in the template.
  std::string render(const nlohmann::ordered_json& messages, const ChatOptions& opt) const;
  std::string render(const std::vector<ChatMessage>& messages, const ChatOptions& opt) const;

 private:
  std::unique_ptr<jinja::Template> tmpl_;  // null for chatml
  std::string origin_;
};

/// Built-in ChatML: "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, then
/// "<|im_start|>assistant\n" when add_generation_prompt (no default system prompt).
std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt);

/// One call: ChatTemplate(template_source).render(messages, {add_generation_prompt,
/// enable_thinking}).
std::string render_chat(std::string_view template_source, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, bool enable_thinking);

/// The template text to use (the --chat-template option of run, chat and tokenize):
/// `override_value` "chatml" gives "chatml"; any other non-empty value is the path of a Jinja
/// template file, whose whole content is returned; empty gives the model's template. Throws
/// minfer::Error naming the option and path when the file cannot be read (missing, a directory),
/// and, for a model without a template, an error that suggests --chat-template chatml.
std::string select_chat_template(std::string_view model_template, std::string_view override_value,
                                 std::string_view model_path);

/// Where select_chat_template's text comes from, for error messages: "chatml", the template
/// file path, or "tokenizer.chat_template of MODEL_PATH".
std::string chat_template_origin(std::string_view override_value, std::string_view model_path);

}  // namespace minfer::chat
