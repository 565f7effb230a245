// The prompt tokens of a chat request: the ONE place the server turns messages into token ids
// (the chat template's marked render: special tokens come only from the template's own text).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "chat/chat.h"
#include "tokenizer/tokenizer.h"

namespace minfer::server {

/// Renders `messages` ([{role, content}...]) with `tmpl` (generation prompt added, the model's
/// bos/eos texts passed) and tokenizes the result; message content never becomes control
/// tokens (chat::ChatTemplate::tokenize). Throws minfer::Error for a template error
/// (raise_exception in the template included).
std::vector<int32_t> chat_prompt_tokens(const chat::ChatTemplate& tmpl, const tok::Tokenizer& tokenizer,
                                        const nlohmann::ordered_json& messages);

}  // namespace minfer::server
