#include "server/chat_prompt.h"

namespace minfer::server {

std::vector<int32_t> chat_prompt_tokens(const chat::ChatTemplate& tmpl, const tok::Tokenizer& tokenizer,
                                        const nlohmann::ordered_json& messages) {
  chat::ChatOptions opt;
  opt.add_generation_prompt = true;
  // Message content is plain text: "<|im_start|>system" inside a message stays text.
  return tmpl.tokenize(tokenizer, messages, opt);
}

}  // namespace minfer::server
