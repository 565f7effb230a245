#include "chat/chat.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string_view>

#include "chat/jinja.h"
#include "core/error.h"
#include "core/read_file.h"

namespace minfer::chat {
namespace {

nlohmann::ordered_json to_json(const std::vector<ChatMessage>& messages) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& m : messages) j.push_back({{"role", m.role}, {"content", m.content}});
  return j;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::string origin) : origin_(std::move(origin)) {
  if (source == kChatmlName) return;
  const std::string prefix = origin_.empty() ? std::string() : origin_ + ": ";
  MINFER_CHECK(!source.empty(), "{}the chat template is empty (use --chat-template chatml for ChatML)", prefix);
  try {
    tmpl_ = std::make_unique<jinja::Template>(source);
  } catch (const Error& e) {
    throw Error(prefix + e.what() + " (use --chat-template chatml to use the built-in ChatML format)");
  }
}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

RenderedChat ChatTemplate::render_marked(const nlohmann::ordered_json& messages, const ChatOptions& opt) const {
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
    return render_chatml_marked(plain, opt.add_generation_prompt);
  }
  jinja::Value ctx = jinja::Value::map();
  auto& c = ctx.as_map();
  c.set("messages", jinja::from_json(messages));  // from_json marks every string as data
  c.set("add_generation_prompt", jinja::Value(opt.add_generation_prompt));
  if (opt.enable_thinking) c.set("enable_thinking", jinja::Value(*opt.enable_thinking));
  c.set("bos_token", jinja::Value(opt.bos_token));  // the vocabulary's own token texts: not data
  c.set("eos_token", jinja::Value(opt.eos_token));
  if (!opt.tools.is_null()) c.set("tools", jinja::from_json(opt.tools));
  jinja::Rendered r;
  if (origin_.empty()) {
    r = tmpl_->render_marked(ctx);
  } else {
    try {
      r = tmpl_->render_marked(ctx);
    } catch (const Error& e) {
      throw Error(origin_ + ": " + e.what());
    }
  }
  RenderedChat out;
  out.text = std::move(r.text);
  out.data.reserve(r.data.size());
  for (const jinja::DataSpan& d : r.data) out.data.push_back({d.begin, d.end});
  return out;
}

RenderedChat ChatTemplate::render_marked(const std::vector<ChatMessage>& messages, const ChatOptions& opt) const {
  return render_marked(to_json(messages), opt);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const ChatOptions& opt) const {
  return render_marked(messages, opt).text;
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatOptions& opt) const {
  return render(to_json(messages), opt);
}

namespace {
/// `opt` with bos_token / eos_token set from the vocabulary where the caller left them empty
/// (Llama-3 templates print `bos_token` themselves).
ChatOptions with_special_texts(ChatOptions opt, const tok::Tokenizer& tk) {
  if (opt.bos_token.empty() && tk.bos() >= 0) opt.bos_token = std::string(tk.token_text(tk.bos()));
  if (opt.eos_token.empty() && tk.eos() >= 0) opt.eos_token = std::string(tk.token_text(tk.eos()));
  return opt;
}
}  // namespace

std::vector<int32_t> ChatTemplate::tokenize(const tok::Tokenizer& tk, const nlohmann::ordered_json& messages,
                                            const ChatOptions& opt) const {
  return tokenize_chat(tk, render_marked(messages, with_special_texts(opt, tk)));
}

std::vector<int32_t> ChatTemplate::tokenize(const tok::Tokenizer& tk, const std::vector<ChatMessage>& messages,
                                            const ChatOptions& opt) const {
  return tokenize_chat(tk, render_marked(messages, with_special_texts(opt, tk)));
}

std::vector<int32_t> tokenize_chat(const tok::Tokenizer& tk, const RenderedChat& chat, bool add_special) {
  // A template that prints the BOS text itself (Llama-3's "{{ bos_token }}") gets no second BOS,
  // as llama.cpp's chat path does; the text must be the template's, not the caller's.
  bool template_bos = false;
  if (add_special && tk.add_bos() && tk.bos() >= 0) {
    const std::string_view bos = tk.token_text(tk.bos());
    template_bos = !bos.empty() && std::string_view(chat.text).starts_with(bos) &&
                   (chat.data.empty() || chat.data.front().begin >= bos.size());
  }
  std::vector<int32_t> ids = tk.encode_with_plain_ranges(chat.text, chat.data, add_special && !template_bos);
  if (template_bos && tk.add_eos() && tk.eos() >= 0) ids.push_back(tk.eos());
  return ids;
}

RenderedChat render_chatml_marked(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  RenderedChat out;
  auto data = [&](const std::string& s) {
    if (s.empty()) return;
    const size_t b = out.text.size();
    out.text += s;
    out.data.push_back({b, out.text.size()});
  };
  for (const auto& m : messages) {
    out.text += "<|im_start|>";
    data(m.role);
    out.text += "\n";
    data(m.content);
    out.text += "<|im_end|>\n";
  }
  if (add_generation_prompt) out.text += "<|im_start|>assistant\n";
  return out;
}

std::string render_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  return render_chatml_marked(messages, add_generation_prompt).text;
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
  if (override_value == kChatmlName) return std::string(kChatmlName);
  if (!override_value.empty()) {
    const std::string path(override_value);
    std::error_code ec;
    MINFER_CHECK(std::filesystem::is_regular_file(path, ec),
                 "--chat-template {}: neither 'chatml' nor a readable template file{}", path,
                 std::filesystem::is_directory(path, ec) ? " (it is a directory)" : "");
    // Opened without blocking and checked again on the descriptor (a path swapped for a FIFO
    // after the check above is refused, not waited on); bounded like every input.
    return read_file_bytes(path, "--chat-template", kSmallFileLimitBytes, FileKinds::kRegular);
  }
  MINFER_CHECK(!model_template.empty(),
        "{}: the model has no tokenizer.chat_template; use --chat-template chatml", model_path);
  return std::string(model_template);
}

std::string chat_template_origin(std::string_view override_value, std::string_view model_path) {
  if (override_value.empty()) return fmt::format("tokenizer.chat_template of {}", model_path);
  return std::string(override_value);
}

}  // namespace minfer::chat
