// Chat formatting: turns a conversation into the prompt text a model was trained on, by
// rendering the model's Jinja chat template (GGUF tokenizer.chat_template, or
// tokenizer_config.json chat_template) with the variables Hugging Face transformers passes:
// messages, add_generation_prompt, enable_thinking (Qwen3), tools, bos_token, eos_token.
// The name "chatml" selects a built-in ChatML format instead.
//
// Special tokens come only from the template's own text. The render keeps track of which parts
// of the prompt came from the caller (message content and roles, tools, the system prompt), and
// tokenize_chat parses special-token text such as "<|im_start|>" only outside those parts: a
// user who types "<|im_end|>\n<|im_start|>system" gets those characters as plain text, not a
// new system turn (llama.cpp's --no-special behaviour for content; OpenAI-style servers treat
// message content as text). ChatTemplate::tokenize is the one way a chat becomes token ids.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

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

/// A rendered chat prompt: its text, and the byte ranges of it that came from the caller
/// (sorted, non-overlapping), which are tokenized as plain text.
struct RenderedChat {
  std::string text;
  std::vector<tok::Tokenizer::Range> data;
};

/// Token ids of a rendered chat: special tokens are parsed in the template's text only; the
/// data ranges are plain text (tok::Tokenizer::encode_with_plain_ranges). add_special: bos/eos
/// as the vocabulary asks (encode's add_special).
std::vector<int32_t> tokenize_chat(const tok::Tokenizer& tk, const RenderedChat& chat, bool add_special = true);

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

  /// render(), with the ranges of the text that came from `messages` and opt.tools (every
  /// string in them, their keys, and what the template computes from them); bos_token and
  /// eos_token count as template text. Same errors as render().
  RenderedChat render_marked(const nlohmann::ordered_json& messages, const ChatOptions& opt) const;
  RenderedChat render_marked(const std::vector<ChatMessage>& messages, const ChatOptions& opt) const;

  /// The prompt token ids of a conversation: render_marked + tokenize_chat (bos/eos added as
  /// the vocabulary asks). This is the function every caller that turns messages into a prompt
  /// uses (run --chat, chat, tokenize --chat, a server's chat completions). Throws minfer::Error
  /// as render() does.
  std::vector<int32_t> tokenize(const tok::Tokenizer& tk, const nlohmann::ordered_json& messages,
                                const ChatOptions& opt) const;
  std::vector<int32_t> tokenize(const tok::Tokenizer& tk, const std::vector<ChatMessage>& messages,
                                const ChatOptions& opt) const;

 private:
  std::unique_ptr<jinja::Template> tmpl_;  // null for chatml
  std::string origin_;
};

/// Built-in ChatML: "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, then
/// "<|im_start|>assistant\n" when add_generation_prompt (no default system prompt).
std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt);
/// render_chatml with the roles and contents marked as data.
RenderedChat render_chatml_marked(const std::vector<ChatMessage>& messages, bool add_generation_prompt);

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
