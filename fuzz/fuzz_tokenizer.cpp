// libFuzzer target: tokenizer encode/decode on arbitrary bytes with a small byte-level
// vocabulary (256 byte tokens, a few merges, control and user-defined added tokens). Checks
// that encode never fails, that decode(encode(x)) == x for valid UTF-8 x, and that the
// streaming detokenizer's output is valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tokenizer/byte_level.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

minfer::tok::Tokenizer make() {
  using minfer::tok::bytes_to_token_text;
  minfer::tok::VocabData d;
  d.source = "fuzz-vocab";
  for (int b = 0; b < 256; ++b) {
    d.tokens.push_back(bytes_to_token_text(std::string(1, static_cast<char>(b))));
    d.types.push_back(minfer::tok::TokenType::Normal);
  }
  const char* merges[][2] = {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"}, {"a", "a"}, {"\xe4", "\xb8"}};
  for (auto& m : merges) {
    d.merges.emplace_back(bytes_to_token_text(m[0]), bytes_to_token_text(m[1]));
    d.tokens.push_back(bytes_to_token_text(std::string(m[0]) + m[1]));
    d.types.push_back(minfer::tok::TokenType::Normal);
  }
  d.tokens.push_back("<|im_end|>");
  d.types.push_back(minfer::tok::TokenType::Control);
  d.tokens.push_back("<tool>");
  d.types.push_back(minfer::tok::TokenType::UserDefined);
  return minfer::tok::Tokenizer(std::move(d));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const minfer::tok::Tokenizer tok = make();
  const std::string in(reinterpret_cast<const char*>(data), size);
  for (bool parse_special : {false, true}) {
    const auto ids = tok.encode(in, false, parse_special);
    if (minfer::tok::utf8_is_valid(in) && tok.decode(ids) != in) std::abort();
    minfer::tok::Detokenizer d(tok, true);
    std::string out;
    for (int32_t id : ids) out += d.push(id);
    out += d.flush();
    if (!minfer::tok::utf8_is_valid(out)) std::abort();
  }
  return 0;
}
