// libFuzzer target: the request parsing and validation of `minfer serve` (src/server/request.cpp)
// on arbitrary bytes as a chat completions, completions, /tokenize and /detokenize body. Every
// input either parses or is refused with an ApiError of status 400 whose body is valid JSON;
// anything else (another exception, a sanitizer report) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/request.h"

namespace {

template <class F>
void expect_ok_or_400(F&& f) {
  try {
    f();
  } catch (const minfer::server::ApiError& e) {
    if (e.status() != 400) std::abort();
    const auto j = nlohmann::json::parse(e.body(), nullptr, false);
    if (j.is_discarded() || !j["error"]["message"].is_string()) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  using namespace minfer::server;
  expect_ok_or_400([&] {
    const GenerationRequest r = parse_generation_request(body, true);
    if (r.messages.empty() || r.max_tokens == 0 || r.top_logprobs > kMaxTopLogprobs) std::abort();
  });
  expect_ok_or_400([&] {
    const GenerationRequest r = parse_generation_request(body, false);
    if (r.prompt_is_ids ? r.prompt_ids.empty() : r.prompt_text.empty()) std::abort();
  });
  expect_ok_or_400([&] { parse_tokenize_request(body); });
  expect_ok_or_400([&] { parse_detokenize_request(body); });
  return 0;
}
