// libFuzzer target: the Jinja subset of chat templates. The input is split at the first NUL
// byte into a template and a message text; the template is parsed and rendered with a small
// conversation (and a tool list), and the marked render is tokenized as the chat commands do.
// Any outcome other than a result or a minfer::Error (a crash, a sanitizer report, a hang,
// unbounded memory) is a finding, and so is a broken invariant of the chat tokenization:
// data ranges out of order or outside the text, ids that do not decode to the rendered text, or
// a control token made from bytes inside a data range.
// Seeds: fuzz/corpus/chat_template/ and tests/data/chat_templates/; dictionary: fuzz/jinja.dict.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "chat/chat.h"
#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

// The bytes, and ChatML's control tokens: every other id is one byte.
const minfer::tok::Tokenizer& tokenizer() {
  static const minfer::tok::Tokenizer tk = [] {
    minfer::tok::VocabData d;
    d.source = "fuzz-chat-vocab";
    for (int b = 0; b < 256; ++b) {
      d.tokens.push_back(minfer::tok::bytes_to_token_text(std::string(1, static_cast<char>(b))));
      d.types.push_back(minfer::tok::TokenType::Normal);
    }
    for (const char* s : {"<|im_start|>", "<|im_end|>"}) {
      d.tokens.push_back(s);
      d.types.push_back(minfer::tok::TokenType::Control);
    }
    return minfer::tok::Tokenizer(std::move(d));
  }();
  return tk;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string source = in.substr(0, nul);
  const std::string text = nul == std::string::npos ? "hi" : in.substr(nul + 1);
  const minfer::tok::Tokenizer& tk = tokenizer();
  try {
    minfer::chat::ChatTemplate t(source);
    minfer::chat::ChatOptions opt;
    opt.enable_thinking = (size & 1) != 0;
    opt.bos_token = "<|im_start|>";
    opt.eos_token = "<|im_end|>";
    if (size & 2) {
      opt.tools = nlohmann::ordered_json::array();
      opt.tools.push_back({{"type", "function"}, {"function", {{"name", text}, {"parameters", {{"n", 9223372036854775807LL}}}}}});
    }
    const std::vector<minfer::chat::ChatMessage> msgs{{"system", "S"}, {"user", text}, {"assistant", text}, {"user", "q"}};
    const minfer::chat::RenderedChat r = t.render_marked(msgs, opt);
    size_t prev = 0;
    for (const auto& d : r.data)
      if (d.begin < prev || d.begin >= d.end || d.end > r.text.size()) std::abort();  // sorted, non-empty, inside
      else prev = d.end + 1;  // touching ranges are merged
    const std::vector<int32_t> ids = minfer::chat::tokenize_chat(tk, r, false);
    if (minfer::tok::utf8_is_valid(r.text) && tk.decode(ids) != r.text) std::abort();  // invalid bytes: U+FFFD
    // With one id per byte outside control tokens, each id's bytes are known: no control
    // token may overlap a data range.
    if (minfer::tok::utf8_is_valid(r.text)) {
      size_t pos = 0, k = 0;
      for (int32_t id : ids) {
        const size_t len = tk.token_to_piece(id).size();
        if (tk.token_type(id) == minfer::tok::TokenType::Control) {
          while (k < r.data.size() && r.data[k].end <= pos) ++k;
          if (k < r.data.size() && r.data[k].begin < pos + len) std::abort();
        }
        pos += len;
      }
    }
  } catch (const minfer::Error&) {
  }
  return 0;
}
