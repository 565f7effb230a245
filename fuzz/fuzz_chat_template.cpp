// libFuzzer target: the Jinja subset of chat templates. The input is split at the first NUL
// byte into a template and a message text; the template is parsed and rendered with a small
// conversation. Any outcome other than a result or a minfer::Error (a crash, a sanitizer report,
// a hang, unbounded memory) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "chat/chat.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string source = in.substr(0, nul);
  const std::string text = nul == std::string::npos ? "hi" : in.substr(nul + 1);
  try {
    minfer::chat::ChatTemplate t(source);
    minfer::chat::ChatOptions opt;
    opt.enable_thinking = (size & 1) != 0;
    (void)t.render(std::vector<minfer::chat::ChatMessage>{{"system", "S"}, {"user", text}, {"assistant", text}, {"user", "q"}}, opt);
  } catch (const minfer::Error&) {
  }
  return 0;
}
