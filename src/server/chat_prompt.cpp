#include "server/chat_prompt.h"

namespace minfer::server {

std::vector<int32_t> chat_prompt_tokens(const chat::ChatTemplate& tmpl, const tok::Tokenizer& tokenizer,
                                        const nlohmann::ordered_json& messages) {
  chat::ChatOptions opt;
  opt.add_generation_prompt = true;
  if (tokenizer.bos() >= 0) opt.bos_token = std::string(tokenizer.token_text(tokenizer.bos()));
  if (tokenizer.eos() >= 0) opt.eos_token = std::string(tokenizer.token_text(tokenizer.eos()));
  const std::string text = tmpl.render(messages, opt);
  return tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/true);
}

}  // namespace minfer::server
