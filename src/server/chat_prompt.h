// The prompt tokens of a chat request: the ONE place the server turns messages into token ids
// (today: render the chat template, then tokenize the text with special tokens parsed).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "chat/chat.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

/// Renders `messages` ([{role, content}...]) with `tmpl` (generation prompt added, the model's
/// bos/eos texts passed) and tokenizes the result. Throws minfer::Error for a template error
/// (raise_exception in the template included).
std::vector<int32_t> chat_prompt_tokens(const chat::ChatTemplate& tmpl, const tok::Tokenizer& tokenizer,
                                        const nlohmann::ordered_json& messages);

}  // namespace minfer::server
