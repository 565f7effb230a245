#include "chat/chat.h"

#include "chat/jinja.h"
#include "core/error.h"

namespace minfer::chat {
namespace {

nlohmann::ordered_json to_json(const std::vector<ChatMessage>& messages) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& m : messages) j.push_back({{"role", m.role}, {"content", m.content}});
  return j;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source) {
  if (source == kChatmlName) return;
  MINFER_CHECK(!source.empty(), "the chat template is empty (use --chat-template chatml for ChatML)");
  try {
    tmpl_ = std::make_unique<jinja::Template>(source);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (use --chat-template chatml to use the built-in ChatML format)");
  }
}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const ChatOptions& opt) const {
  MINFER_CHECK(messages.is_array(), "chat messages must be a JSON array, not {}", messages.type_name());
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    MINFER_CHECK(m.is_object() && m.contains("role") && m["role"].is_string(),
          "chat message {} needs a string \"role\"", i);
  }
  if (!tmpl_) {
    std::vector<ChatMessage> plain;
    for (size_t i = 0; i < messages.size(); ++i) {
      const auto& m = messages[i];
      MINFER_CHECK(m.contains("content") && m["content"].is_string(),
            "chat message {}: the chatml format needs a string \"content\"", i);
      plain.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    return render_chatml(plain, opt.add_generation_prompt);
  }
  jinja::Value ctx = jinja::Value::map();
  auto& c = ctx.as_map();
  c.set("messages", jinja::from_json(messages));
  c.set("add_generation_prompt", jinja::Value(opt.add_generation_prompt));
  if (opt.enable_thinking) c.set("enable_thinking", jinja::Value(*opt.enable_thinking));
  c.set("bos_token", jinja::Value(opt.bos_token));
  c.set("eos_token", jinja::Value(opt.eos_token));
  if (!opt.tools.is_null()) c.set("tools", jinja::from_json(opt.tools));
  return tmpl_->render(ctx);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatOptions& opt) const {
  return render(to_json(messages), opt);
}

std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_chat(std::string_view template_source, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, bool enable_thinking) {
  ChatOptions opt;
  opt.add_generation_prompt = add_generation_prompt;
  opt.enable_thinking = enable_thinking;
  return ChatTemplate(template_source).render(messages, opt);
}

std::string select_chat_template(std::string_view model_template, std::string_view override_value,
                                 std::string_view model_path) {
  if (!override_value.empty()) return std::string(override_value);
  MINFER_CHECK(!model_template.empty(),
        "{}: the model has no tokenizer.chat_template; use --chat-template chatml", model_path);
  return std::string(model_template);
}

}  // namespace minfer::chat
